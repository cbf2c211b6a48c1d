"""1D rotary position embedding, half-split (`rotate_half`) as in HF Qwen3.

inv_freq[i] = theta^(-2i/D) for i < D/2, computed in fp32; angles = pos * inv_freq;
e = concat(angles, angles); out = x*cos(e) + rotate_half(x)*sin(e) with
rotate_half(x) = concat(-x[D/2:], x[:D/2]). The rotation runs in fp32 and the
result is cast back to x's dtype.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def rope_inv_freq(head_dim: int, theta: float) -> jax.Array:
  if head_dim % 2:
    raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
  exponent = jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim
  return 1.0 / (theta ** exponent)


def rope_cos_sin(positions: jax.Array, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
  """positions [B, T] int -> cos, sin [B, T, 1, head_dim] fp32 (broadcast over heads)."""
  angles = positions.astype(jnp.float32)[..., None] * rope_inv_freq(head_dim, theta)
  emb = jnp.concatenate([angles, angles], axis=-1)[..., None, :]
  return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """x [B, T, H, D] rotated by precomputed cos/sin [B, T, 1, D]."""
  xf = x.astype(jnp.float32)
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
  return (xf * cos + rotated * sin).astype(x.dtype)
