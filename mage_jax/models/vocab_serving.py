"""Decode a full-vocabulary model on the distinct rows of its vocabulary, with the same logits.

A model trained on a compact vocabulary (models/compact_vocab.py) leaves training expanded: every
id it never kept has the same embedding row (and head column), so the 151,936-row head computes
the same logit ~146k times per token. The proof student's decode step was mostly that matmul
(4 layers x 128 wide: 61.6 ms against 20.6 ms for 8 rows x 4 steps on 2 CPU cores). `serving_model`
finds those rows (`CompactVocab.of_repeated_rows`) and returns the model on its distinct rows plus
`table` [V] (full id -> row): the decoder embeds `table[token]` and spreads the row logits back to
all V ids with `full_logits`, so the sampler, greedy ties, top_p and log-probs see exactly the
full model's logits. A model whose rows all differ (a random init) is served as it is.

The sampler itself then still ran over all V ids (8 rows x 151,936 logits a step: ~4 ms of an
~8 ms step on 2 cores), so `sample` runs `sampling.race_sample`'s two-level race on the rows
(`RowRace`): each chunk's maximum and mass come from its kept ids and its count of rest-row ids,
the winning chunk's 128 logits are gathered, and the same keys draw the same exponentials, so the
token is the full-vocabulary sampler's (its chunk masses differ in the last bits only: a pick can
change only where two ratios tie within float rounding) and greedy ties are broken alike. Rows
with top_p < 1 take the full path (the nucleus needs the sorted full distribution).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import MageVLConfig
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from mage_jax.models.sampling import first_min, first_true, race_chunk, sample_token


def serving_model(model: nnx.Module) -> tuple[nnx.Module, jax.Array | None]:
  """-> (model to decode with, table [V] int32 or None). The compact model shares every
  non-vocabulary array with `model` (nothing is copied but the embedding / head rows)."""
  cfg = model.cfg
  text = cfg.text if isinstance(cfg, MageVLConfig) else cfg
  if text.rest_ids:            # already compact: its ids are rows, nothing to map
    return model, None
  keep = ((cfg.image_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id)
          if isinstance(cfg, MageVLConfig) else ())   # their compact rows are config fields
  pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  vocab = CompactVocab.of_repeated_rows(pure, keep=keep)
  if vocab is None:
    return model, None
  compact_cfg = vocab.compact_model_config(cfg)
  build = (lambda: MageVL(compact_cfg, rngs=nnx.Rngs(0))) if isinstance(cfg, MageVLConfig) else (
      lambda: Qwen3ForCausalLM(compact_cfg, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(nnx.eval_shape(build))
  params = vocab.serving_params(pure)
  nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, params))
  return nnx.merge(graphdef, state), jnp.asarray(vocab.table)


def rows(table: jax.Array | None, tokens: jax.Array) -> jax.Array:
  """Full token ids -> the serving model's rows (an id outside its vocabulary reads the rest row,
  which is that id's own row in the full model)."""
  return tokens if table is None else table[tokens]


def full_logits(table: jax.Array | None, logits: jax.Array) -> jax.Array:
  """Row logits [B, n+1] (no rest bias: a left-out id's logit is h . rest) -> [B, V]."""
  return logits if table is None else jnp.take(logits, table, axis=-1)


@struct.dataclass
class RowRace:
  """`sampling.race_sample`'s chunks of the full vocabulary, seen from a table's rows."""
  table: jax.Array          # int32 [V]: full id -> row
  entry_ids: jax.Array      # int32 [E]: the full ids not on the rest row
  entry_rows: jax.Array     # int32 [E]: their rows
  rest_row: jax.Array       # int32 []: the row most ids share
  rest_count: jax.Array     # float32 [chunks]: how many of each chunk's ids are on the rest row
  vocab: int = struct.field(pytree_node=False)
  size: int = struct.field(pytree_node=False)


