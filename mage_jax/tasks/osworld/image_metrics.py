"""OSWorld's GIMP image checks, re-implemented from their documented semantics (our code).

Images arrive as bytes (None when absent: a file the agent never exported scores 0). Structure
checks use SSIM (document_metrics.ssim, scikit-image's defaults: per channel and averaged for colour
images); images of different sizes or channel counts score 0, as OSWorld's comparison fails on them.
  compare_image_list        every pair of images pixel-identical (same size and mode, no difference)
  check_brightness_decrease_and_structure_sim  result darker (mean grey) than expected, and after both
                            are scaled to mean brightness 128, mean squared difference (0..1 scale) < 0.03
  check_saturation_increase_and_structure_sim  result more saturated (mean HSV S) than expected, and
                            the hue and value channels each SSIM >= 0.9
  check_contrast_increase_and_structure_sim    result's pixel standard deviation higher, SSIM >= 0.65
  check_file_exists_and_structure_sim          the result exists and SSIM >= 0.9
  check_structure_sim_resized  the result resized to the expected size, SSIM >= 0.9
  check_palette_and_structure_sim  the result is palette-based (mode P) and, in RGB, SSIM >= 0.9
  check_image_mirror        the expected image flipped left-right has SSIM >= 0.99 with the result
  check_green_background    wherever the expected image is not black, the result's pixel is green
                            (G above R and B). OSWorld indexes its arrays [x, y], which covers
                            every pixel only for square images; we check every pixel.
  check_textbox_on_leftside the leftmost dark pixel (grey < 128) lies in the left 5% of the width
  check_triangle_position   the pixels of the second most common colour (the triangle; the most
                            common is the background, as OSWorld's comments say) have their
                            centroid within 5% of the image size of its centre. OSWorld's code
                            indexes its ascending count sort at 1 (the second *least* common
                            colour); we follow its documented intent.
  check_image_size          rules {width, height}: each given one equals the image's
  check_image_file_size     rules {max_size}: the file is smaller than max_size bytes
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np

from mage_jax.tasks.osworld.document_metrics import ssim


def _open(data: bytes | None):
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  if not data:
    return None
  try:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img
  except Exception:   # not an image: the agent's file is malformed
    return None


def structure_sim(a, b) -> float | None:
  """SSIM of two PIL images, the mean over channels; None when the shapes differ (or are too small)."""
  x, y = np.asarray(a), np.asarray(b)
  if x.shape != y.shape:
    return None
  if x.ndim == 2:
    x, y = x[..., None], y[..., None]
  try:
    return float(np.mean([ssim(x[..., c], y[..., c]) for c in range(x.shape[-1])]))
  except ValueError:
    return None


def _similar(a, b, threshold: float = 0.9) -> bool:
  s = structure_sim(a, b)
  return s is not None and s >= threshold


def _two(result: bytes | None, expected: bytes | None):
  a, b = _open(result), _open(expected)
  return (a, b) if a is not None and b is not None else (None, None)


def compare_image_list(result: Any, expected: Any, **_) -> float:
  from PIL import ImageChops   # Pillow only when an image is read or drawn (start-up cost)
  pairs = list(zip(result, expected)) if isinstance(result, list) else [(result, expected)]
  for r, e in pairs:
    a, b = _two(r, e)
    if a is None or a.size != b.size or a.mode != b.mode or ImageChops.difference(a, b).getbbox():
      return 0.0
  return 1.0


def _brightness(img) -> float:
  return float(np.asarray(img.convert("L"), dtype=np.float64).mean())


def _normalised(img, target: float = 128.0) -> np.ndarray:
  factor = target / _brightness(img)
  return np.clip(np.floor(np.asarray(img, dtype=np.float64) * factor), 0, 255)


def check_brightness_decrease_and_structure_sim(result: bytes | None, expected: bytes | None, **_) -> float:
  a, b = _two(result, expected)
  if a is None:
    return 0.0
  if not _brightness(a) < _brightness(b):
    return 0.0
  x, y = _normalised(a), _normalised(b)
  if x.shape != y.shape:
    return 0.0
  return float(np.mean((x / 255 - y / 255) ** 2) < 0.03)


def check_saturation_increase_and_structure_sim(result: bytes | None, expected: bytes | None, **_) -> float:
  a, b = _two(result, expected)
  if a is None:
    return 0.0
  ha, hb = a.convert("RGB").convert("HSV"), b.convert("RGB").convert("HSV")
  (h1, s1, v1), (h2, s2, v2) = ha.split(), hb.split()
  more = np.asarray(s1, dtype=np.float64).mean() > np.asarray(s2, dtype=np.float64).mean()
  return float(more and _similar(h1, h2) and _similar(v1, v2))


def check_contrast_increase_and_structure_sim(result: bytes | None, expected: bytes | None, **_) -> float:
  a, b = _two(result, expected)
  if a is None:
    return 0.0
  higher = np.asarray(a, dtype=np.float32).std() > np.asarray(b, dtype=np.float32).std()
  return float(higher and _similar(a, b, 0.65))


def check_file_exists_and_structure_sim(result: bytes | None, expected: bytes | None, **_) -> float:
  a, b = _two(result, expected)
  return float(a is not None and _similar(a, b))


def check_structure_sim_resized(result: bytes | None, expected: bytes | None, **_) -> float:
  a, b = _two(result, expected)
  return float(a is not None and _similar(a.resize(b.size), b))


def check_palette_and_structure_sim(result: bytes | None, expected: bytes | None, **_) -> float:
  a, b = _two(result, expected)
  return float(a is not None and a.mode == "P" and _similar(a.convert("RGB"), b))


def check_image_mirror(result: bytes | None, expected: bytes | None, **_) -> float:
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  a, b = _two(result, expected)
  return float(a is not None and _similar(a.transpose(Image.Transpose.FLIP_LEFT_RIGHT), b, 0.99))


def check_green_background(result: bytes | None, expected: bytes | None, **_) -> float:
  a, b = _two(result, expected)
  if a is None:
    return 0.0
  src, tgt = np.asarray(a.convert("RGB"), dtype=np.int32), np.asarray(b.convert("RGB"))
  if src.shape != tgt.shape:
    return 0.0
  background = np.any(tgt != 0, axis=-1)
  r, g, bl = src[..., 0], src[..., 1], src[..., 2]
  return float(np.all(((g > r) & (g > bl))[background]))


def check_textbox_on_leftside(result: bytes | None, expected: Any = None, **_) -> float:
  a = _open(result)
  if a is None:
    return 0.0
  dark = np.asarray(a.convert("L")) < 128
  cols = np.nonzero(dark.any(axis=0))[0]
  return float(cols.size > 0 and cols[0] < a.size[0] * 0.05)


def check_triangle_position(result: bytes | None, expected: Any = None, **_) -> float:
  a = _open(result)
  if a is None:
    return 0.0
  px = np.asarray(a.convert("RGB"))
  colours, inverse, counts = np.unique(px.reshape(-1, 3), axis=0, return_inverse=True, return_counts=True)
  if len(colours) < 2:
    return 0.0
  triangle = np.argsort(counts)[-2]
  coords = np.argwhere(inverse.reshape(px.shape[:2]) == triangle)
  shape = np.array(px.shape[:2], dtype=np.float64)
  return float(np.all(np.abs(coords.mean(axis=0) - shape / 2) < 0.05 * shape))


def check_image_size(result: bytes | None, rules: dict, **_) -> float:
  a = _open(result)
  if a is None:
    return 0.0
  return float((rules.get("height") is None or a.size[1] == rules["height"]) and
               (rules.get("width") is None or a.size[0] == rules["width"]))


def check_image_file_size(result: bytes | None, rules: dict, **_) -> float:
  return float(result is not None and len(result) < rules["max_size"])


NAMES = ("compare_image_list", "check_brightness_decrease_and_structure_sim", "check_saturation_increase_and_structure_sim",
         "check_contrast_increase_and_structure_sim", "check_file_exists_and_structure_sim", "check_structure_sim_resized",
         "check_palette_and_structure_sim", "check_image_mirror", "check_green_background", "check_textbox_on_leftside",
         "check_triangle_position", "check_image_size", "check_image_file_size")
