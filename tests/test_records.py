"""Packed-bin records: image deduplication (format 2) decodes to exactly the format-1 bin."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from mage_jax.data import packing, records
from tests.test_packing import BUDGET, SEQ, check_bin, make_sample

SIDES = [(32, 64), (64, 32), (32, 32)]


def _consecutive_steps(rng: np.random.Generator) -> list:
  """Samples that reuse screenshots like consecutive steps of one episode, plus traps.

  Step j shows screenshots j, j+1 of a pool (neighbours share one). Traps that must NOT
  merge: a 64x32 image whose patch rows equal a 32x64 image's (same rows, other
  positions) and a copy of a screenshot with one pixel changed.
  """
  pool = [rng.integers(0, 256, (32, 64, 3), dtype=np.uint8) for _ in range(4)]
  samples = []
  for j in range(3):
    s = make_sample(rng, j, image_sides=[(32, 64), (32, 64)])
    s.images = [pool[j], pool[j + 1]]
    samples.append(s)
  same_rows = np.concatenate([pool[0][:, :32], pool[0][:, 32:]], axis=0)  # 64x32
  one_pixel = pool[1].copy()
  one_pixel[5, 7, 1] ^= 1
  s = make_sample(rng, 3, image_sides=[(64, 32), (32, 64), (32, 64)])
  s.images = [same_rows, one_pixel, pool[3]]
  samples.append(s)
  return samples


def _bin(samples, source_ids=None) -> packing.PackedBin:
  segs = [packing.to_segment(s, seq_len=SEQ, patch_budget=BUDGET, source_ids=source_ids or {"a": 3})
          for s in samples]
  return packing.PackedBin(segs)


def _assert_bins_identical(x: dict, y: dict) -> None:
  assert set(x) == set(y) == set(packing.BIN_KEYS)
  for k in packing.BIN_KEYS:
    assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
    assert x[k].tobytes() == y[k].tobytes(), k


def test_dedup_decodes_to_the_same_bytes_and_shrinks():
  rng = np.random.default_rng(0)
  samples = _consecutive_steps(rng)
  b = _bin(samples)
  full, dedup = records.encode_bin(b, SEQ, BUDGET, dedup=False), records.encode_bin(b, SEQ, BUDGET)
  _assert_bins_identical(records.decode_bin(dedup), records.decode_bin(full))
  check_bin(records.decode_bin(dedup), samples, [3] * len(samples))  # the slot-by-slot reference
  header, parts = records.decode_parts(dedup)
  assert header["version"] == 2 and records.decode_parts(full)[0]["version"] == 1
  # 9 occurrences; repeats: pool[1] (steps 1, 2), pool[2] (steps 2, 3), pool[3] (steps 3, 4).
  # The same-rows-other-positions image and the one-pixel copy stay distinct.
  assert len(parts["image_refs"]) == 9 and len(parts["image_patches"]) == 6
  np.testing.assert_array_equal(parts["image_refs"], [0, 1, 1, 2, 2, 3, 4, 5, 3])
  saved_bytes = 3 * 8 * (768 + 12)  # three 32x64 images (8 patches): rows + positions
  assert len(full) - len(dedup) >= saved_bytes - 128  # the refs buffer and its header entry
  assert [m["episode_id"] for m in records.decode_meta(dedup)] == ["ep0", "ep1", "ep2", "ep3"]


def test_no_repeats_costs_only_the_refs():
  rng = np.random.default_rng(1)
  samples = [make_sample(rng, i, image_sides=SIDES[i % 3:i % 3 + 1]) for i in range(4)]
  b = _bin(samples)
  full, dedup = records.encode_bin(b, SEQ, BUDGET, dedup=False), records.encode_bin(b, SEQ, BUDGET)
  _assert_bins_identical(records.decode_bin(dedup), records.decode_bin(full))
  np.testing.assert_array_equal(records.decode_parts(dedup)[1]["image_refs"], np.arange(4))
  assert 0 < len(dedup) - len(full) <= 128
  # A bin without images at all.
  b = _bin([make_sample(rng, 9, image_sides=[])])
  _assert_bins_identical(records.decode_bin(records.encode_bin(b, SEQ, BUDGET)),
                         records.decode_bin(records.encode_bin(b, SEQ, BUDGET, dedup=False)))


def test_batch_assembly_of_mixed_versions_matches_single_decode():
  rng = np.random.default_rng(2)
  bins = [_bin(_consecutive_steps(rng)), _bin(_consecutive_steps(rng)[:2])]
  recs = [records.encode_bin(bins[0], SEQ, BUDGET), records.encode_bin(bins[1], SEQ, BUDGET, dedup=False),
          records.encode_bin(bins[1], SEQ, BUDGET)]
  batch = packing.assemble_batch([records.decode_header_parts(r) for r in recs])  # the pipeline's path
  for row, rec in enumerate(recs):
    _assert_bins_identical({k: v[row] for k, v in batch.items()}, records.decode_bin(rec))


def test_write_bins_dedups_by_default_and_rejects_unknown_versions(tmp_path):
  rng = np.random.default_rng(3)
  b = _bin(_consecutive_steps(rng))
  paths = records.write_bins([b], str(tmp_path), SEQ, BUDGET)
  [rec] = records.read_records(paths)
  assert rec == records.encode_bin(b, SEQ, BUDGET)
  hlen = struct.unpack_from("<I", rec, 4)[0]
  header = json.loads(rec[8:8 + hlen])
  header["version"] = 3
  head = json.dumps(header).encode()
  bad = records.MAGIC + struct.pack("<I", len(head)) + head
  with pytest.raises(ValueError, match="version 3"):
    records.decode_bin(bad)


def test_stage4_like_bench_shards_share_screenshots_when_consecutive(tmp_path):
  from mage_jax.data import pipeline
  kw = dict(num_bins=2, seq_len=32_768, patch_budget=98_304)
  sizes = {}
  for mode in ("distinct", "consecutive"):
    for dedup in (False, True):
      d = tmp_path / f"{mode}-{dedup}"
      recs = list(records.read_records(pipeline.write_stage4_like_shards(
          str(d), screenshots=mode, dedup=dedup, **kw)))
      sizes[mode, dedup] = sum(len(r) for r in recs)
      if dedup:
        ref = list(records.read_records(records.shard_paths(str(tmp_path / f"{mode}-False"))))
        for r, f in zip(recs, ref):
          _assert_bins_identical(records.decode_bin(r), records.decode_bin(f))
  assert sizes["distinct", True] - sizes["distinct", False] < 1_000
  assert sizes["consecutive", True] < 0.7 * sizes["consecutive", False]
