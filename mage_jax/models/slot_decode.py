"""Continuous-batching math over a fixed-shape KV cache of slots (pure jitted functions).

The embedded rollout server (`engine/generate_batcher.py`) keeps one `KVCache` whose rows are
slots: a request is prefilled into a free slot, then every active slot advances one token
per decode step, `steps` steps per call, and a finished request's slot is reused by the next
one, so requests join and leave between calls without waiting for each other. Each slot
has its own write index (`KVCache.index` is [S] here, a scalar in `sampling.generate`): the
decoder runs per slot under `jax.vmap`, each row seeing a one-row cache.

Per-row state lives on the host and travels with each call as small [S] arrays (`Rows`);
the device keeps only the cache (donated, so it is updated in place). A row's token i
uses the key fold_in(key(seed), i), its own temperature / top_p / greedy flag, exactly as
`sampling.generate` with per-row keys, so a request samples the same tokens alone or next to
any other rows. Rows past their end (EOS, max_tokens, free slots) keep computing; the host
drops what they produce, which keeps the step branch-free and the shapes fixed.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx, struct

from mage_jax.models.sampling import KVCache, last_logits, prefill
from mage_jax.models.vocab_serving import rows as vocab_rows
from mage_jax.models.vocab_serving import sample as sample_vocab


class ModelDef:
  """A split model's structure (nnx graphdef + the state's treedef) as one static jit
  argument, hashed once. The weights travel as a flat list of arrays (`split`): per call,
  hashing an nnx GraphDef cost ~0.2 ms and flattening an nnx.State ~1 ms of CPU, against
  a ~10 ms decode call for one row of the tiny engine model."""

  def __init__(self, graphdef, treedef):
    self.graphdef, self.treedef = graphdef, treedef
    self._hash = hash((graphdef, treedef))

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other) -> bool:
    return self is other or (isinstance(other, ModelDef) and self._hash == other._hash
                             and self.treedef == other.treedef and self.graphdef == other.graphdef)

  def merge(self, leaves):
    return nnx.merge(self.graphdef, jax.tree.unflatten(self.treedef, leaves))


def split(model) -> tuple[ModelDef, list[jax.Array]]:
  graphdef, state = nnx.split(model)
  leaves, treedef = jax.tree.flatten(state)
  return ModelDef(graphdef, treedef), leaves


@struct.dataclass
class Rows:
  """Per-slot sampling parameters and decode state, [S] each."""
  token: jax.Array        # int32: the last sampled token, fed at the next step
  position: jax.Array     # int32: its position (prompt length + tokens sampled before it)
  count: jax.Array        # int32: tokens sampled so far (the next token's key index)
  seed: jax.Array         # uint32: the request's seed; key = jax.random.key(seed)
  temperature: jax.Array  # float32 (ignored for greedy rows)
  top_p: jax.Array        # float32
  greedy: jax.Array       # bool


def init_pool(model, rows: int, max_len: int) -> KVCache:
  cache = model.init_cache(rows, max_len)
  return cache.replace(index=jnp.zeros((rows,), jnp.int32))


@functools.partial(jax.jit, static_argnames=("rows", "max_len"))
def relayout(cache: KVCache, source: jax.Array, *, rows: int, max_len: int) -> KVCache:
  """A pool of `rows` x `max_len` whose slot i holds old slot source[i] (-1: empty)."""
  def move(x, fill):
    taken = jnp.where((source >= 0).reshape((-1,) + (1,) * (x.ndim - 1)),
                      x[jnp.maximum(source, 0)], fill)
    if x.ndim == 1:
      return taken
    pad = [(0, 0), (0, max_len - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(taken, pad)
  return KVCache(k=tuple(move(k, 0) for k in cache.k), v=tuple(move(v, 0) for v in cache.v),
                 segment_ids=move(cache.segment_ids, 0), positions=move(cache.positions, 0),
                 index=move(cache.index, 0))


def _keys(seed: jax.Array, count: jax.Array) -> jax.Array:
  return jax.vmap(lambda s, i: jax.random.fold_in(jax.random.key(s), i))(seed, count)


@functools.partial(jax.jit, static_argnames=("model_def",))
def prefill_row(model_def: ModelDef, leaves, table, tokens, length, seed, temperature, top_p, greedy,
                vision_inputs, race=None):
  """One right-padded prompt [1, L] into a fresh one-row cache of its own length L, and its token 0.

  -> (token [1], log-prob [1], cache [1, L]). The cache is L long, not the pool's length: the
  prompt's attention is then L x L instead of L x max_len (a 1,024-token prompt in a 4,096-slot
  pool cost 4x), and the compile depends on L alone. `insert_row` pads it into a pool slot.
  Requests arrive one by one, and a pool of any row count takes the row through `insert_row`.
  `table`: a vocab_serving table (the model decodes on its distinct rows) or None; tokens are
  full ids either way. `race`: `vocab_serving.row_race(table)`, to sample on the rows."""
  model = model_def.merge(leaves)
  cache = model.init_cache(1, tokens.shape[1])
  logits, cache = prefill(model, vocab_rows(table, tokens), length, cache, **vision_inputs)
  token, logp = sample_vocab(table, race, logits, _keys(seed, jnp.zeros_like(length)), greedy=greedy,
                             temperature=temperature, top_p=top_p)
  # The next write goes right after the prompt's last real token (its padding is empty, segment
  # 0, and decode overwrites it), so a row's slot i always holds sequence position i: the layout
  # `extend_slot` relies on to reuse the row's prefix for a later request.
  return token, logp, cache.replace(index=length[0])


@functools.partial(jax.jit, donate_argnames=("pool",))
def insert_row(pool: KVCache, row: KVCache, slot) -> KVCache:
  """Pool slot `slot` := the one-row cache `row` (all of it: the slot's old contents go), padded
  with empty entries (segment 0) to the pool's length."""
  def put(old, new):
    new = new[0]
    pad = [(0, old.shape[1] - new.shape[0])] + [(0, 0)] * (new.ndim - 1)
    return jax.lax.dynamic_update_index_in_dim(old, jnp.pad(new, pad), slot, 0)
  return KVCache(k=tuple(map(put, pool.k, row.k)), v=tuple(map(put, pool.v, row.v)),
                 segment_ids=put(pool.segment_ids, row.segment_ids),
                 positions=put(pool.positions, row.positions),
                 index=pool.index.at[slot].set(row.index))


@functools.partial(jax.jit, donate_argnames=("pool",))
def copy_row(pool: KVCache, source, slot) -> KVCache:
  """Pool slot `slot` := slot `source` (a live row whose prefix a new request shares)."""
  def cp(x):
    return jax.lax.dynamic_update_index_in_dim(x, jax.lax.dynamic_index_in_dim(x, source, 0, False), slot, 0)
  return jax.tree.map(cp, pool)


@functools.partial(jax.jit, static_argnames=("length",))
def take_row(pool: KVCache, slot, *, length: int) -> KVCache:
  """A copy of slot `slot`'s first `length` cache entries as a one-row cache [1, length] (a finished
  request's row, kept for a later request that shares its prefix)."""
  def tk(x):
    row = jax.lax.dynamic_index_in_dim(x, slot, 0, keepdims=x.ndim > 1)
    return row[:, :length] if x.ndim > 1 else row
  return jax.tree.map(tk, pool)


@functools.partial(jax.jit, static_argnames=("model_def",))
def embed_tokens(model_def: ModelDef, leaves, table, tokens, vision_inputs):
  """Input embeddings [1, S, D] of right-padded tokens [1, S] (full ids), images spliced in:
  `extend_slot`'s input, so that its compile depends on S and the pool alone, not on the images."""
  return model_def.merge(leaves).embed_inputs(vocab_rows(table, tokens), **vision_inputs)


@jax.jit
def first_token(table, logits, seed, temperature, top_p, greedy, race=None):
  """A request's token 0 from its prompt's last logits [1, V or rows], as `prefill_row` samples it;
  a jit of its own, compiled once, where `extend_slot` compiles per pool and rest length."""
  return sample_vocab(table, race, logits, _keys(seed, jnp.zeros(seed.shape, jnp.int32)), greedy=greedy,
                      temperature=temperature, top_p=top_p)


@functools.partial(jax.jit, static_argnames=("model_def",), donate_argnames=("pool",))
def extend_slot(model_def: ModelDef, leaves, pool: KVCache, slot, embeds, length, start):
  """Prefix reuse: slot `slot` already holds a sequence whose first `start` positions equal this
  request's prompt (slot i = position i). The rest of the prompt, `embeds` [1, S, D] (right-padded,
  `length` [1] real tokens; `embed_tokens`), runs at positions start.. written from slot `start`.
  -> (the logits at its last real token [1, V or rows] for `first_token`, pool). They equal a whole
  prefill's up to float rounding (the cached keys and values are the same numbers).
  The row's entries from position `start` on are also dropped (segment 0), although causality
  already hides them (their positions are at least their slots, beyond any query's). The pool
  must hold start + S slots (a write past the end would be clamped, not raised)."""
  model = model_def.merge(leaves)
  row = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, slot, 0, keepdims=x.ndim > 1), pool)
  row = row.replace(segment_ids=jnp.where(row.positions < start, row.segment_ids, 0), index=start)
  offsets = jnp.arange(embeds.shape[1], dtype=jnp.int32)[None]
  segment_ids = (offsets < length[:, None]).astype(jnp.int32)
  hidden, row = model.decode(embeds, start + offsets, segment_ids, row)
  last = jnp.take_along_axis(hidden, (length - 1)[:, None, None], axis=1)[:, 0]
  row = row.replace(index=start + length[0])
  put = lambda old, new: jax.lax.dynamic_update_index_in_dim(old, new[0] if new.ndim > 0 else new, slot, 0)
  return last_logits(model, last), jax.tree.map(put, pool, row)


