"""Grain pipeline: packed ArrayRecord shards (or JSONL, packed on the fly) -> device batches.

Per source: records -> truncate to a multiple of process_count -> this
process's slice -> shuffle(seed) -> repeat(epochs) -> decode. Sources are mixed
with their configured weights (`MapDataset.mix`), then read with threads,
batched (batch_size / process_count bins per process), optionally prefetched in
worker processes, and assembled into global jax arrays whose batch dimension is
sharded over the batch axes of the sharding rules table (`act_batch`: data and fsdp).

`DataIterator` is a `grain.DatasetIterator`: `get_state()`/`set_state()` are
JSON-able, so `grain.checkpoint.CheckpointSave(iterator)` stores it in an Orbax
checkpoint. It also counts the bins drawn per source (part of the state).

With a finite `num_epochs` and several sources, the mixture ends when its first
source runs out (Grain's `MapDataset.mix`); use num_epochs=-1 with mixtures and
stop by step count.
"""
from __future__ import annotations

import collections
import copy
import os
import time
from typing import Any, Sequence

import grain
import jax
from jax.sharding import Mesh
import ml_collections
import numpy as np

from mage_jax.data import records
from mage_jax.data.config import source_names
from mage_jax.data.packing import (PATCH_DIM, STAGE4_IMAGE_TOKENS, PackedBin, Segment, TwoBudgetPackIterDataset,
                                   assemble_batch, best_fit_decreasing, stage4_like_lengths)
from mage_jax.sharding import batch_sharding


def _process(process_index: int | None, process_count: int | None) -> tuple[int, int]:
  return (jax.process_index() if process_index is None else process_index,
          jax.process_count() if process_count is None else process_count)


def _per_process_batch(data: ml_collections.ConfigDict, process_count: int) -> int:
  if data.batch_size % process_count:
    raise ValueError(f"batch_size {data.batch_size} is not divisible by process_count {process_count}")
  return data.batch_size // process_count


def _epochs(data: ml_collections.ConfigDict) -> int | None:
  return None if data.num_epochs is None or data.num_epochs < 0 else int(data.num_epochs)


def _shard_shuffle_repeat(ds: grain.MapDataset, seed: int, epochs: int | None,
                          process_index: int, process_count: int) -> grain.MapDataset:
  # Equal counts per process so every process yields the same number of batches.
  usable = len(ds) - len(ds) % process_count
  if usable == 0:
    raise ValueError(f"a source has {len(ds)} items, fewer than process_count={process_count}")
  ds = ds[:usable][process_index::process_count]
  return ds.shuffle(seed=seed).repeat(epochs)


def _mix(datasets: Sequence[grain.MapDataset], weights: Sequence[float]) -> grain.MapDataset:
  if len(datasets) == 1:
    return datasets[0]
  if any(w <= 0 for w in weights):
    raise ValueError(f"mixture weights must be positive, got {list(weights)}")
  return grain.MapDataset.mix(list(datasets), list(weights))


def _finish(ds: grain.IterDataset, data: ml_collections.ConfigDict, process_count: int,
            batch_fn=None) -> grain.IterDataset:
  ds = ds.batch(_per_process_batch(data, process_count), drop_remainder=True, batch_fn=batch_fn)
  if data.worker_count > 0:
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(
        num_workers=data.worker_count, per_worker_buffer_size=data.worker_buffer_size))
  return ds


def packed_source_paths(data: ml_collections.ConfigDict) -> dict[str, list[str]]:
  """{source: shard paths}: a source's `packed_dir`, else <data.packed_dir>/<source>/."""
  out = {}
  for name in source_names(data):
    d = data.sources[name].get("packed_dir", "") or os.path.join(data.packed_dir, name)
    out[name] = records.shard_paths(d)
  return out


def records_dataset(data: ml_collections.ConfigDict, *, process_index: int | None = None,
                    process_count: int | None = None) -> grain.IterDataset:
  """Host batches (dicts of numpy [B_local, ...]) from packed ArrayRecord shards."""
  pi, pc = _process(process_index, process_count)
  names = source_names(data)
  paths = packed_source_paths(data)
  sources = []
  for i, name in enumerate(names):
    ds = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths[name]))
    sources.append(_shard_shuffle_repeat(ds, data.shuffle_seed + i, _epochs(data), pi, pc))
  # Records decode to compact parts; the batch is assembled in place (no per-bin padded copy).
  ds = _mix(sources, [data.sources[n].weight for n in names]).map(records.decode_header_parts)
  ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=data.read_threads,
                                            prefetch_buffer_size=data.read_prefetch))
  return _finish(ds, data, pc, batch_fn=assemble_batch)


