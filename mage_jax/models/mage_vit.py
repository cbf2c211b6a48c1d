"""Mage-ViT: the vision tower of Mage-VL (DESIGN.md, "Mage-ViT").

Patch rows [C, 16, 16] flattened -> linear patch embedding (no bias) ->
`layernorm_pre` -> pre-LN blocks (fused qkv with bias, interleaved 3D RoPE,
block-diagonal bidirectional attention, exact-GELU MLP) -> 2x2 merger to the
LM width. Attribute names mirror the HF checkpoint (docs/ARCHITECTURE.md).

Block-diagonal attention: every patch carries an attention-block id
(`patch_image_ids`, 0 = padding). The data path gives each image, and each
window of at most `max_window_frames` frames of a [T, h, w] video grid, its own
id (`video_window_ids`); the shared segment-aware `attention` keeps blocks apart.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mage_jax import sharding
from mage_jax.models import remat as remat_lib
from mage_jax.models.attention import attention
from mage_jax.models.config import MageViTConfig
from mage_jax.models.layers import LayerNorm, Linear
from mage_jax.models.vision_rope import apply_vision_rope

# Patch activations [B, P, D]: batch over data/fsdp, patches unsharded.
HIDDEN_AXES = ("act_batch", None, "act_embed")

# CLIP normalisation: one definition, shared with the host-side data path (data/images.py).
from mage_jax.models.clip_norm import CLIP_MEAN, CLIP_STD, normalize_patch_rows  # noqa: E402,F401


def video_window_ids(grid_t: int, grid_h: int, grid_w: int, max_window_frames: int = 4,
                     first_id: int = 1) -> np.ndarray:
  """Attention-block ids for the patches of a [T, h, w] video grid.

  Patches are ordered frame by frame (each frame in 2x2 merge-block order), so
  frame t's h*w patches get id `first_id + t // max_window_frames`: windows of at
  most `max_window_frames` consecutive frames attend only within themselves.
  The next free id is `first_id + ceil(T / max_window_frames)`.
  """
  frame_window = np.arange(grid_t) // max_window_frames
  return (first_id + np.repeat(frame_window, grid_h * grid_w)).astype(np.int32)


def grid_patch_positions(grid_t: int, grid_h: int, grid_w: int, merge: int = 2,
                         first_t: int = 0) -> np.ndarray:
  """(t, h, w) int32 [T*h*w, 3] in the model's patch order: frames in turn, each in
  2x2 merge-block order (row-major over blocks, row-major inside a block)."""
  if grid_h % merge or grid_w % merge:
    raise ValueError(f"patch grid {grid_h}x{grid_w} is not a multiple of merge size {merge}")
  hh, ww = np.meshgrid(np.arange(grid_h), np.arange(grid_w), indexing="ij")
  # [bh, m, bw, m] -> [bh, bw, m, m]: blocks row-major, then inside a block row-major.
  def blocks(a):
    return a.reshape(grid_h // merge, merge, grid_w // merge, merge).transpose(0, 2, 1, 3).ravel()
  h, w = blocks(hh), blocks(ww)
  out = [np.stack([np.full_like(h, first_t + t), h, w], axis=-1) for t in range(grid_t)]
  return np.concatenate(out).astype(np.int32)


def _call_block(block: "VisionBlock", x, image_ids, positions):
  return block(x, image_ids, positions)


def remat_block(policy: str):
  """The per-block call, rematerialised like the LM's blocks (models/remat.py)."""
  if policy == "none":
    return _call_block
  return nnx.remat(_call_block, prevent_cse=True, policy=remat_lib.checkpoint_policy(policy))


class VisionEmbeddings(nnx.Module):
  def __init__(self, cfg: MageViTConfig, *, rngs: nnx.Rngs):
    self.patch_embedding = Linear(
        cfg.patch_dim, cfg.hidden_size, axes=("patch", "vit_embed"), use_bias=False,
        param_dtype=cfg.param_dtype, dtype=cfg.compute_dtype, rngs=rngs)

  def __call__(self, rows: jax.Array) -> jax.Array:
    return self.patch_embedding(rows)


