"""Decode a full-vocabulary model on the distinct rows of its vocabulary, with the same logits.

A model trained on a compact vocabulary (models/compact_vocab.py) leaves training expanded: every
id it never kept has the same embedding row (and head column), so the 151,936-row head computes
the same logit ~146k times per token. The proof student's decode step was mostly that matmul
(4 layers x 128 wide: 61.6 ms against 20.6 ms for 8 rows x 4 steps on 2 CPU cores). `serving_model`
finds those rows (`CompactVocab.of_repeated_rows`) and returns the model on its distinct rows plus
`table` [V] (full id -> row): the decoder embeds `table[token]` and spreads the row logits back to
all V ids with `full_logits`, so the sampler, greedy ties, top_p and log-probs see exactly the
full model's logits. A model whose rows all differ (a random init) is served as it is.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import MageVLConfig
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM


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