def samples_dataset(samples_by_source: dict[str, Sequence[Any]], data: ml_collections.ConfigDict,
                    *, process_index: int | None = None, process_count: int | None = None
                    ) -> grain.IterDataset:
  """On-the-fly packing (no ArrayRecord step): rendered Samples per source -> host batches.

  Same batch layout as `records_dataset`. Samples are held in memory, so this is
  for small experiments and Colab.
  """
  pi, pc = _process(process_index, process_count)
  names = source_names(data)
  ids = {n: i for i, n in enumerate(names)}
  sources = []
  for i, name in enumerate(names):
    ds = grain.MapDataset.source(list(samples_by_source[name]))
    ds = _shard_shuffle_repeat(ds, data.shuffle_seed + i, _epochs(data), pi, pc)
    sources.append(ds.map(lambda s, sid=i: _with_source_id(s, sid)))
  ds = _mix(sources, [data.sources[n].weight for n in names]).to_iter_dataset()
  ds = TwoBudgetPackIterDataset(ds, seq_len=data.seq_len, patch_budget=data.patch_budget,
                                buffer_size=data.pack_buffer, source_ids=ids)
  return _finish(ds, data, pc)


def _with_source_id(sample: Any, source_id: int) -> Any:
  sample = copy.copy(sample)
  sample.meta = dict(sample.meta, source_id=source_id)
  return sample


def render_sources(data: ml_collections.ConfigDict, manifest: dict | None = None
                   ) -> dict[str, list[Any]]:
  """Reads and renders every source's JSONL in this process (for on-the-fly packing).

  Skipped items (reading: file:line + reason; rendering: episode/step + reason) are
  counted into `manifest["skipped"]` when a dict is given.
  """
  from mage_jax.data import render, trajectory  # the tokenizer loads only when needed
  renderer = render.Renderer(render.RenderConfig.from_config(data.render))
  out: dict[str, list[Any]] = {}
  read_report, render_report = trajectory.ReadReport(), render.RenderReport()
  for i, name in enumerate(source_names(data)):
    paths = [p for p in str(data.sources[name].paths).split(",") if p]
    samples = []
    for ep in trajectory.read_all(paths, report=read_report):
      for s in renderer.render_episode(ep, render_report):
        s.meta.update(source_id=i, data_source=name)
        samples.append(s)
    out[name] = samples
  if manifest is not None:
    manifest["read"] = read_report.to_dict()
    manifest["render"] = render_report.to_dict()
  return out


# --- device assembly ----------------------------------------------------------------------------


