"""Mage-VL image preprocessing on the engine side: NumPy + Pillow, no torch, no vLLM.

The engine venv has no JAX, so it cannot import `mage_jax.data.images`; this
module restates the same maths from DESIGN.md "Image preprocessing", and
tests/test_vllm_mage_vl.py checks it against `mage_jax.data.images` array for
array. Pin the same Pillow in both venvs: bicubic output varies across versions.

- `smart_resize`: each side rounded to a multiple of 32 (at least 32), area
  scaled into [min_pixels, max_pixels] (floor when shrinking, ceil when growing);
- resize: Pillow `Image.BICUBIC`, only when the size changes;
- patches: 16x16, emitted in 2x2 merge-block order (blocks row-major, the four
  patches of a block row-major), each flattened as [C, 16, 16];
- CLIP normalisation as (x - 255*mean) / (255*std) on 0..255 values in fp32.
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image

PATCH = 16
MERGE = 2
FACTOR = PATCH * MERGE
MIN_PIXELS = 3_136
MAX_PIXELS = 4_000_000
MAX_ASPECT = 200
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def smart_resize(height: int, width: int, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
  """(h, w) -> (h', w'), multiples of 32 with the area in [min_pixels, max_pixels]."""
  if height <= 0 or width <= 0:
    raise ValueError(f"image size must be positive, got {height}x{width}")
  if max(height, width) / min(height, width) > MAX_ASPECT:
    raise ValueError(f"aspect ratio of {height}x{width} exceeds {MAX_ASPECT}")
  # Python's round (half to even), as the reference processors use: 720 -> 704.
  h_bar = max(FACTOR, round(height / FACTOR) * FACTOR)
  w_bar = max(FACTOR, round(width / FACTOR) * FACTOR)
  if h_bar * w_bar > max_pixels:
    beta = math.sqrt(height * width / max_pixels)
    h_bar = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
    w_bar = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
  elif h_bar * w_bar < min_pixels:
    beta = math.sqrt(min_pixels / (height * width))
    h_bar = math.ceil(height * beta / FACTOR) * FACTOR
    w_bar = math.ceil(width * beta / FACTOR) * FACTOR
  return h_bar, w_bar


def resize(image: Image.Image, min_pixels: int = MIN_PIXELS,
           max_pixels: int = MAX_PIXELS) -> np.ndarray:
  """PIL image -> smart-resized uint8 RGB [H', W', 3]."""
  image = image.convert("RGB")
  w, h = image.size
  nh, nw = smart_resize(h, w, min_pixels, max_pixels)
  if (nh, nw) != (h, w):
    image = image.resize((nw, nh), Image.BICUBIC)
  return np.asarray(image, dtype=np.uint8)


def patch_rows(image: np.ndarray) -> np.ndarray:
  """uint8 [H, W, 3] (sides multiples of 32) -> uint8 [(H/16)(W/16), 768] in 2x2 block order."""
  h, w = image.shape[:2]
  if image.ndim != 3 or image.shape[2] != 3 or h % FACTOR or w % FACTOR:
    raise ValueError(f"expected [H, W, 3] with sides multiples of {FACTOR}, got {image.shape}")
  gh, gw = h // PATCH, w // PATCH
  x = image.reshape(gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH, 3)
  # -> (block row, block col, row in block, col in block, C, y, x)
  return np.ascontiguousarray(x.transpose(0, 3, 1, 4, 6, 2, 5).reshape(gh * gw, 3 * PATCH * PATCH))


def normalize(rows: np.ndarray) -> np.ndarray:
  """uint8 patch rows [N, 3*P*P] -> fp32 (x - 255*mean) / (255*std), channel = column // (P*P)."""
  per_channel = rows.shape[-1] // 3
  mean = np.repeat(255.0 * np.asarray(CLIP_MEAN, np.float64), per_channel).astype(np.float32)
  std = np.repeat(255.0 * np.asarray(CLIP_STD, np.float64), per_channel).astype(np.float32)
  return (rows.astype(np.float32) - mean) / std


def preprocess(image: Image.Image, min_pixels: int = MIN_PIXELS,
               max_pixels: int = MAX_PIXELS) -> tuple[np.ndarray, tuple[int, int, int]]:
  """PIL image -> (normalised fp32 patch rows [N, 768], patch grid (t=1, h/16, w/16))."""
  pixels = resize(image, min_pixels, max_pixels)
  grid = (1, pixels.shape[0] // PATCH, pixels.shape[1] // PATCH)
  return normalize(patch_rows(pixels)), grid


def num_image_tokens(height: int, width: int, min_pixels: int = MIN_PIXELS,
                     max_pixels: int = MAX_PIXELS) -> int:
  """<|image_pad|> tokens for an image of the given original size: one per 2x2 block."""
  h, w = smart_resize(height, width, min_pixels, max_pixels)
  return (h // FACTOR) * (w // FACTOR)
