"""Packed bins on disk: ArrayRecord shards of compactly serialised bins.

A record stores only a bin's real content (no padding): the concatenated
tokens and Sample loss masks, segment lengths/sources/metadata, the real patch
rows and their positions, and patches per image. `decode_bin` rebuilds the
fixed-shape row of docs/ARCHITECTURE.md with `packing.assemble_from_parts`, so
a 32,768-slot bin with few images is a few hundred KB on disk, not 75 MB.

Record layout (little-endian):
  b"MGB1" | uint32 header length | header JSON (utf-8) | pad to 8 | buffers
The header lists each buffer's name, dtype, shape and offset, plus seq_len,
patch_budget and the per-segment metadata (episode id, step, stage, source).
"""
from __future__ import annotations

import glob
import json
import os
import struct
from typing import Any, Iterable, Sequence

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from mage_jax.data.packing import PackedBin, assemble_from_parts, concat_segments

MAGIC = b"MGB1"
SHARD_SUFFIX = ".array_record"
# group_size:1 keeps random access (shuffled reads) to one record per read.
WRITER_OPTIONS = "group_size:1"


def _json_safe(meta: dict) -> dict:
  return {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v))
          for k, v in meta.items()}


def encode_bin(b: PackedBin, seq_len: int, patch_budget: int) -> bytes:
  parts = concat_segments(b.segments)
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
  header = json.dumps(dict(seq_len=seq_len, patch_budget=patch_budget, buffers=entries,
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
  base = 8 + hlen + ((-(8 + hlen)) % 8)
  parts = {}
  for e in header["buffers"]:
    dtype = np.dtype(e["dtype"])
    count = int(np.prod(e["shape"], dtype=np.int64))
    parts[e["name"]] = np.frombuffer(record, dtype, count, base + e["offset"]).reshape(e["shape"])
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
               records_per_shard: int = 256) -> list[str]:
  with ShardWriter(directory, records_per_shard) as w:
    for b in bins:
      w.write(encode_bin(b, seq_len, patch_budget))
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
