"""Screenshot thumbnails: JPEG, made in parallel; the full-size PNG stays where the run wrote it
and is linked by relative path."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from typing import Iterable

from PIL import Image
from tqdm import tqdm

THUMB_WIDTH = 512   # 1280-wide screenshots: reduce(2) then a 640 -> 512 resize
QUALITY = 60


@dataclasses.dataclass
class Thumb:
  src: str                  # the screenshot (absolute)
  dst: str                  # the thumbnail (absolute)
  size: tuple[int, int] | None = None   # the screenshot's size; None: unreadable
  error: str | None = None


def inside(path: str, root: str) -> bool:
  """Whether `path` (after symlinks) lies under `root`: the report only reads the run's own files."""
  path, root = os.path.realpath(path), os.path.realpath(root)
  return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _make(job: tuple[str, str, int, int]) -> tuple[tuple[int, int] | None, str | None]:
  src, dst, width, quality = job
  try:
    with Image.open(src) as im:
      size = im.size
      im = im.convert("RGB")
      factor = max(1, size[0] // width)
      if factor > 1:
        im = im.reduce(factor)   # box filter by an integer factor: fast, and fine for a preview
      if im.width > width:
        im = im.resize((width, max(1, round(im.height * width / im.width))), Image.BILINEAR)
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      im.save(dst, "JPEG", quality=quality, optimize=False)
    return size, None
  except (OSError, ValueError, Image.DecompressionBombError) as e:
    return None, f"{type(e).__name__}: {str(e)[:200]}"


def make_thumbnails(thumbs: Iterable[Thumb], workers: int | None = None, width: int = THUMB_WIDTH,
                    quality: int = QUALITY, progress: bool = True) -> list[Thumb]:
  thumbs = list(thumbs)
  jobs = [(t.src, t.dst, width, quality) for t in thumbs]
  workers = workers or min(8, os.cpu_count() or 1)
  bar = tqdm(total=len(jobs), desc="report: thumbnails", unit="img", disable=not progress or not jobs)
  if workers > 1 and len(jobs) > 8:
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
      results = []
      for r in pool.map(_make, jobs, chunksize=16):
        results.append(r)
        bar.update()
  else:
    results = []
    for job in jobs:
      results.append(_make(job))
      bar.update()
  bar.close()
  for t, (size, error) in zip(thumbs, results):
    t.size, t.error = size, error
  return thumbs