class VisionAttention(nnx.Module):
  def __init__(self, cfg: MageViTConfig, *, rngs: nnx.Rngs):
    d = cfg.hidden_size
    self.cfg = cfg
    common = dict(use_bias=True, param_dtype=cfg.param_dtype, dtype=cfg.compute_dtype, rngs=rngs)
    self.qkv = Linear(d, 3 * d, axes=("vit_embed", "vit_qkv"), **common)  # rows q | k | v
    self.proj = Linear(d, d, axes=("vit_heads", "vit_embed"), **common)

  def __call__(self, x: jax.Array, image_ids: jax.Array, positions: jax.Array) -> jax.Array:
    cfg = self.cfg
    b, p, _ = x.shape
    qkv = self.qkv(x).reshape(b, p, 3, cfg.num_attention_heads, cfg.head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    q = apply_vision_rope(q, positions, cfg.rope_theta)
    k = apply_vision_rope(k, positions, cfg.rope_theta)
    out = attention(q, k, v, q_segment_ids=image_ids, kv_segment_ids=image_ids, causal=False,
                    backend=cfg.attention_backend, max_segment_len=cfg.max_segment_len)
    out = remat_lib.tag_attn_out(out)
    return self.proj(out.reshape(b, p, cfg.hidden_size))


class VisionMLP(nnx.Module):
  def __init__(self, cfg: MageViTConfig, *, rngs: nnx.Rngs):
    common = dict(use_bias=True, param_dtype=cfg.param_dtype, dtype=cfg.compute_dtype, rngs=rngs)
    self.fc1 = Linear(cfg.hidden_size, cfg.intermediate_size, axes=("vit_embed", "vit_mlp"),
                      **common)
    self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size, axes=("vit_mlp", "vit_embed"),
                      **common)

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class VisionBlock(nnx.Module):
  """Pre-LN: x + attn(ln1(x)), then h + mlp(ln2(h)); no post-norm."""

  def __init__(self, cfg: MageViTConfig, *, rngs: nnx.Rngs):
    norm = dict(eps=cfg.layer_norm_eps, axes=("norm",), param_dtype=cfg.param_dtype)
    self.layer_norm1 = LayerNorm(cfg.hidden_size, **norm)
    self.self_attn = VisionAttention(cfg, rngs=rngs)
    self.layer_norm2 = LayerNorm(cfg.hidden_size, **norm)
    self.mlp = VisionMLP(cfg, rngs=rngs)

  def __call__(self, x: jax.Array, image_ids: jax.Array, positions: jax.Array) -> jax.Array:
    h = x + self.self_attn(self.layer_norm1(x), image_ids, positions)
    return sharding.shard_activation(h + self.mlp(self.layer_norm2(h)), HIDDEN_AXES)


class VisionEncoder(nnx.Module):
  def __init__(self, cfg: MageViTConfig, *, rngs: nnx.Rngs):
    self.layers = nnx.List([VisionBlock(cfg, rngs=rngs) for _ in range(cfg.num_hidden_layers)])


class PatchMerger(nnx.Module):
  """ln_q, then each 2x2 block (4 consecutive rows) -> concat -> fc1 -> GELU -> fc2."""

  def __init__(self, cfg: MageViTConfig, *, rngs: nnx.Rngs):
    self.group = cfg.spatial_merge_size ** 2
    merged = cfg.hidden_size * self.group
    common = dict(use_bias=True, param_dtype=cfg.param_dtype, dtype=cfg.compute_dtype, rngs=rngs)
    self.ln_q = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, axes=("norm",),
                          param_dtype=cfg.param_dtype)
    self.fc1 = Linear(merged, merged, axes=("vit_embed", "vit_mlp"), **common)
    self.fc2 = Linear(merged, cfg.out_hidden_size, axes=("vit_mlp", "embed"), **common)

  def __call__(self, x: jax.Array) -> jax.Array:
    b, p, d = x.shape
    x = self.ln_q(x).reshape(b, p // self.group, self.group * d)
    return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class MageViT(nnx.Module):
  """patch_rows [B, P, C*P*P] (uint8 or float), patch_image_ids [B, P] (0 = padding),
  patch_positions [B, P, 3] -> merged [B, P // 4, out_hidden_size].

  Unbatched inputs ([P, ...]) give an unbatched [P // 4, out] result. P must be a
  multiple of 4 and each group of 4 consecutive rows one 2x2 block of one image.
  Padding patches produce (finite) rows that the caller ignores.
  """

  def __init__(self, cfg: MageViTConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.embeddings = VisionEmbeddings(cfg, rngs=rngs)
    self.layernorm_pre = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, axes=("norm",),
                                   param_dtype=cfg.param_dtype)
    self.encoder = VisionEncoder(cfg, rngs=rngs)
    self.merger = PatchMerger(cfg, rngs=rngs)

  def __call__(self, patch_rows: jax.Array, patch_image_ids: jax.Array,
               patch_positions: jax.Array) -> jax.Array:
    cfg = self.cfg
    unbatched = patch_rows.ndim == 2
    if unbatched:
      patch_rows, patch_image_ids, patch_positions = (
          patch_rows[None], patch_image_ids[None], patch_positions[None])
    group = cfg.spatial_merge_size ** 2
    if patch_rows.shape[1] % group:
      raise ValueError(f"patch count {patch_rows.shape[1]} is not a multiple of {group} "
                       "(one merged token per 2x2 block)")
    if patch_rows.shape[-1] != cfg.patch_dim:
      raise ValueError(f"patch rows have {patch_rows.shape[-1]} columns, expected {cfg.patch_dim}")
    if patch_rows.dtype == jnp.uint8:
      patch_rows = normalize_patch_rows(jnp.asarray(patch_rows), cfg.num_channels)
    x = patch_rows.astype(jnp.dtype(cfg.compute_dtype))
    x = self.layernorm_pre(self.embeddings(x))
    image_ids = patch_image_ids.astype(jnp.int32)
    block_fn = remat_block(cfg.remat_policy)
    for layer in self.encoder.layers:
      x = block_fn(layer, x, image_ids, patch_positions)
    merged = self.merger(x)
    return merged[0] if unbatched else merged
