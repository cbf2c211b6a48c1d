"""KV cache, prefill/decode steps and sampling for any decoder-protocol model.

The model must implement the decoder protocol (see `mage_jax.models.qwen3`):
`embed_inputs`, `decode`, `init_cache`, `lm_head_kernel` (Qwen3ForCausalLM
and MageVL do).

Cache layout: per layer k, v [B, S_max, Hkv, D] in the compute dtype, plus
the slots' segment ids and positions [B, S_max] and one write index shared by
all rows. Prompts are right-padded: a prefill writes all L slots, padding slots
get segment 0 and are never attended; generated token i of row b sits in slot
L + i with position len_b + i. Empty slots have segment 0.

Logits are computed only for each row's last prompt token and for each new
token ([B, V] per step), never [T, V] for a whole prompt.

Log-probs returned are of the *processed* distribution that was sampled from
(log-softmax of logits / temperature, restricted to the top-p nucleus and
renormalised), like vLLM's `processed_logprobs`. With greedy=True they are the
raw log-softmax of the logits (temperature and top_p ignored).

Batched serving (the embedded rollout server) passes one key per row and per-row
temperature / top_p: each row's step-i key is fold_in(row_key, i), so a row samples
the same tokens whatever else shares its batch.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from mage_jax.models.config import IM_END_ID, PAD_ID, Qwen3Config
from mage_jax.models.layers import as_dtype


@struct.dataclass
class KVCache:
  k: tuple[jax.Array, ...]      # per layer [B, S_max, Hkv, D]
  v: tuple[jax.Array, ...]
  segment_ids: jax.Array        # [B, S_max] int32, 0 = empty or padding
  positions: jax.Array          # [B, S_max] int32
  index: jax.Array              # int32 scalar: next slot to write

  @property
  def max_len(self) -> int:
    return self.segment_ids.shape[1]


def init_kv_cache(cfg: Qwen3Config, batch_size: int, max_len: int) -> KVCache:
  shape = (batch_size, max_len, cfg.num_key_value_heads, cfg.head_dim)
  dtype = as_dtype(cfg.compute_dtype)
  zeros = lambda: jnp.zeros(shape, dtype)
  return KVCache(k=tuple(zeros() for _ in range(cfg.num_hidden_layers)),
                 v=tuple(zeros() for _ in range(cfg.num_hidden_layers)),
                 segment_ids=jnp.zeros((batch_size, max_len), jnp.int32),
                 positions=jnp.zeros((batch_size, max_len), jnp.int32),
                 index=jnp.zeros((), jnp.int32))


def last_logits(model, hidden: jax.Array) -> jax.Array:
  """hidden [B, D] -> fp32 logits [B, V] through the model's LM head."""
  kernel = model.lm_head_kernel()
  dtype = hidden.dtype
  return jnp.dot(hidden, kernel.astype(dtype), preferred_element_type=jnp.float32)


def prefill(model, tokens: jax.Array, lengths: jax.Array, cache: KVCache,
            **vision_inputs) -> tuple[jax.Array, KVCache]:
  """Run the right-padded prompt [B, L] through the model; logits [B, V] at each row's last token."""
  b, length = tokens.shape
  slot = jnp.arange(length, dtype=jnp.int32)[None, :]
  segment_ids = (slot < lengths[:, None]).astype(jnp.int32)
  positions = jnp.broadcast_to(slot, (b, length))
  embeds = model.embed_inputs(tokens, **vision_inputs)
  hidden, cache = model.decode(embeds, positions, segment_ids, cache)
  last = jnp.take_along_axis(hidden, (lengths - 1)[:, None, None], axis=1)[:, 0]
  return last_logits(model, last), cache


def decode_step(model, tokens: jax.Array, positions: jax.Array,
                cache: KVCache) -> tuple[jax.Array, KVCache]:
  """One new token per row: tokens, positions [B] -> logits [B, V], cache."""
  embeds = model.embed_inputs(tokens[:, None])
  segment_ids = jnp.ones_like(tokens)[:, None]
  hidden, cache = model.decode(embeds, positions[:, None], segment_ids, cache)
  return last_logits(model, hidden[:, 0]), cache


def process_logits(logits: jax.Array, temperature: float | jax.Array,
                   top_p: float | jax.Array) -> jax.Array:
  """Temperature then top-p (nucleus) filtering; tokens outside the nucleus get -inf.

  The nucleus is the smallest prefix of tokens sorted by probability whose mass
  reaches top_p (the most likely token is always kept).
  """
  temperature, top_p = _per_row(temperature), _per_row(top_p)
  logits = logits.astype(jnp.float32) / temperature
  # top_p >= 1 keeps everything: skip the [B, V] sort (RL samples at top_p = 1).
  return jax.lax.cond(jnp.all(top_p >= 1.0), lambda x: x, lambda x: _nucleus(x, top_p), logits)


def _per_row(value) -> jax.Array:
  """A scalar, or [B] values broadcast against [B, V]."""
  value = jnp.asarray(value, jnp.float32)
  return value[:, None] if value.ndim == 1 else value


