"""Interleaved 3D RoPE of Mage-ViT, exactly as the published checkpoint was trained.

With half = head_dim / 2 and u = half / 16, the (t, h, w) position axes get
4u / 6u / 6u frequencies, `inv_a[k] = theta^(-k / size_a)` for k < size_a.
`f = concat(t * inv_t, h * inv_h, w * inv_w)` has length half and the angle
vector is `e = concat(f, f)` (length head_dim). The rotation pairs *adjacent*
elements, `r[2i] = -x[2i+1]`, `r[2i+1] = x[2i]`, and `out = x cos(e) + r sin(e)`.

Because `e` is concatenated (not repeated per pair), the two members of a pair
usually see different angles, so this is not a true rotation (norms are not
preserved). It is nevertheless what the checkpoint was trained with, so we
reproduce it bit-for-bit in spirit: all maths in fp32.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def axis_sizes(head_dim: int) -> tuple[int, int, int]:
  """Number of frequencies given to the t, h and w axes (4u, 6u, 6u)."""
  if head_dim % 32:
    raise ValueError(f"3D RoPE needs head_dim to be a multiple of 32, got {head_dim}")
  u = head_dim // 2 // 16
  return 4 * u, 6 * u, 6 * u


def inverse_frequencies(head_dim: int, theta: float = 10_000.0) -> np.ndarray:
  """fp32 [half]: concat(inv_t, inv_h, inv_w), inv_a[k] = theta^(-k/size_a)."""
  parts = [theta ** (-np.arange(size, dtype=np.float64) / size) for size in axis_sizes(head_dim)]
  return np.concatenate(parts).astype(np.float32)


def rope_angles(positions: jax.Array, head_dim: int, theta: float = 10_000.0) -> jax.Array:
  """positions [..., 3] (t, h, w) -> angles e [..., head_dim] in fp32."""
  st, sh, sw = axis_sizes(head_dim)
  inv = jnp.asarray(inverse_frequencies(head_dim, theta))
  pos = positions.astype(jnp.float32)
  # Axis a's position multiplies only that axis's slice of the frequencies.
  axis_of_freq = np.repeat(np.arange(3), (st, sh, sw))           # [half]
  f = jnp.take(pos, jnp.asarray(axis_of_freq), axis=-1) * inv    # [..., half]
  return jnp.concatenate([f, f], axis=-1)


def rotate_interleaved(x: jax.Array) -> jax.Array:
  """r[2i] = -x[2i+1], r[2i+1] = x[2i]."""
  pairs = x.reshape(*x.shape[:-1], -1, 2)
  return jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)


def apply_vision_rope(x: jax.Array, positions: jax.Array, theta: float = 10_000.0) -> jax.Array:
  """x [B, P, H, D], positions [B, P, 3] -> same shape and dtype as x (fp32 inside)."""
  e = rope_angles(positions, x.shape[-1], theta)[..., None, :]  # broadcast over heads
  xf = x.astype(jnp.float32)
  out = xf * jnp.cos(e) + rotate_interleaved(xf) * jnp.sin(e)
  return out.astype(x.dtype)