def to_global(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Process-local host batch -> global jax arrays, batch dim sharded over the rules table's
  batch axes (mage_jax/sharding.py `batch_sharding`, the train step's input sharding)."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


class DataIterator(grain.DatasetIterator):
  """Batches for the train loop: host numpy (mesh=None) or global jax arrays.

  State = the Grain pipeline's state + bins drawn per source, JSON-able.
  """

  def __init__(self, parent: grain.DatasetIterator, source_names_: Sequence[str],
               mesh: Mesh | None = None):
    super().__init__(parent)
    self._names = list(source_names_)
    self._mesh = mesh
    self.bins_per_source: collections.Counter[str] = collections.Counter()

  def __next__(self) -> dict[str, Any]:
    batch = next(self._parent)
    # A bin's source is the source of its first token (bins from launch.pack are single-source).
    for sid in batch["source_ids"][:, 0]:
      self.bins_per_source[self._names[sid] if 0 <= sid < len(self._names) else "?"] += 1
    if self._mesh is None:
      return batch
    return to_global(batch, self._mesh)

  def get_state(self) -> dict[str, Any]:
    return {"grain": self._parent.get_state(), "bins_per_source": dict(self.bins_per_source)}

  def set_state(self, state: dict[str, Any]) -> None:
    self._parent.set_state(state["grain"])
    self.bins_per_source = collections.Counter(state.get("bins_per_source", {}))


def make_iterator(data: ml_collections.ConfigDict, mesh: Mesh | None = None, *,
                  samples_by_source: dict[str, Sequence[Any]] | None = None,
                  process_index: int | None = None, process_count: int | None = None
                  ) -> DataIterator:
  """The train loop's data: packed shards by default, on-the-fly packing if samples are given."""
  if samples_by_source is not None:
    ds = samples_dataset(samples_by_source, data, process_index=process_index,
                         process_count=process_count)
  else:
    ds = records_dataset(data, process_index=process_index, process_count=process_count)
  return DataIterator(iter(ds), source_names(data), mesh)


# --- read throughput benchmark ------------------------------------------------------------------


def measure_read_throughput(shard_dir: str, batch_size: int = 4, num_batches: int = 20,
                            read_threads: int = 1) -> dict[str, float]:
  """Host batches/s from packed shards in this process (one core): real and slot tokens/s.

  Slot tokens count every position of a bin (what the device consumes); real tokens
  exclude padding.
  """
  data = ml_collections.ConfigDict(dict(
      sources={"bench": dict(paths="", weight=1.0, stage=0, packed_dir=shard_dir)},
      packed_dir="", shuffle_seed=0, num_epochs=-1, batch_size=batch_size, worker_count=0,
      worker_buffer_size=1, read_threads=read_threads, read_prefetch=2 * batch_size))
  it = iter(records_dataset(data, process_index=0, process_count=1))
  next(it)  # warm up: open shards, first reads
  real = slots = 0
  start_cpu, start = time.process_time(), time.perf_counter()
  for _ in range(num_batches):
    b = next(it)
    real += int(np.count_nonzero(b["segment_ids"]))
    slots += b["tokens"].size
  wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
  return dict(batches=num_batches, wall_s=wall, cpu_s=cpu, slot_tokens_per_s=slots / wall,
              real_tokens_per_s=real / wall, slot_tokens_per_cpu_s=slots / max(cpu, 1e-9),
              real_tokens_per_cpu_s=real / max(cpu, 1e-9))


def write_stage4_like_shards(directory: str, num_bins: int = 32, seed: int = 0,
                             seq_len: int = 32_768, patch_budget: int = 98_304,
                             records_per_shard: int = 16, screenshots: str = "distinct",
                             dedup: bool = True) -> list[str]:
  """Shards of realistic size for `measure_read_throughput`: stage-4-like lengths and image patches.

  screenshots: "distinct" -- every image in a bin differs (nothing to deduplicate: the
  conservative case); "consecutive" -- a bin's samples are consecutive steps of one
  episode, sample j showing screenshots j .. j+k-1, so neighbours share k-1 (the best
  case for records' image dedup); "identical" -- one image everywhere.
  dedup: write deduplicated records (format 2) or every occurrence (format 1).
  """
  modes = ("distinct", "consecutive", "identical")
  if screenshots not in modes:
    raise ValueError(f"screenshots={screenshots!r}: expected one of {modes}")
  rng = np.random.default_rng(seed)
  lengths, patches = stage4_like_lengths(num_bins * 5, seed)
  groups = best_fit_decreasing(lengths, patches, seq_len, patch_budget)[:num_bins]
  per_image = STAGE4_IMAGE_TOKENS * 4
  one_image = rng.integers(0, 256, (per_image, PATCH_DIM), dtype=np.uint8)
  image_pos = np.zeros((per_image, 3), np.int32)

  def segment(i: int, shots: list[np.ndarray]) -> Segment:
    n = int(lengths[i])
    return Segment(tokens=rng.integers(0, 150_000, n, dtype=np.int32),
                   loss_mask=rng.random(n) < 0.3,
                   patches=np.concatenate(shots), patch_positions=np.concatenate([image_pos] * len(shots)),
                   image_patches=[per_image] * len(shots), source_id=0, meta={"episode_id": f"bench-{i}"})

  def packed(g: list[int]) -> PackedBin:
    ks = [int(patches[i]) // per_image for i in g]
    if screenshots == "identical":
      return PackedBin([segment(i, [one_image] * k) for i, k in zip(g, ks)])
    num = sum(ks) if screenshots == "distinct" else len(g) - 1 + max(ks)
    pool = [rng.integers(0, 256, (per_image, PATCH_DIM), dtype=np.uint8) for _ in range(num)]
    first = np.cumsum([0] + ks[:-1]) if screenshots == "distinct" else range(len(g))
    return PackedBin([segment(i, pool[f:f + k]) for i, k, f in zip(g, ks, first)])

  bins = (packed(g) for g in groups)
  return records.write_bins(bins, directory, seq_len, patch_budget, records_per_shard, dedup)
