"""CLIP patch normalisation (DESIGN.md \"Image preprocessing\"): the constants and the one function
the vision tower and the host-side image pipeline share. NumPy only at import time."""
from __future__ import annotations

import numpy as np

# CLIP normalisation (DESIGN.md "Image preprocessing").
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _column_constants(patch_dim: int, num_channels: int) -> tuple[np.ndarray, np.ndarray]:
  """255*mean and 255*std per column of a [C, P, P]-flattened row (channel = j // (P*P))."""
  per_channel = patch_dim // num_channels
  mean = np.repeat(255.0 * np.asarray(CLIP_MEAN, np.float64), per_channel).astype(np.float32)
  std = np.repeat(255.0 * np.asarray(CLIP_STD, np.float64), per_channel).astype(np.float32)
  return mean, std


def normalize_patch_rows(rows, num_channels: int = 3):
  """uint8 (0..255) patch rows [..., C*P*P] -> fp32 (x - 255*mean) / (255*std).

  Works on NumPy arrays (data path, stays NumPy) and JAX arrays (in the model).
  This operation order is the one DESIGN.md prescribes (said to match the reference
  processors bit for bit; not verified here against a reference processor).
  """
  if isinstance(rows, np.ndarray):
    xp = np
  else:
    import jax.numpy as xp   # only for JAX arrays: the host data path stays NumPy-only (no JAX/Flax import)
  mean, std = _column_constants(rows.shape[-1], num_channels)
  return (rows.astype(xp.float32) - mean) / std
