"""Mage-ViT vs a NumPy reference written here from DESIGN.md, plus literal 3D RoPE values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from mage_jax.models import vision_rope

# ---------------------------------------------------------------------------
# Literal values: head_dim 32 -> half 16, u 1, t/h/w get 4/6/6 frequencies.
# A 2x2-patch frame at real frame index t = 3 (patches in 2x2 block order).
# Worked by hand (math.cos/sin on paper-sized numbers), not by the model code.
# inv_t = 10000^(-k/4), k<4;  inv_h = inv_w = 10000^(-k/6), k<6.
INV_FREQ_32 = [
    1.0, 0.1, 0.01, 0.001,
    1.0, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
    1.0, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
]
HAND_POSITIONS = [(3, 0, 0), (3, 0, 1), (3, 1, 0), (3, 1, 1)]
# f = concat(t*inv_t, h*inv_h, w*inv_w) per patch (length 16).
HAND_F = [
    [3, 0.3, 0.03, 0.003, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [3, 0.3, 0.03, 0.003, 0, 0, 0, 0, 0, 0,
     1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883],
    [3, 0.3, 0.03, 0.003, 1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
     0, 0, 0, 0, 0, 0],
    [3, 0.3, 0.03, 0.003, 1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
     1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883],
]
# x[j] = (j + 1) / 10; out = x*cos(e) + r*sin(e), e = concat(f, f), r[2i] = -x[2i+1], r[2i+1] = x[2i].
# e.g. out[0] = 0.1*cos(3) - 0.2*sin(3) = -0.12722325; out[16] = 1.7*cos(3) - 1.8*sin(3) = -1.93700326.
HAND_OUT = [
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
     1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6,
     2.7, 2.8, 2.9, 3.0, 3.1, 3.2],
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
     -0.41543265, 1.40741675, 1.23364096, 1.41292978, 1.49654943, 1.60069607,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6,
     -0.89730253, 3.31247652, 2.75767896, 3.02884952, 3.09309862, 3.20143855],
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820,
     -0.23473144, 0.69301934, 0.66212670, 0.80695988, 0.89784348, 1.00041764,
     1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099,
     -0.71660132, 2.59807911, 2.18616471, 2.42287962, 2.49439267, 2.60116012,
     2.7, 2.8, 2.9, 3.0, 3.1, 3.2],
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820,
     -0.23473144, 0.69301934, 0.66212670, 0.80695988, 0.89784348, 1.00041764,
     -0.41543265, 1.40741675, 1.23364096, 1.41292978, 1.49654943, 1.60069607,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099,
     -0.71660132, 2.59807911, 2.18616471, 2.42287962, 2.49439267, 2.60116012,
     -0.89730253, 3.31247652, 2.75767896, 3.02884952, 3.09309862, 3.20143855],
]


def test_rope_axis_split_and_inverse_frequencies_literal():
  assert vision_rope.axis_sizes(32) == (4, 6, 6)
  assert vision_rope.axis_sizes(64) == (8, 12, 12)
  np.testing.assert_allclose(vision_rope.inverse_frequencies(32), INV_FREQ_32, rtol=1e-6)
  with pytest.raises(ValueError, match="multiple of 32"):
    vision_rope.axis_sizes(48)


def test_rope_angles_literal_2x2():
  e = np.asarray(vision_rope.rope_angles(np.array(HAND_POSITIONS, np.int32), 32))
  assert e.shape == (4, 32) and e.dtype == np.float32
  f = np.array(HAND_F, np.float32)
  np.testing.assert_allclose(e, np.concatenate([f, f], axis=1), rtol=1e-6, atol=1e-7)


def test_rope_rotated_vector_literal_2x2():
  x = (np.arange(32, dtype=np.float32) + 1) / 10
  x = np.broadcast_to(x, (1, 4, 1, 32))  # [B, P, H, D]
  pos = np.array([HAND_POSITIONS], np.int32)
  out = np.asarray(vision_rope.apply_vision_rope(x, pos))[0, :, 0]
  np.testing.assert_allclose(out, np.array(HAND_OUT), atol=2e-6)
  # Not a true rotation: the norm changes for patches with nonzero angles.
  assert abs(np.linalg.norm(out[3]) - np.linalg.norm(x[0, 0, 0])) > 1e-3