def _nucleus(logits: jax.Array, top_p: jax.Array) -> jax.Array:
  order = jnp.argsort(-logits, axis=-1)
  sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
  probs = jax.nn.softmax(sorted_logits, axis=-1)
  mass_before = jnp.cumsum(probs, axis=-1) - probs
  keep_sorted = (mass_before < top_p) | (top_p >= 1.0)  # a top_p = 1 row next to others: all kept
  keep_sorted = keep_sorted.at[..., 0].set(True)
  keep = jnp.zeros_like(keep_sorted).at[
      jnp.arange(logits.shape[0])[:, None], order].set(keep_sorted)
  return jnp.where(keep, logits, -jnp.inf)


def sample_token(logits: jax.Array, rng: jax.Array | None, *, greedy, temperature,
                 top_p) -> tuple[jax.Array, jax.Array]:
  """-> (token [B] int32, log-prob [B] of that token; see module docstring).

  `greedy` is a Python bool for every row, or a [B] bool array (the rollout server's
  slots mix greedy and sampled requests; greedy rows ignore temperature and top_p).
  """
  logits = logits.astype(jnp.float32)
  if isinstance(greedy, bool) and greedy:
    token = first_max(logits)
    return token, _gather(logits, token) - jax.nn.logsumexp(logits, axis=-1)
  rows = greedy if not isinstance(greedy, bool) else jnp.zeros(logits.shape[:1], bool)
  temperature = jnp.where(rows, 1.0, jnp.broadcast_to(jnp.asarray(temperature, jnp.float32),
                                                       rows.shape))
  top_p = jnp.where(rows, 1.0, jnp.broadcast_to(jnp.asarray(top_p, jnp.float32), rows.shape))
  processed = process_logits(logits, temperature, top_p)
  keys = rng if _is_key_batch(rng) else jax.random.split(rng, rows.shape[0])  # one key per row
  token, lse = race_sample(processed, keys, rows)
  return token, _gather(processed, token) - lse


def _gather(x: jax.Array, index: jax.Array) -> jax.Array:
  return jnp.take_along_axis(x, index[:, None], axis=-1)[:, 0]


def first_true(cond: jax.Array) -> jax.Array:
  """Index of the first True along the last axis (its size where none is)."""
  n = cond.shape[-1]
  return jnp.min(jnp.where(cond, jnp.arange(n, dtype=jnp.int32), n), axis=-1)


def first_max(x: jax.Array) -> jax.Array:
  """argmax over the last axis (first of ties) as two plain reductions: XLA:CPU's variadic
  argmax reduce is ~3-4x slower over a 151,936-token row."""
  return first_true(x == jnp.max(x, axis=-1, keepdims=True))


def race_chunk(v: int) -> int:
  """The race's chunk width for a vocabulary of v: a divisor of v near sqrt(v), so the logits
  reshape into [chunks, width] without a padded copy (151,936 = 1,187 x 128), else sqrt(v)."""
  root = v ** 0.5
  divisors = [d for d in range(max(1, int(root / 4)), int(root * 4) + 1) if v % d == 0]
  return min(divisors, key=lambda d: abs(d - root)) if divisors else max(1, round(root))


