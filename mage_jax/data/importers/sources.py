"""Reading an importer's input file: JSON Lines (one record per line) or one JSON array of
records (how ScreenSpot-v2 and OSWorld-G ship), each record converted to an Episode or a
counted SkippedItem (`trajectory.convert_parsed`). A skip names the file and the line (JSON
Lines) or the 1-based element number (a JSON array)."""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterator

from PIL import Image

from mage_jax.data import trajectory as tr


def is_json_array(path: str) -> bool:
  """True if the file's first non-blank character (after a byte order mark) is '['."""
  with open(path, "rb") as f:
    head = f.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
  return head[:1] == b"["


def count_records(path: str) -> int:
  """Records the file holds: non-blank lines, or the elements of a JSON array."""
  if is_json_array(path):
    return len(_load_array(path))
  with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is counted here, skipped later
    return sum(1 for line in f if line.strip())


def _load_array(path: str) -> list[Any]:
  try:
    with open(path, encoding="utf-8-sig") as f:
      data = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as e:
    raise ValueError(f"{path}: starts with '[' but is not one valid JSON array ({e}); "
                     "give JSON Lines to import the readable records of a damaged file") from None
  if not isinstance(data, list):
    raise ValueError(f"{path}: expected a JSON array of records")
  return data


def read_records(path: str, convert: Callable[..., tr.Episode], image_root: str | None,
                 **kw) -> Iterator[tr.Episode | tr.SkippedItem]:
  """Each record of `path` through `convert(record, root, episode_id=<stem>-<n>, **kw)`;
  images resolve against `image_root` (default: the file's folder)."""
  root = image_root or os.path.dirname(os.path.abspath(path))
  stem = os.path.splitext(os.path.basename(path))[0]

  def one(record: Any, n: int) -> tr.Episode:
    return convert(record, root, episode_id=f"{stem}-{n}", **kw)

  if not is_json_array(path):
    return tr.convert_jsonl(path, one)
  return tr.convert_parsed(path, ((n, d, None) for n, d in enumerate(_load_array(path), start=1)), one)


def image_size(image: Any, root: str, field: str = "image") -> tuple[int, int]:
  """(W, H) of a record's screenshot (relative to `root`); EpisodeError naming `field` if it is
  missing or unreadable."""
  if not isinstance(image, str) or not image:
    raise tr.EpisodeError(tr.INVALID_FIELD, f"{field}: expected a path")
  path = image if os.path.isabs(image) else os.path.join(root, image)
  if not os.path.isfile(path):
    raise tr.EpisodeError(tr.MISSING_IMAGE, f"{field}: no file {path}")
  try:
    with Image.open(path) as im:
      return im.size
  except Exception as e:  # noqa: BLE001 - Pillow raises many types for bad files
    raise tr.EpisodeError(tr.UNREADABLE_IMAGE, f"{field}: cannot read {path}: {e}") from None
