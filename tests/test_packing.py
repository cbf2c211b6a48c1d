"""Packing: exact bin layout against a slot-by-slot NumPy reference, budgets, skips, fill, state."""
from __future__ import annotations

import dataclasses

import grain
import numpy as np
import pytest

from mage_jax.data import packing, records
from mage_jax.models.config import IMAGE_PAD_ID, PAD_ID, VISION_END_ID, VISION_START_ID

SEQ, BUDGET = 512, 96


@dataclasses.dataclass
class FakeSample:  # the ARCHITECTURE.md Sample contract
  tokens: np.ndarray
  loss_mask: np.ndarray
  images: list
  meta: dict


def make_sample(rng: np.random.Generator, idx: int, length: int | None = None,
                image_sides: list[tuple[int, int]] | None = None, source: str = "a") -> FakeSample:
  if image_sides is None:
    image_sides = [(32 * rng.integers(1, 3), 32 * rng.integers(1, 3)) for _ in range(rng.integers(0, 3))]
  images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in image_sides]
  parts = [rng.integers(0, 150_000, rng.integers(3, 12))]
  for im in images:
    n = (im.shape[0] // 16) * (im.shape[1] // 16) // 4
    parts += [[VISION_START_ID], [IMAGE_PAD_ID] * n, [VISION_END_ID], rng.integers(0, 150_000, 4)]
  body = np.concatenate(parts)
  total = length if length is not None else len(body) + int(rng.integers(5, 60))
  tokens = np.concatenate([body, rng.integers(0, 150_000, max(0, total - len(body)))]).astype(np.int32)
  mask = np.zeros(len(tokens), bool)
  mask[int(len(tokens) * 0.6):] = True
  return FakeSample(tokens, mask, images, dict(episode_id=f"ep{idx}", step=idx % 5, stage=4, source=source))


def ref_patchify(im: np.ndarray) -> np.ndarray:
  """DESIGN.md: 2x2 merge blocks row-major, patches row-major inside a block, [C,16,16] rows."""
  rows = []
  for by in range(im.shape[0] // 32):
    for bx in range(im.shape[1] // 32):
      for dy in range(2):
        for dx in range(2):
          y, x = (2 * by + dy) * 16, (2 * bx + dx) * 16
          rows.append(im[y:y + 16, x:x + 16, :].transpose(2, 0, 1).reshape(-1))
  return np.stack(rows)


def ref_bin(samples: list[FakeSample], source_ids: list[int]) -> dict[str, np.ndarray]:
  """The packed row built slot by slot from the ARCHITECTURE.md table."""
  out = dict(tokens=np.full(SEQ, PAD_ID), targets=np.zeros(SEQ), loss_mask=np.zeros(SEQ),
             segment_ids=np.zeros(SEQ), positions=np.zeros(SEQ), source_ids=np.full(SEQ, -1),
             patches=np.zeros((BUDGET, 768)), patch_image_ids=np.zeros(BUDGET),
             patch_positions=np.zeros((BUDGET, 3)))
  slot = pslot = 0
  image_id = 0
  for k, (s, sid) in enumerate(zip(samples, source_ids), start=1):
    n = len(s.tokens)
    for i in range(n):
      out["tokens"][slot] = s.tokens[i]
      out["segment_ids"][slot] = k
      out["positions"][slot] = i
      out["source_ids"][slot] = sid
      if i + 1 < n:
        out["targets"][slot] = s.tokens[i + 1]
        out["loss_mask"][slot] = float(s.loss_mask[i + 1])
      slot += 1
    for im in s.images:
      image_id += 1
      rows = ref_patchify(im)
      for r in range(rows.shape[0]):
        out["patches"][pslot] = rows[r]
        out["patch_image_ids"][pslot] = image_id
        by, bx = divmod(r // 4, im.shape[1] // 32)
        dy, dx = divmod(r % 4, 2)
        out["patch_positions"][pslot] = (0, 2 * by + dy, 2 * bx + dx)
        pslot += 1
  return out


DTYPES = dict(tokens=np.int32, targets=np.int32, loss_mask=np.float32, segment_ids=np.int32,
              positions=np.int32, patches=np.uint8, patch_image_ids=np.int32,
              patch_positions=np.int32, source_ids=np.int32)


def check_bin(b: dict[str, np.ndarray], samples: list[FakeSample], source_ids: list[int]) -> None:
  assert set(b) == set(packing.BIN_KEYS)
  ref = ref_bin(samples, source_ids)
  for k, dtype in DTYPES.items():
    assert b[k].dtype == dtype, k
    assert b[k].shape == ref[k].shape, k
    np.testing.assert_array_equal(b[k], ref[k].astype(dtype), err_msg=k)


def test_assemble_bin_matches_slot_reference():
  rng = np.random.default_rng(0)
  samples = [make_sample(rng, i, image_sides=sides) for i, sides in
             enumerate([[(32, 64)], [], [(64, 32), (32, 32)]])]
  segs = [packing.to_segment(s, seq_len=SEQ, patch_budget=BUDGET, source_ids={"a": 2}) for s in samples]
  b = packing.assemble_bin(segs, SEQ, BUDGET)
  check_bin(b, samples, [2, 2, 2])
  # Invariants stated in ARCHITECTURE.md, checked directly too.
  ends = np.flatnonzero(np.diff(b["segment_ids"]) != 0)  # last slot of each real segment
  assert np.all(b["loss_mask"][ends] == 0) and np.all(b["targets"][ends] == 0)
  for k in range(1, 4):
    seg = b["segment_ids"] == k
    np.testing.assert_array_equal(b["positions"][seg], np.arange(seg.sum()))
  assert np.count_nonzero(b["tokens"] == IMAGE_PAD_ID) * 4 == np.count_nonzero(b["patch_image_ids"])


def test_pack_stream_budgets_order_and_skips():
  rng = np.random.default_rng(1)
  samples = [make_sample(rng, i) for i in range(60)]
  samples.append(make_sample(rng, 900, length=SEQ + 1))                       # too long
  samples.append(make_sample(rng, 901, image_sides=[(128, 128), (128, 128)]))  # 128 patches > 96
  bad = make_sample(rng, 902, image_sides=[(32, 32)])
  bad.tokens[bad.tokens == IMAGE_PAD_ID] = 7                                  # pads != patches / 4
  samples.append(bad)
  ds = packing.TwoBudgetPackIterDataset(grain.MapDataset.source(samples).to_iter_dataset(),
                                        seq_len=SEQ, patch_budget=BUDGET, buffer_size=16,
                                        keep_segments=True)
  it = iter(ds)
  bins = list(it)
  assert dict(it.skipped) == {"longer than seq_len": 1, "more patches than patch_budget": 1,
                              "image_pad count != patches / 4": 1}
  seen = [s.meta["episode_id"] for b in bins for s in b.segments]
  assert sorted(seen) == sorted(f"ep{i}" for i in range(60))  # every good sample exactly once
  by_id = {s.meta["episode_id"]: s for s in samples}
  for b in bins:
    assert b.num_tokens <= SEQ and b.num_patches <= BUDGET
    arrays = packing.assemble_bin(b.segments, SEQ, BUDGET)
    check_bin(arrays, [by_id[s.meta["episode_id"]] for s in b.segments], [0] * len(b.segments))
    # Per segment: <|image_pad|> count x 4 == that segment's patches.
    for k, s in enumerate(b.segments, start=1):
      pads = np.count_nonzero(arrays["tokens"][arrays["segment_ids"] == k] == IMAGE_PAD_ID)
      assert pads * 4 == s.num_patches


def test_best_fit_decreasing_respects_both_budgets():
  rng = np.random.default_rng(2)
  lengths = rng.integers(1, 400, 500)
  patches = rng.integers(0, 60, 500)
  groups = packing.best_fit_decreasing(lengths, patches, 512, 96)
  assert sorted(i for g in groups for i in g) == list(range(500))
  for g in groups:
    assert lengths[g].sum() <= 512 and patches[g].sum() <= 96
  # Patch-bound on its own: the patch budget, not the token budget, must decide here.
  groups = packing.best_fit_decreasing([10] * 10, [50] * 10, 512, 100)
  assert [len(g) for g in groups] == [2] * 5


def test_fill_on_stage4_like_distribution():
  fill = packing.measure_fill(num_samples=4_000, seed=0, buffer_size=1_024)
  lengths, patches = packing.stage4_like_lengths(4_000, 0)
  assert 7_000 < lengths.mean() < 8_000 and lengths.min() >= 800 and lengths.max() <= 32_000
  assert set(np.unique(patches // (880 * 4))) == {2, 3, 4}
  assert fill["token_fill"] >= 0.97, fill
  assert 0 < fill["patch_fill"] <= 1


def test_packer_state_restore_gives_identical_bins():
  rng = np.random.default_rng(3)
  samples = [make_sample(rng, i) for i in range(200)]
  samples.append(make_sample(rng, 999, length=SEQ + 5))
  ds = packing.TwoBudgetPackIterDataset(
      grain.MapDataset.source(samples).shuffle(seed=5).to_iter_dataset(),
      seq_len=SEQ, patch_budget=BUDGET, buffer_size=12)
  it = iter(ds)
  for _ in range(7):  # mid-window
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(9)]
  fresh = iter(ds)
  fresh.set_state(state)
  got = [next(fresh) for _ in range(9)]
  for e, g in zip(expected, got):
    for k in packing.BIN_KEYS:
      np.testing.assert_array_equal(e[k], g[k])
  rest_a, rest_b = list(it), list(fresh)
  assert len(rest_a) == len(rest_b)
  assert it.skipped == fresh.skipped


def test_record_roundtrip_keeps_bin_and_metadata():
  rng = np.random.default_rng(4)
  samples = [make_sample(rng, i, source="b") for i in range(5)]
  segs = [packing.to_segment(s, seq_len=SEQ, patch_budget=BUDGET, source_ids={"a": 0, "b": 1})
          for s in samples[:3]]
  b = packing.PackedBin(segs)
  rec = records.encode_bin(b, SEQ, BUDGET)
  decoded = records.decode_bin(rec)
  check_bin(decoded, samples[:3], [1, 1, 1])
  assert [m["episode_id"] for m in records.decode_meta(rec)] == ["ep0", "ep1", "ep2"]
  assert len(rec) < 8 * SEQ + BUDGET * 768  # compact: no padding stored
  with pytest.raises(ValueError, match="not a packed-bin record"):
    records.decode_bin(b"JUNK" + rec[4:])
