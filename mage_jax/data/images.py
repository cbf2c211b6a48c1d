"""Image preprocessing for Mage-ViT (DESIGN.md "Image preprocessing").

Bins store smart-resized uint8 RGB pixels; `patchify` turns them into patch
rows in 2x2 merge-block order when a batch is assembled, and
`normalize_patch_rows` (CLIP, (x - 255*mean) / (255*std)) runs on host or on
device. fp32 rows would be 4x larger on disk and in every copy.
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image

# One definition of the CLIP constants and the normalisation, shared with the vision tower (NumPy only).
from mage_jax.models.clip_norm import CLIP_MEAN, CLIP_STD, normalize_patch_rows  # noqa: F401

PATCH = 16
MERGE = 2
FACTOR = PATCH * MERGE  # 32: every side is a multiple of one merge block
PATCH_DIM = 3 * PATCH * PATCH  # 768
MIN_PIXELS = 3_136
MAX_PIXELS = 4_000_000
MAX_ASPECT = 200


def smart_resize(height: int, width: int, factor: int = FACTOR, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
  """(h, w) -> resized (h', w'), both multiples of `factor`, area within [min, max] pixels.

  Round each side to a multiple of factor (at least factor); if the area is above
  max_pixels scale down by sqrt(hw/max) with floor; if below min_pixels scale up
  with ceil. `round` is Python's (half to even), as in the reference processors:
  720 -> 704 (22.5 -> 22 blocks).
  """
  if height <= 0 or width <= 0:
    raise ValueError(f"image size must be positive, got {height}x{width}")
  if max(height, width) / min(height, width) > MAX_ASPECT:
    raise ValueError(f"aspect ratio of {height}x{width} exceeds {MAX_ASPECT}")
  h_bar = max(factor, round(height / factor) * factor)
  w_bar = max(factor, round(width / factor) * factor)
  if h_bar * w_bar > max_pixels:
    beta = math.sqrt(height * width / max_pixels)
    h_bar = max(factor, math.floor(height / beta / factor) * factor)
    w_bar = max(factor, math.floor(width / beta / factor) * factor)
  elif h_bar * w_bar < min_pixels:
    beta = math.sqrt(min_pixels / (height * width))
    h_bar = math.ceil(height * beta / factor) * factor
    w_bar = math.ceil(width * beta / factor) * factor
  return h_bar, w_bar


def num_image_tokens(height: int, width: int) -> int:
  """<|image_pad|> tokens for an already-resized image: (h/16)(w/16)/4."""
  return (height // PATCH) * (width // PATCH) // (MERGE * MERGE)


def image_size(path: str) -> tuple[int, int]:
  """(width, height) from the file header, without decoding pixels."""
  with Image.open(path) as im:
    return im.size


def resized_size(path: str, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
  """(h', w') the image at `path` will have after smart_resize."""
  w, h = image_size(path)
  return smart_resize(h, w, min_pixels=min_pixels, max_pixels=max_pixels)


def resize_image(image: Image.Image | np.ndarray, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> np.ndarray:
  """PIL image or uint8 [H, W, 3] -> smart-resized uint8 RGB [H', W', 3] (Pillow bicubic)."""
  if isinstance(image, np.ndarray):
    image = Image.fromarray(image)
  image = image.convert("RGB")
  w, h = image.size
  nh, nw = smart_resize(h, w, min_pixels=min_pixels, max_pixels=max_pixels)
  if (nh, nw) != (h, w):
    image = image.resize((nw, nh), Image.BICUBIC)
  return np.asarray(image, dtype=np.uint8)


def load_image(path: str, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> np.ndarray:
  """Reads and smart-resizes an image file to uint8 RGB [H', W', 3]."""
  with Image.open(path) as im:
    return resize_image(im, min_pixels, max_pixels)


def patchify(image: np.ndarray, t: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """uint8 [H, W, 3] (sides multiples of 32) -> (rows uint8 [N, 768], positions int32 [N, 3]).

  Rows are in 2x2 merge-block order: blocks row-major over the image, the four
  patches of a block row-major inside it; each row is one 16x16 patch flattened
  as [C, 16, 16]. positions[i] = (t, patch row, patch column) of row i.
  """
  if image.ndim != 3 or image.shape[2] != 3:
    raise ValueError(f"expected [H, W, 3], got shape {image.shape}")
  h, w = image.shape[:2]
  if h % FACTOR or w % FACTOR:
    raise ValueError(f"image sides must be multiples of {FACTOR} (smart_resize first), got {h}x{w}")
  gh, gw = h // PATCH, w // PATCH
  x = image.reshape(gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH, 3)
  # (block row, block col, row in block, col in block, C, patch y, patch x)
  rows = x.transpose(0, 3, 1, 4, 6, 2, 5).reshape(gh * gw, PATCH_DIM)
  hh = np.arange(gh).reshape(gh // MERGE, 1, MERGE, 1)
  ww = np.arange(gw).reshape(1, gw // MERGE, 1, MERGE)
  hh, ww = np.broadcast_arrays(hh, ww)
  positions = np.stack([np.full(gh * gw, t), hh.reshape(-1), ww.reshape(-1)], axis=1)
  return np.ascontiguousarray(rows), positions.astype(np.int32)