@functools.partial(jax.jit, static_argnames=("model_def", "steps"), donate_argnames=("pool",))
def decode_slots(model_def: ModelDef, leaves, table, pool: KVCache, rows: Rows, *, steps: int, race=None):
  """`steps` decode steps for every slot. -> (tokens [steps, S], log-probs [steps, S], pool).
  `table` and `race` as in `prefill_row`."""
  model = model_def.merge(leaves)

  def one_slot(embed, position, cache):   # a one-row cache with a scalar index
    cache = jax.tree.map(lambda x: x[None] if x.ndim else x, cache)
    hidden, cache = model.decode(embed[None, None], position[None, None],
                                 jnp.ones((1, 1), jnp.int32), cache)
    return hidden[0, 0], jax.tree.map(lambda x: x[0] if x.ndim else x, cache)

  def step(carry, _):
    pool, token, position, count = carry
    embeds = model.embed_inputs(vocab_rows(table, token)[:, None])[:, 0]
    hidden, pool = jax.vmap(one_slot)(embeds, position, pool)
    token, logp = sample_vocab(table, race, last_logits(model, hidden), _keys(rows.seed, count),
                               greedy=rows.greedy, temperature=rows.temperature, top_p=rows.top_p)
    return (pool, token, position + 1, count + 1), (token, logp)

  (pool, *_), (tokens, logps) = jax.lax.scan(
      step, (pool, rows.token, rows.position, rows.count), None, length=steps)
  return tokens, logps, pool
