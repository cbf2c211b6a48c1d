"""Streaming safetensors reader and sharding writer (no mmap, one tensor at a time).

The format: 8-byte little-endian header length N, N bytes of JSON
(`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`,
offsets relative to the end of the header), then the raw little-endian data.

We read with `os.preadv` straight into a numpy buffer instead of the
`safetensors` package's mmap: pages of a mapped file count in the process's
resident set until the mapping is closed, so importing from one large mmapped
file would keep a second copy of the checkpoint resident. With pread the only
host copy is the one being placed on devices, and a slice along HF dim 0 reads
only those rows. bf16/fp8 come from `ml_dtypes` (a JAX dependency).

A checkpoint directory is either one `model.safetensors` or shards listed in
`model.safetensors.index.json` (`{"metadata": {"total_size"}, "weight_map": {name: file}}`).
The writer produces the same layout: one file, or `model-0000i-of-0000N.safetensors`
shards of at most `max_shard_bytes` plus the index.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
from typing import Callable, Iterable

import ml_dtypes
import numpy as np

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32), "I16": np.dtype(np.int16), "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}
DTYPE_NAMES: dict[np.dtype, str] = {v: k for k, v in DTYPES.items()}
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MAX_HEADER = 100 * 1024 * 1024
_SHARD_RE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")


def dtype_name(dtype) -> str:
  d = np.dtype(dtype)
  if d not in DTYPE_NAMES:
    raise ValueError(f"dtype {d} has no safetensors name")
  return DTYPE_NAMES[d]


@dataclasses.dataclass(frozen=True)
class TensorEntry:
  name: str
  file: str            # absolute path
  dtype: np.dtype
  shape: tuple[int, ...]
  offset: int          # absolute byte offset of the data in `file`
  nbytes: int


def read_header(path: str) -> list[TensorEntry]:
  """Parse one safetensors file's header; errors name the file."""
  with open(path, "rb") as f:
    raw = f.read(8)
    if len(raw) != 8:
      raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", raw)
    if n > _MAX_HEADER:
      raise ValueError(f"{path}: header length {n} is implausible; not a safetensors file?")
    try:
      header = json.loads(f.read(n))
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: header is not valid JSON ({e})") from e
    size = os.fstat(f.fileno()).st_size
  entries = []
  for name, info in header.items():
    if name == "__metadata__":
      continue
    if info.get("dtype") not in DTYPES:
      raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {info.get('dtype')!r}")
    dtype = DTYPES[info["dtype"]]
    shape = tuple(int(s) for s in info["shape"])
    begin, end = info["data_offsets"]
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if end - begin != nbytes or 8 + n + end > size:
      raise ValueError(f"{path}: tensor {name!r} offsets {begin}..{end} do not match "
                       f"shape {shape} {info['dtype']} or the file size {size}")
    entries.append(TensorEntry(name, os.path.abspath(path), dtype, shape, 8 + n + begin, nbytes))
  return entries


def checkpoint_files(path: str) -> list[str]:
  """The safetensors files of a checkpoint: a file, or a dir (index, single file, or all)."""
  if os.path.isfile(path):
    return [path]
  if not os.path.isdir(path):
    raise FileNotFoundError(f"{path}: no such checkpoint file or directory")
  index = os.path.join(path, INDEX_FILE)
  if os.path.exists(index):
    with open(index) as f:
      try:
        weight_map = json.load(f)["weight_map"]
      except (json.JSONDecodeError, KeyError) as e:
        raise ValueError(f"{index}: not a safetensors index with a weight_map ({e})") from e
    files = sorted(set(weight_map.values()))
    missing = [f for f in files if not os.path.exists(os.path.join(path, f))]
    if missing:
      raise FileNotFoundError(f"{index} lists shard files that do not exist: {missing}")
    return [os.path.join(path, f) for f in files]
  single = os.path.join(path, SINGLE_FILE)
  if os.path.exists(single):
    return [single]
  files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
  if not files:
    raise FileNotFoundError(f"{path}: no {INDEX_FILE}, {SINGLE_FILE} or *.safetensors files")
  return [os.path.join(path, f) for f in files]


