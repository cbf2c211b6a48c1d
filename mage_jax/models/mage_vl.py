"""Mage-VL: Mage-ViT features spliced into a Qwen3 decoder (DESIGN.md, ARCHITECTURE.md).

    MageVL(cfg, rngs)(tokens [B,T], positions [B,T], segment_ids [B,T],
                      patch_rows [B,P,768], patch_image_ids [B,P], patch_positions [B,P,3])
        -> hidden [B,T,D];   .logits(hidden) -> fp32 [..., V];   .lm_head_kernel() -> [D, V]

The ViT turns each 2x2 block of patches into one merged token; the k-th
`<|image_pad|>` token of a batch row takes the k-th *real* merged token of
that row (a merged token is real when its patches' image id is nonzero).
The LM uses plain 1D positions.

Count check: the number of `<|image_pad|>` tokens in a row must equal the
row's real patches / 4. `check_inputs` verifies it (and that every 2x2 group
of patch rows belongs to one image) and raises ValueError naming both counts.
`__call__` and `embed_inputs` run it whenever their inputs are concrete
(eager calls, host batches). Under `jax.jit` the inputs are tracers and no
check is possible: surplus merged tokens are then ignored, and surplus
`<|image_pad|>` tokens receive the row's first real merged token — wrong but
finite. The packer guarantees the invariant for training batches; call
`check_inputs` on host batches when in doubt.

Decoder protocol (see `mage_jax.models.qwen3`), so `sampling.generate` works
with images: `embed_inputs(tokens, patch_rows=..., patch_image_ids=...,
patch_positions=...)`, `decode`, `init_cache`, `lm_head_kernel`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mage_jax.models.config import MageVLConfig
from mage_jax.models.layers import Linear, as_dtype
from mage_jax.models import jax_compat
from mage_jax.models.mage_vit import MageViT
from mage_jax.models.qwen3 import Qwen3Model, compute_logits, rest_logit_bias
from mage_jax.models.sampling import KVCache, init_kv_cache


def _is_concrete(*arrays) -> bool:
  return not any(jax_compat.is_traced(a) for a in arrays)


def check_inputs(tokens, patch_image_ids, *, image_token_id: int, merge_group: int = 4) -> None:
  """Raise ValueError unless each row's <|image_pad|> count equals its real patches / 4.

  tokens [B, T] or [T]; patch_image_ids [B, P] or [P] (None = no images).
  """
  tokens = np.asarray(tokens)
  tokens = tokens[None] if tokens.ndim == 1 else tokens
  n_pad = (tokens == image_token_id).sum(axis=1)
  if patch_image_ids is None:
    ids = np.zeros((tokens.shape[0], 0), np.int32)
  else:
    ids = np.asarray(patch_image_ids)
    ids = ids[None] if ids.ndim == 1 else ids
  if ids.shape[0] != tokens.shape[0]:
    raise ValueError(f"tokens have batch {tokens.shape[0]} but patch_image_ids have {ids.shape[0]}")
  if ids.shape[1] % merge_group:
    raise ValueError(f"patch count {ids.shape[1]} is not a multiple of {merge_group}")
  groups = ids.reshape(ids.shape[0], -1, merge_group)
  mixed = np.nonzero((groups != groups[:, :, :1]).any(axis=2))
  if mixed[0].size:
    b, g = int(mixed[0][0]), int(mixed[1][0])
    raise ValueError(f"row {b}: patch rows {g * merge_group}..{g * merge_group + merge_group - 1} "
                     f"mix image ids {groups[b, g].tolist()}; each 2x2 block must be one image")
  real = (ids != 0).sum(axis=1)
  for b in range(tokens.shape[0]):
    if n_pad[b] != real[b] // merge_group:
      raise ValueError(
          f"image token count mismatch in row {b}: {int(n_pad[b])} <|image_pad|> tokens "
          f"(id {image_token_id}) but {int(real[b] // merge_group)} merged image tokens "
          f"({int(real[b])} real patches / {merge_group})")


def splice_image_features(embeds: jax.Array, tokens: jax.Array, merged: jax.Array,
                          merged_valid: jax.Array, image_token_id: int) -> jax.Array:
  """Replace the k-th image-pad embedding of each row by the row's k-th valid merged token.

  embeds [B,T,D], tokens [B,T], merged [B,M,D], merged_valid [B,M] bool. Fixed
  shapes (cumsum ranks + gathers), so it jits; see the module docstring for
  what a count mismatch does under jit.
  """
  b, m = merged_valid.shape
  if m == 0:
    return embeds
  is_pad = tokens == image_token_id
  pad_rank = jnp.cumsum(is_pad, axis=1, dtype=jnp.int32) - 1                   # [B, T]
  valid_rank = jnp.cumsum(merged_valid, axis=1, dtype=jnp.int32) - 1           # [B, M]
  # source_of_rank[b, k] = index of the k-th valid merged token (out-of-range writes dropped).
  target = jnp.where(merged_valid, valid_rank, m)
  rows = jnp.broadcast_to(jnp.arange(b)[:, None], (b, m))
  source_of_rank = jnp.zeros((b, m), jnp.int32).at[rows, target].set(
      jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (b, m)), mode="drop")
  source = jnp.take_along_axis(source_of_rank, jnp.clip(pad_rank, 0, m - 1), axis=1)  # [B, T]
  feats = jnp.take_along_axis(merged, source[:, :, None], axis=1)             # [B, T, D]
  return jnp.where(is_pad[:, :, None], feats.astype(embeds.dtype), embeds)


class MageVL(nnx.Module):

  def __init__(self, cfg: MageVLConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    text = cfg.text
    self.language_model = Qwen3Model(text, rngs=rngs)
    self.lm_head = None if text.tie_word_embeddings else Linear(
        text.hidden_size, text.vocab_size, axes=("embed", "vocab"), param_dtype=text.param_dtype,
        dtype=text.compute_dtype, rngs=rngs)
    self.visual = MageViT(cfg.vision, rngs=rngs)

  def __call__(self, tokens, positions, segment_ids, patch_rows=None, patch_image_ids=None,
               patch_positions=None) -> jax.Array:
    if _is_concrete(tokens, patch_image_ids):
      check_inputs(tokens, patch_image_ids, image_token_id=self.cfg.image_token_id,
                   merge_group=self.cfg.vision.spatial_merge_size ** 2)
    embeds = self._embed(tokens, patch_rows, patch_image_ids, patch_positions)
    return self.language_model(embeds, positions, segment_ids)

  def _embed(self, tokens, patch_rows, patch_image_ids, patch_positions) -> jax.Array:
    embeds = self.language_model.embed_tokens(tokens)
    if patch_rows is None:
      return embeds
    if patch_image_ids is None or patch_positions is None:
      raise ValueError("patch_rows need patch_image_ids and patch_positions")
    merged = self.visual(patch_rows, patch_image_ids, patch_positions)
    group = self.cfg.vision.spatial_merge_size ** 2
    merged_valid = patch_image_ids[:, ::group] != 0
    return splice_image_features(embeds, tokens, merged.astype(as_dtype(self.cfg.text.compute_dtype)),
                                 merged_valid, self.cfg.image_token_id)

  # --- decoder protocol ---
  def embed_inputs(self, tokens, patch_rows=None, patch_image_ids=None,
                   patch_positions=None) -> jax.Array:
    """Token embeddings with image features spliced in. Text-only calls (decode steps)
    pass no vision inputs and are not count-checked."""
    if patch_rows is not None and _is_concrete(tokens, patch_image_ids):
      check_inputs(tokens, patch_image_ids, image_token_id=self.cfg.image_token_id,
                   merge_group=self.cfg.vision.spatial_merge_size ** 2)
    return self._embed(tokens, patch_rows, patch_image_ids, patch_positions)

  def validate_inputs(self, tokens, patch_rows=None, patch_image_ids=None,
                      patch_positions=None) -> None:
    """Host-side count check for callers that are about to jit (e.g. `generate`)."""
    check_inputs(tokens, patch_image_ids, image_token_id=self.cfg.image_token_id,
                 merge_group=self.cfg.vision.spatial_merge_size ** 2)

  def decode(self, embeds, positions, segment_ids, cache: KVCache):
    return self.language_model(embeds, positions, segment_ids, cache)

  def init_cache(self, batch_size: int, max_len: int) -> KVCache:
    return init_kv_cache(self.cfg.text, batch_size, max_len)

  def lm_head_kernel(self) -> jax.Array:
    if self.lm_head is None:
      return self.language_model.embed_tokens.embedding[...].T
    return self.lm_head.kernel[...]

  def lm_head_bias(self) -> jax.Array | None:
    return rest_logit_bias(self.cfg.text)

  def logits(self, hidden) -> jax.Array:
    return compute_logits(hidden, self.lm_head_kernel(), self.cfg.text.compute_dtype,
                          self.lm_head_bias())