@jax.jit   # one compiled kernel also when called eagerly (sample_token outside a jit)
def race_sample(logits: jax.Array, keys: jax.Array,
                greedy: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """One draw per row from softmax(logits [B, V]) with the row's key (keys [B]); rows where
  `greedy` [B] is set take the first argmax instead.

  -> (token [B] int32, logsumexp [B]). The exponential race (argmin_i E_i / p_i with
  E_i ~ Exp(1) is distributed as p; Gumbel-max is the same race in logs), run in two
  levels: a race among the vocabulary's chunks (`race_chunk`) weighted by their mass, then
  among the tokens of the winning chunk; P(token) = P(chunk) * p / P(chunk) = p, exactly. So
  a row needs two reductions over V (the chunk maxima, then the chunk masses relative to
  them, which also give the logsumexp) and ~2 sqrt(V) random numbers, where
  `jax.random.categorical` draws V threefry numbers per row per step: on CPU that was
  ~4 ms of a ~8 ms decode step for one row of a 151,936-token vocabulary. The chunk maxima
  also give the greedy token (first chunk holding the maximum, first maximum inside it),
  so greedy rows cost no extra pass. As with Gumbel-max (and unlike an inverse-CDF draw,
  whose pick moves with the last bits of a cumulative sum) a winner changes only if two
  ratios tie within float rounding, so a row's draw does not depend on the batch it shares
  (its logits differ in the last bits with the batch size). Tokens of zero probability
  (-inf logits, outside the nucleus) never win.
  """
  b, v = logits.shape
  size = race_chunk(v)
  chunks = -(-v // size)
  x = logits
  if chunks * size != v:
    x = jnp.pad(x, ((0, 0), (0, chunks * size - v)), constant_values=-jnp.inf)
  x = x.reshape(b, chunks, size)
  top = jnp.max(x, axis=-1)                                            # [B, C]
  finite_top = jnp.where(jnp.isfinite(top), top, 0.0)                  # an all -inf chunk: mass 0
  m = jnp.max(top, axis=-1)                                            # [B]
  mass = jnp.sum(jnp.exp(x - finite_top[..., None]), axis=-1) * jnp.exp(finite_top - m[:, None])
  pairs = jax.vmap(jax.random.split)(keys)
  chunk = first_min(jax.vmap(lambda k: jax.random.exponential(k, (chunks,)))(pairs[:, 0]) / mass)
  if greedy is not None:
    chunk = jnp.where(greedy, first_true(top == m[:, None]), chunk)
  inside = jnp.take_along_axis(x, chunk[:, None, None], axis=1)[:, 0]  # [B, size]
  index = first_min(jax.vmap(lambda k: jax.random.exponential(k, (size,)))(pairs[:, 1])
                     / jnp.exp(inside - m[:, None]))
  if greedy is not None:
    index = jnp.where(greedy, first_true(inside == m[:, None]), index)
  return chunk * size + index, m + jnp.log(mass.sum(-1))


def first_min(x: jax.Array) -> jax.Array:
  return first_true(x == jnp.min(x, axis=-1, keepdims=True))


def _is_key_batch(rng: jax.Array) -> bool:
  return jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key) and rng.ndim == 1


@struct.dataclass
class GenerateOutput:
  tokens: jax.Array    # [B, N] int32; after EOS: pad_id
  logprobs: jax.Array  # [B, N] fp32; after EOS: 0
  lengths: jax.Array   # [B] int32 generated tokens per row, EOS included


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "greedy"))
def _generate_jit(graphdef, state, prompt_tokens, prompt_lengths, rng, temperature, top_p,
                  eos_id, pad_id, vision_inputs, *, max_new_tokens: int, greedy: bool):
  model = nnx.merge(graphdef, state)
  b, length = prompt_tokens.shape
  cache = model.init_cache(b, length + max_new_tokens)
  logits, cache = prefill(model, prompt_tokens, prompt_lengths, cache, **vision_inputs)

  def body(carry, step_rng):
    cache, logits, done, pos = carry
    token, logp = sample_token(logits, step_rng, greedy=greedy, temperature=temperature,
                               top_p=top_p)
    out_token = jnp.where(done, pad_id, token)
    out_logp = jnp.where(done, 0.0, logp)
    now_done = done | (token == eos_id)
    logits, cache = decode_step(model, out_token, pos, cache)
    return (cache, logits, now_done, pos + 1), (out_token, out_logp, ~done)

  done0 = jnp.zeros((b,), bool)
  if _is_key_batch(rng):  # [steps, B]: step i of a row uses fold_in(row_key, i)
    rngs = jax.vmap(lambda i: jax.vmap(lambda k: jax.random.fold_in(k, i))(rng))(
        jnp.arange(max_new_tokens))
  else:
    rngs = jax.random.split(rng, max_new_tokens)
  _, (tokens, logps, alive) = jax.lax.scan(
      body, (cache, logits, done0, prompt_lengths.astype(jnp.int32)), rngs)
  return GenerateOutput(tokens=tokens.T, logprobs=logps.T,
                        lengths=alive.sum(0).astype(jnp.int32))


def generate(model: Any, prompt_tokens, max_new_tokens: int, *, prompt_lengths=None,
             temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
             rng: jax.Array | None = None, eos_id: int = IM_END_ID, pad_id: int = PAD_ID,
             **vision_inputs) -> GenerateOutput:
  """Sample up to `max_new_tokens` per row after right-padded prompts [B, L].

  `model` is a decoder-protocol nnx module, or a (graphdef, state) pair.
  `prompt_lengths` [B] defaults to L for every row. `rng` is one key, or [B] keys (one
  per row; temperature and top_p may then be [B] too). Vision inputs (e.g.
  patch_rows, patch_image_ids, patch_positions for MageVL) are passed to
  `embed_inputs` at prefill. Runs as one jitted prefill + scan of decode steps.
  """
  graphdef, state = model if isinstance(model, tuple) else nnx.split(model)
  if vision_inputs.get("patch_image_ids") is not None:
    # Inside the jitted prefill a token/image count mismatch can't raise; check here.
    module = nnx.merge(graphdef, state) if isinstance(model, tuple) else model
    validate = getattr(module, "validate_inputs", None)
    if validate is not None:
      validate(prompt_tokens, **vision_inputs)
  prompt_tokens = jnp.asarray(prompt_tokens, jnp.int32)
  if prompt_lengths is None:
    prompt_lengths = jnp.full((prompt_tokens.shape[0],), prompt_tokens.shape[1], jnp.int32)
  if rng is None:
    if not greedy:
      raise ValueError("sampling (greedy=False) needs an explicit rng")
    rng = jax.random.key(0)
  return _generate_jit(graphdef, state, prompt_tokens, jnp.asarray(prompt_lengths, jnp.int32),
                       rng, jnp.asarray(temperature, jnp.float32), jnp.asarray(top_p, jnp.float32),
                       jnp.int32(eos_id),
                       jnp.int32(pad_id), vision_inputs, max_new_tokens=max_new_tokens,
                       greedy=greedy)
