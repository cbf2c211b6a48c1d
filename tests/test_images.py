"""Image preprocessing vs a NumPy reference written from DESIGN.md, and hand-worked literals."""
import math

import numpy as np
import pytest
from PIL import Image

from mage_jax.data import images

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


def ref_smart_resize(h, w, factor=32, min_pixels=3136, max_pixels=4_000_000):
  # DESIGN.md: round each side to a multiple of 32 (>= 32); above max scale down by
  # sqrt(hw/max) with floor; below min scale up with ceil.
  hb, wb = max(factor, factor * round(h / factor)), max(factor, factor * round(w / factor))
  if hb * wb > max_pixels:
    s = math.sqrt(h * w / max_pixels)
    hb, wb = max(factor, factor * math.floor(h / s / factor)), max(factor, factor * math.floor(w / s / factor))
  elif hb * wb < min_pixels:
    s = math.sqrt(min_pixels / (h * w))
    hb, wb = factor * math.ceil(h * s / factor), factor * math.ceil(w * s / factor)
  return hb, wb


def ref_patchify(img):
  # Loop form: merge blocks row-major, patches row-major inside a block, rows [C, 16, 16].
  gh, gw = img.shape[0] // 16, img.shape[1] // 16
  rows, pos = [], []
  for by in range(gh // 2):
    for bx in range(gw // 2):
      for my in range(2):
        for mx in range(2):
          py, px = 2 * by + my, 2 * bx + mx
          patch = img[16 * py:16 * py + 16, 16 * px:16 * px + 16, :]
          rows.append(np.transpose(patch, (2, 0, 1)).reshape(-1))
          pos.append((0, py, px))
  return np.stack(rows), np.array(pos)


def test_smart_resize_literals():
  assert images.smart_resize(720, 1280) == (704, 1280)    # 22.5 blocks rounds half to even -> 880 tokens
  assert images.smart_resize(1080, 1920) == (1088, 1920)
  assert images.smart_resize(10, 10) == (64, 64)          # below min_pixels: scaled up with ceil
  assert images.smart_resize(48, 16) == (128, 64)
  assert images.smart_resize(4000, 6000) == (1632, 2432)  # above max_pixels: scaled down with floor
  assert images.smart_resize(720, 1280, max_pixels=500_000) == (512, 928)
  assert images.num_image_tokens(704, 1280) == 880
  with pytest.raises(ValueError):
    images.smart_resize(1, 500)


def test_smart_resize_matches_reference():
  rng = np.random.default_rng(0)
  for h, w in rng.integers(1, 5000, size=(300, 2)):
    h, w = int(h), int(w)
    if max(h, w) / min(h, w) > 200:
      continue
    got = images.smart_resize(h, w)
    assert got == ref_smart_resize(h, w), (h, w)
    assert got[0] % 32 == 0 and got[1] % 32 == 0 and got[0] * got[1] <= 4_000_000


def test_patchify_hand_worked_32x32():
  y, x, c = np.meshgrid(np.arange(32), np.arange(32), np.arange(3), indexing="ij")
  img = ((7 * y + 3 * x + 50 * c) % 256).astype(np.uint8)
  rows, pos = images.patchify(img)
  assert rows.shape == (4, 768) and rows.dtype == np.uint8 and pos.dtype == np.int32
  assert pos.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1]]
  assert rows[0, 0] == 0
  assert rows[1, 0] == 48      # patch (0,1) starts at x=16: 3*16
  assert rows[1, 256] == 98    # channel 1 of the same pixel: 48 + 50
  assert rows[2, 17] == 122    # patch (1,0), c=0, py=1, px=1 -> pixel (17, 1): 119 + 3
  assert rows[3, 767] == 154   # patch (1,1), c=2, last pixel (31, 31): (217 + 93 + 100) % 256


def test_patch_order_64x32_literal():
  _, pos = images.patchify(np.zeros((32, 64, 3), np.uint8))
  assert pos[:, 1:].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]]
  _, pos = images.patchify(np.zeros((64, 64, 3), np.uint8), t=5)
  assert pos[:, 0].tolist() == [5] * 16
  assert pos[4:8, 1:].tolist() == [[0, 2], [0, 3], [1, 2], [1, 3]]
  assert pos[8:12, 1:].tolist() == [[2, 0], [2, 1], [3, 0], [3, 1]]


def test_patchify_and_normalize_match_reference():
  rng = np.random.default_rng(1)
  img = rng.integers(0, 256, size=(96, 160, 3), dtype=np.uint8)
  rows, pos = images.patchify(img)
  ref_rows, ref_pos = ref_patchify(img)
  np.testing.assert_array_equal(rows, ref_rows)
  np.testing.assert_array_equal(pos, ref_pos)
  assert len(rows) // 4 == images.num_image_tokens(96, 160) == 15
  norm = images.normalize_patch_rows(rows)
  ch = np.arange(768) // 256
  ref = (rows.astype(np.float32) - (255 * np.array(MEAN))[ch].astype(np.float32)) / \
      (255 * np.array(STD))[ch].astype(np.float32)
  assert norm.dtype == np.float32
  np.testing.assert_allclose(norm, ref, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(norm[0, 0], (rows[0, 0] / 255 - MEAN[0]) / STD[0], rtol=1e-5)


def test_load_and_resize_bicubic(tmp_path):
  rng = np.random.default_rng(2)
  src = rng.integers(0, 256, size=(50, 70, 3), dtype=np.uint8)
  path = tmp_path / "a.png"
  Image.fromarray(src).save(path)
  out = images.load_image(str(path))
  assert out.dtype == np.uint8 and out.shape == (64, 64, 3)  # 50x70 -> 64x64
  expected = np.asarray(Image.fromarray(src).resize((64, 64), Image.BICUBIC))
  np.testing.assert_array_equal(out, expected)
  assert images.resized_size(str(path)) == (64, 64)
  Image.fromarray(src[..., 0]).convert("L").save(tmp_path / "g.png")  # greyscale -> RGB
  assert images.load_image(str(tmp_path / "g.png")).shape == (64, 64, 3)