def row_race(table: jax.Array | None) -> RowRace | None:
  """The chunk structure `sample` needs (None for a model served as it is)."""
  if table is None:
    return None
  t = np.asarray(table)
  v, size = len(t), race_chunk(len(t))
  rest = int(np.bincount(t).argmax())
  ids = np.flatnonzero(t != rest).astype(np.int32)
  count = np.bincount(np.flatnonzero(t == rest) // size, minlength=-(-v // size)).astype(np.float32)
  return RowRace(table=jnp.asarray(t), entry_ids=jnp.asarray(ids), entry_rows=jnp.asarray(t[ids]),
                 rest_row=jnp.int32(rest), rest_count=jnp.asarray(count), vocab=v, size=size)


def sample(table: jax.Array | None, race: RowRace | None, logits: jax.Array, keys: jax.Array, *, greedy,
           temperature, top_p) -> tuple[jax.Array, jax.Array]:
  """`sampling.sample_token` over the full vocabulary, given the serving model's logits [B, rows]
  (-> token [B] full ids, log-prob [B]): on the rows when `race` is given and no sampled row has
  top_p < 1, else over `full_logits`."""
  full = lambda x: sample_token(full_logits(table, x), keys, greedy=greedy, temperature=temperature, top_p=top_p)
  if race is None:
    return full(logits)
  on_rows = jnp.all((top_p >= 1.0) | greedy)
  return jax.lax.cond(on_rows, lambda x: _race_rows(race, x, keys, greedy, temperature), full, logits)


def _race_rows(race: RowRace, logits, keys, greedy, temperature):
  """race_sample(logits / temperature spread to V) without spreading: the same chunk maxima, the
  chunk masses from the rows (kept ids + rest count x the rest logit), the same exponentials."""
  b = logits.shape[0]
  size, chunks = race.size, race.rest_count.shape[0]
  temperature = jnp.where(greedy, 1.0, jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (b,)))
  x = logits.astype(jnp.float32) / temperature[:, None]
  chunk_of = race.entry_ids // size                                           # [E]
  kept = x[:, race.entry_rows]                                               # [B, E]
  rest = x[:, race.rest_row]                                                 # [B]
  top = jax.vmap(lambda z: jax.ops.segment_max(z, chunk_of, num_segments=chunks))(kept)
  top = jnp.maximum(top, jnp.where(race.rest_count > 0, rest[:, None], -jnp.inf))  # [B, C]
  finite_top = jnp.where(jnp.isfinite(top), top, 0.0)
  m = jnp.max(top, axis=-1)
  kept_mass = jax.vmap(lambda z, t: jax.ops.segment_sum(jnp.exp(z - t[chunk_of]), chunk_of,
                                                        num_segments=chunks))(kept, finite_top)
  mass = (kept_mass + race.rest_count * jnp.exp(rest[:, None] - finite_top)) * jnp.exp(finite_top - m[:, None])
  pairs = jax.vmap(jax.random.split)(keys)
  chunk = first_min(jax.vmap(lambda k: jax.random.exponential(k, (chunks,)))(pairs[:, 0]) / mass)
  chunk = jnp.where(greedy, first_true(top == m[:, None]), chunk)
  ids = chunk[:, None] * size + jnp.arange(size, dtype=jnp.int32)[None]       # [B, size]
  inside = jnp.where(ids < race.vocab, jnp.take_along_axis(x, race.table[jnp.minimum(ids, race.vocab - 1)], axis=-1),
                     -jnp.inf)
  index = first_min(jax.vmap(lambda k: jax.random.exponential(k, (size,)))(pairs[:, 1])
                    / jnp.exp(inside - m[:, None]))
  index = jnp.where(greedy, first_true(inside == m[:, None]), index)
  token = chunk * size + index
  lse = m + jnp.log(mass.sum(-1))
  return token, jnp.take_along_axis(x, race.table[token][:, None], axis=-1)[:, 0] - lse
