"""Packed bins on disk: ArrayRecord shards of compactly serialised bins.

A record stores only a bin's real content (no padding): the concatenated
tokens and Sample loss masks, segment lengths/sources/metadata, the real patch
rows and their positions, and patches per image. `decode_bin` rebuilds the
fixed-shape row of docs/ARCHITECTURE.md with `packing.assemble_from_parts`, so
a 32,768-slot bin with few images is a few hundred KB on disk, not 75 MB.

Image deduplication (format version 2, the default): consecutive steps of one
episode show the same screenshots (o_{t-1} and o_t of step t are o_{t-2} and
o_{t-1} of step t+1), so when they share a bin each distinct image -- the same
patch rows *and* (t, h, w) positions -- is stored once, and `image_refs` lists,
per image occurrence in bin order, which distinct image it is. Decoding copies
each occurrence into place, so the decoded bin is byte-identical to the
version-1 encoding (every occurrence stored; still written with dedup=False and
still read). What it saves depends on how often the packer puts neighbouring
steps of an episode into one bin: about half the image bytes on a small synthetic
set packed in one window, but only ~3% in a simulation of stage-4-scale packing
(best-fit-decreasing over 2,048-sample windows scatters an episode's steps).

Record layout (little-endian):
  b"MGB1" | uint32 header length | header JSON (utf-8) | pad to 8 | buffers
The header lists each buffer's name, dtype, shape and offset, plus the format
`version` (absent = 1), seq_len, patch_budget and the per-segment metadata
(episode id, step, stage, source).
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import struct
from typing import Any, Iterable, Sequence

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from mage_jax.data.packing import PackedBin, assemble_from_parts, concat_segments

MAGIC = b"MGB1"
FORMAT_VERSION = 2  # 1: every image occurrence stored; 2: distinct images + image_refs
SHARD_SUFFIX = ".array_record"
# group_size:1 keeps random access (shuffled reads) to one record per read.
WRITER_OPTIONS = "group_size:1"


def _json_safe(meta: dict) -> dict:
  return {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v))
          for k, v in meta.items()}


def dedup_images(parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Compact parts (`concat_segments`) -> parts storing each distinct image once, plus image_refs.

  Two occurrences are the same image when their patch rows and (t, h, w) positions are
  equal (a hash picks the candidate, `np.array_equal` confirms it: never a false merge).
  """
  patches, positions = parts["patches"], parts["patch_positions"]
  counts = np.asarray(parts["image_patches"], np.int64)
  starts = np.zeros(len(counts), np.int64)
  np.cumsum(counts[:-1], out=starts[1:])
  buckets: dict[bytes, list[int]] = {}
  kept: list[int] = []        # occurrence index of each distinct image
  refs = np.empty(len(counts), np.int32)
  for i, (s, n) in enumerate(zip(starts.tolist(), counts.tolist())):
    rows, pos = patches[s:s + n], positions[s:s + n]
    h = hashlib.sha256(np.ascontiguousarray(pos))
    h.update(np.ascontiguousarray(rows))
    candidates = buckets.setdefault(h.digest(), [])
    for u in candidates:
      k = kept[u]
      if (counts[k] == n and np.array_equal(patches[starts[k]:starts[k] + n], rows)
          and np.array_equal(positions[starts[k]:starts[k] + n], pos)):
        refs[i] = u
        break
    else:
      candidates.append(len(kept))
      refs[i] = len(kept)
      kept.append(i)
  out = dict(parts)
  if len(kept) < len(counts):  # else the occurrence arrays already are the distinct ones
    out["patches"] = np.concatenate([patches[starts[k]:starts[k] + counts[k]] for k in kept])
    out["patch_positions"] = np.concatenate(
        [positions[starts[k]:starts[k] + counts[k]] for k in kept])
    out["image_patches"] = counts[kept]
  out["image_refs"] = refs
  return out


def encode_bin(b: PackedBin, seq_len: int, patch_budget: int, dedup: bool = True) -> bytes:
  """A bin's record; dedup=False writes format version 1 (every image occurrence stored)."""
  parts = concat_segments(b.segments)
  if dedup:
    parts = dedup_images(parts)
  buffers, offset, entries = [], 0, []
  for name, arr in parts.items():
    arr = np.ascontiguousarray(arr)
    entries.append(dict(name=name, dtype=arr.dtype.str, shape=list(arr.shape), offset=offset))
    buffers.append(arr.tobytes())
    offset += len(buffers[-1])
    pad = (-offset) % 8
    if pad:
      buffers.append(b"\0" * pad)
      offset += pad
  header = json.dumps(dict(version=FORMAT_VERSION if dedup else 1, seq_len=seq_len,
                           patch_budget=patch_budget, buffers=entries,
                           segments=[_json_safe(s.meta) for s in b.segments]),
                      separators=(",", ":")).encode()
  head = MAGIC + struct.pack("<I", len(header)) + header
  head += b"\0" * ((-len(head)) % 8)
  return head + b"".join(buffers)