class SafetensorsReader:
  """Random access to the tensors of a checkpoint file or directory, by name."""

  def __init__(self, path: str):
    self.path = path
    self.entries: dict[str, TensorEntry] = {}
    for file in checkpoint_files(path):
      for e in read_header(file):
        if e.name in self.entries:
          raise ValueError(f"tensor {e.name!r} appears in both {self.entries[e.name].file} "
                           f"and {file}")
        self.entries[e.name] = e
    self._fds: dict[str, int] = {}

  def names(self) -> list[str]:
    return list(self.entries)

  def __contains__(self, name: str) -> bool:
    return name in self.entries

  def shape(self, name: str) -> tuple[int, ...]:
    return self.entries[name].shape

  def _fd(self, file: str) -> int:
    if file not in self._fds:
      self._fds[file] = os.open(file, os.O_RDONLY)
    return self._fds[file]

  def read(self, name: str, rows: slice | None = None) -> np.ndarray:
    """The tensor, or only rows `rows` of its dim 0 (a contiguous byte range)."""
    e = self.entries[name]
    if not e.shape:
      start, stop, out_shape = 0, 1, ()
    else:
      start, stop, step = (rows or slice(None)).indices(e.shape[0])
      if step != 1:
        raise ValueError(f"{name}: strided row reads are not supported")
      out_shape = (max(stop - start, 0),) + e.shape[1:]
    row_bytes = e.nbytes // e.shape[0] if e.shape and e.shape[0] else e.nbytes
    out = np.empty(out_shape, e.dtype)
    buf = out.reshape(-1).view(np.uint8)
    offset, done = e.offset + start * row_bytes, 0
    fd = self._fd(e.file)
    while done < buf.size:  # preadv may return short reads for large requests
      n = os.preadv(fd, [buf[done:]], offset + done)
      if n <= 0:
        raise IOError(f"{e.file}: unexpected end of file reading {name!r}")
      done += n
    return out

  def close(self) -> None:
    for fd in self._fds.values():
      os.close(fd)
    self._fds.clear()

  def __enter__(self) -> "SafetensorsReader":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


@dataclasses.dataclass(frozen=True)
class TensorToWrite:
  name: str
  shape: tuple[int, ...]
  dtype: np.dtype

  @property
  def nbytes(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def plan_shards(tensors: list[TensorToWrite], max_shard_bytes: int) -> list[list[TensorToWrite]]:
  """Greedy split in order: a new shard starts when the next tensor would overflow."""
  shards: list[list[TensorToWrite]] = [[]]
  size = 0
  for t in tensors:
    if shards[-1] and size + t.nbytes > max_shard_bytes:
      shards.append([])
      size = 0
    shards[-1].append(t)
    size += t.nbytes
  return shards


def _header_bytes(tensors: list[TensorToWrite], metadata: dict[str, str]) -> bytes:
  header: dict = {"__metadata__": metadata}
  offset = 0
  for t in tensors:
    header[t.name] = {"dtype": dtype_name(t.dtype), "shape": list(t.shape),
                      "data_offsets": [offset, offset + t.nbytes]}
    offset += t.nbytes
  raw = json.dumps(header, separators=(",", ":")).encode()
  raw += b" " * (-len(raw) % 8)  # align the data start to 8 bytes, as safetensors does
  return struct.pack("<Q", len(raw)) + raw


def write_checkpoint(out_dir: str, tensors: list[TensorToWrite],
                     fetch: Callable[[str], np.ndarray], *, max_shard_bytes: int = 5 * 10**9,
                     metadata: dict[str, str] | None = None,
                     on_tensor: Callable[[str], None] | None = None) -> list[str]:
  """Write tensors in order, calling `fetch(name)` for each just before it is written.

  One file (`model.safetensors`) when everything fits in one shard, else
  numbered shards plus `model.safetensors.index.json`. Returns the files
  written. Only one fetched tensor is alive at a time.
  """
  names = [t.name for t in tensors]
  if len(set(names)) != len(names):
    raise ValueError("duplicate tensor names in export list")
  os.makedirs(out_dir, exist_ok=True)
  metadata = {"format": "pt", **(metadata or {})}
  shards = plan_shards(tensors, max_shard_bytes)
  n = len(shards)
  files = [SINGLE_FILE] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors"
                                        for i in range(n)]
  for file, shard in zip(files, shards):
    with open(os.path.join(out_dir, file), "wb") as f:
      f.write(_header_bytes(shard, metadata))
      for t in shard:
        x = np.asarray(fetch(t.name))
        if x.shape != tuple(t.shape) or x.dtype != np.dtype(t.dtype):
          raise ValueError(f"export of {t.name!r}: got {x.shape} {x.dtype}, "
                           f"planned {tuple(t.shape)} {np.dtype(t.dtype)}")
        f.write(np.ascontiguousarray(x).reshape(-1).view(np.uint8).data)
        del x
        if on_tensor is not None:
          on_tensor(t.name)
  if n > 1:
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)},
             "weight_map": {t.name: file for file, shard in zip(files, shards) for t in shard}}
    with open(os.path.join(out_dir, INDEX_FILE), "w") as f:
      json.dump(index, f, indent=2)
  # Files of an earlier export into the same dir would shadow or pad the new one.
  for name in os.listdir(out_dir):
    stale = (name == (SINGLE_FILE if n > 1 else INDEX_FILE)
             or (_SHARD_RE.fullmatch(name) is not None and name not in files))
    if stale:
      os.remove(os.path.join(out_dir, name))
  return files


def write_arrays(out_dir: str, arrays: dict[str, np.ndarray], **kwargs) -> list[str]:
  """Convenience: write in-memory arrays (tests, small exports)."""
  tensors = [TensorToWrite(k, tuple(v.shape), v.dtype) for k, v in arrays.items()]
  return write_checkpoint(out_dir, tensors, arrays.__getitem__, **kwargs)


def iter_tensors(reader: SafetensorsReader, names: Iterable[str] | None = None):
  for name in names if names is not None else reader.names():
    yield name, reader.read(name)
