"""An episode's screenshots packed for the trip from an env host back to the learner.

Over Ray (agent/ray_slots.py) a finished episode's `RolloutPolicy` comes back through the
object store with its samples, and a GUI sample carries every screenshot of its prompt (up to
`episode.visual_turns`), each a fresh array rendered from the episode's files. Pickled as they
are, 50 calls x 3 screenshots of 1280x800 RGB are 150 raw arrays, ~460 MB in one object.
Packed: each distinct screenshot once (identical pixels found by a content hash), PNG-encoded
(lossless; a 1280x800 desktop screenshot is ~60 KB of its 3 MB: BENCHMARKS.md), and each
sample keeps indices into that list. The payload is then bounded by the episode's distinct
screenshots (at most max_steps + 1) times one encoded screenshot, whatever visual_turns is.
Unpacking decodes each distinct screenshot once; the samples that show it share that array
(the learner only reads them).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
from typing import Sequence

import numpy as np

from mage_jax.rl.batch import RLSample


@dataclasses.dataclass
class PackedScreenshots:
  blobs: list[bytes | np.ndarray]   # PNG bytes, or the array itself when PNG cannot hold it exactly
  refs: list[list[int] | None]      # per sample: indices into blobs (None: the sample had none)
  raw_bytes: int                    # what the samples' arrays add up to unpacked

  @property
  def nbytes(self) -> int:
    return sum(len(b) if isinstance(b, bytes) else b.nbytes for b in self.blobs)


def _png_exact(a: np.ndarray) -> bool:
  """PNG holds uint8 grey, RGB and RGBA exactly."""
  return a.dtype == np.uint8 and (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (3, 4)))


def encode_screenshot(a: np.ndarray) -> bytes | np.ndarray:
  if not _png_exact(a):
    return np.array(a)
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  buf = io.BytesIO()
  # compress_level 1: most of the size win of PNG's filters at a fraction of level 6's time
  Image.fromarray(np.ascontiguousarray(a)).save(buf, format="PNG", compress_level=1)
  return buf.getvalue()


def decode_screenshot(blob: bytes | np.ndarray) -> np.ndarray:
  if not isinstance(blob, bytes):
    return blob
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  return np.array(Image.open(io.BytesIO(blob)))


def pack(samples: Sequence[RLSample]) -> tuple[list[RLSample], PackedScreenshots]:
  """(the samples without images, their screenshots packed)."""
  index: dict[tuple, int] = {}
  blobs: list[bytes | np.ndarray] = []
  refs: list[list[int] | None] = []
  raw = 0
  for s in samples:
    if s.images is None:
      refs.append(None)
      continue
    ids = []
    for im in s.images:
      a = np.asarray(im)
      raw += a.nbytes
      key = (a.shape, a.dtype.str, hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).digest())
      if key not in index:
        index[key] = len(blobs)
        blobs.append(encode_screenshot(a))
      ids.append(index[key])
    refs.append(ids)
  bare = [dataclasses.replace(s, images=None) for s in samples]
  return bare, PackedScreenshots(blobs, refs, raw)


def unpack(samples: Sequence[RLSample], packed: PackedScreenshots) -> list[RLSample]:
  if len(samples) != len(packed.refs):
    raise ValueError(f"packed screenshots: {len(packed.refs)} samples' references for "
                     f"{len(samples)} samples")
  arrays = [decode_screenshot(b) for b in packed.blobs]
  return [s if ids is None else dataclasses.replace(s, images=[arrays[i] for i in ids])
          for s, ids in zip(samples, packed.refs)]