def decode_parts(record: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """(header, compact parts) of a record; raises ValueError on a foreign or corrupt record."""
  if record[:4] != MAGIC:
    raise ValueError(f"not a packed-bin record (magic {record[:4]!r})")
  (hlen,) = struct.unpack_from("<I", record, 4)
  header = json.loads(record[8:8 + hlen])
  version = header.get("version", 1)
  if version not in (1, 2):
    raise ValueError(f"packed-bin record format version {version}; this reader knows 1 and 2")
  base = 8 + hlen + ((-(8 + hlen)) % 8)
  parts = {}
  for e in header["buffers"]:
    dtype = np.dtype(e["dtype"])
    count = int(np.prod(e["shape"], dtype=np.int64))
    parts[e["name"]] = np.frombuffer(record, dtype, count, base + e["offset"]).reshape(e["shape"])
  if version == 2 and "image_refs" not in parts:
    raise ValueError("packed-bin record version 2 without an image_refs buffer")
  return header, parts


def decode_header_parts(record: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """(shape header, compact parts): the pipeline's per-record map; `assemble_batch` batches them."""
  header, parts = decode_parts(record)
  return {"seq_len": header["seq_len"], "patch_budget": header["patch_budget"]}, parts


def decode_bin(record: bytes) -> dict[str, np.ndarray]:
  """Record -> the fixed-shape bin (exactly the ARCHITECTURE.md keys)."""
  header, parts = decode_parts(record)
  return assemble_from_parts(**parts, seq_len=header["seq_len"],
                             patch_budget=header["patch_budget"])


def decode_meta(record: bytes) -> list[dict]:
  """Per-segment metadata of a record."""
  return decode_parts(record)[0]["segments"]


class ShardWriter:
  """Writes bins to <dir>/shard-00000.array_record, ... with `records_per_shard` each."""

  def __init__(self, directory: str, records_per_shard: int = 256, prefix: str = "shard"):
    self.directory, self.records_per_shard, self.prefix = directory, records_per_shard, prefix
    os.makedirs(directory, exist_ok=True)
    self._writer: ArrayRecordWriter | None = None
    self._in_shard = 0
    self.paths: list[str] = []
    self.num_records = 0

  def write(self, record: bytes) -> None:
    if self._writer is None or self._in_shard >= self.records_per_shard:
      self._close_shard()
      path = os.path.join(self.directory, f"{self.prefix}-{len(self.paths):05d}{SHARD_SUFFIX}")
      self._writer = ArrayRecordWriter(path, WRITER_OPTIONS)
      self.paths.append(path)
    self._writer.write(record)
    self._in_shard += 1
    self.num_records += 1

  def _close_shard(self) -> None:
    if self._writer is not None:
      self._writer.close()
    self._writer, self._in_shard = None, 0

  def close(self) -> None:
    self._close_shard()

  def __enter__(self) -> "ShardWriter":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def write_bins(bins: Iterable[PackedBin], directory: str, seq_len: int, patch_budget: int,
               records_per_shard: int = 256, dedup: bool = True) -> list[str]:
  with ShardWriter(directory, records_per_shard) as w:
    for b in bins:
      w.write(encode_bin(b, seq_len, patch_budget, dedup))
  return w.paths


def shard_paths(path: str) -> list[str]:
  """A shard file, or every shard under a directory (recursively), sorted."""
  if os.path.isfile(path):
    return [path]
  found = sorted(glob.glob(os.path.join(path, "**", "*" + SHARD_SUFFIX), recursive=True))
  if not found:
    raise FileNotFoundError(f"no *{SHARD_SUFFIX} shards under {path}")
  return found


def read_records(paths: Sequence[str]) -> Iterable[bytes]:
  """Every record of the shards, in order (for inspection and tests)."""
  for p in paths:
    reader = ArrayRecordReader(p)
    try:
      for i in range(reader.num_records()):
        yield reader.read([i])[0]
    finally:
      reader.close()
