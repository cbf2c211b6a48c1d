"""Grain pipeline: determinism, state restore, mixtures, process sharding, global arrays,
on-the-fly packing, and bad input end-to-end through mage_jax.data.pack_job (launch.pack's library)."""
from __future__ import annotations

import json
import os

import jax
import ml_collections
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec

from mage_jax.data import packing, pipeline, records
from mage_jax.data.config import default_data_config, sources_config
from tests.test_packing import make_sample

SEQ, BUDGET = 256, 64


def _write_source(directory: str, seed: int, n: int, name: str) -> int:
  rng = np.random.default_rng(seed)
  samples = [make_sample(rng, i, source=name) for i in range(n)]
  segs = [packing.to_segment(s, seq_len=SEQ, patch_budget=BUDGET, source_ids={"a": 0, "b": 1})
          for s in samples]
  paths = records.write_bins(packing.pack_segments(segs, SEQ, BUDGET, 32), directory, SEQ, BUDGET,
                             records_per_shard=8)
  return sum(1 for _ in records.read_records(paths))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("packed"))
  counts = {"a": _write_source(os.path.join(root, "a"), 0, 150, "a"),
            "b": _write_source(os.path.join(root, "b"), 1, 150, "b")}
  return root, counts


def _config(root: str, **kw) -> ml_collections.ConfigDict:
  c = default_data_config()
  c.sources = sources_config({"a": ("", 1.0), "b": ("", 1.0)})
  c.packed_dir = root
  c.seq_len, c.patch_budget, c.batch_size = SEQ, BUDGET, 4
  c.read_threads, c.read_prefetch = 1, 4
  for k, v in kw.items():
    if k in ("wa", "wb"):
      c.sources["a" if k == "wa" else "b"].weight = v
    else:
      c[k] = v
  return c


def _take(it, n):
  return [next(it) for _ in range(n)]


def _assert_same(xs, ys):
  assert len(xs) == len(ys)
  for x, y in zip(xs, ys):
    assert set(x) == set(packing.BIN_KEYS)
    for k in packing.BIN_KEYS:
      np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=k)


def test_batches_layout_and_determinism(shards):
  root, _ = shards
  a = _take(pipeline.make_iterator(_config(root)), 3)
  b = _take(pipeline.make_iterator(_config(root)), 3)
  _assert_same(a, b)
  assert a[0]["tokens"].shape == (4, SEQ) and a[0]["patches"].shape == (4, BUDGET, 768)
  assert a[0]["patch_positions"].shape == (4, BUDGET, 3) and a[0]["patches"].dtype == np.uint8
  # Every batch row is exactly one stored bin (batched in place == decoded alone).
  stored = {}
  for name in ("a", "b"):
    for rec in records.read_records(records.shard_paths(os.path.join(root, name))):
      b = records.decode_bin(rec)
      stored[b["tokens"].tobytes()] = b
  for batch in a:
    for row in range(4):
      ref = stored[batch["tokens"][row].tobytes()]
      for k in packing.BIN_KEYS:
        np.testing.assert_array_equal(batch[k][row], ref[k], err_msg=k)
  c = _take(pipeline.make_iterator(_config(root, shuffle_seed=7)), 3)
  assert not all(np.array_equal(x["tokens"], y["tokens"]) for x, y in zip(a, c))


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_state_restore_gives_the_uninterrupted_next_batches(shards, workers):
  root, _ = shards
  cfg = _config(root, worker_count=workers)
  it = pipeline.make_iterator(cfg)
  _take(it, 3)
  state = json.loads(json.dumps(it.get_state()))  # what a checkpoint stores
  expected = _take(it, 4)
  counts = dict(it.bins_per_source)
  restored = pipeline.make_iterator(cfg)
  restored.set_state(state)
  _assert_same(expected, _take(restored, 4))
  assert dict(restored.bins_per_source) == counts


def test_grain_orbax_checkpoint_handler_roundtrip(shards, tmp_path):
  import grain
  import orbax.checkpoint as ocp
  root, _ = shards
  it = pipeline.make_iterator(_config(root))
  _take(it, 2)
  ckpt = ocp.Checkpointer(grain.checkpoint.CheckpointHandler())
  ckpt.save(tmp_path / "iter", args=grain.checkpoint.CheckpointSave(it))
  expected = _take(it, 2)
  restored = pipeline.make_iterator(_config(root))
  ckpt.restore(tmp_path / "iter", args=grain.checkpoint.CheckpointRestore(restored))
  _assert_same(expected, _take(restored, 2))


def test_mixture_weights_are_realised(shards):
  root, _ = shards
  it = pipeline.make_iterator(_config(root, wa=3.0, wb=1.0))
  _take(it, 25)  # 100 bins
  share = it.bins_per_source["a"] / sum(it.bins_per_source.values())
  assert abs(share - 0.75) < 0.05, dict(it.bins_per_source)
  # Bins really come from the source they are counted for.
  b = next(it)
  assert set(np.unique(b["source_ids"])) <= {-1, 0, 1}


def test_process_sharding_gives_disjoint_complete_coverage(shards):
  root, counts = shards

  def bins(pi):
    cfg = _config(root, num_epochs=1, batch_size=2)
    out = []
    for batch in pipeline.records_dataset(cfg, process_index=pi, process_count=2):
      out += [row.tobytes() for row in batch["tokens"]]
    return out

  p0, p1 = bins(0), bins(1)
  assert len(p0) == len(set(p0)) and len(p1) == len(set(p1))
  assert not set(p0) & set(p1)
  everything = set()
  for name in ("a", "b"):
    for rec in records.read_records(records.shard_paths(os.path.join(root, name))):
      everything.add(records.decode_bin(rec)["tokens"].tobytes())
  # Mixing stops at the smaller source's end; each source loses < process_count bins to evening.
  assert set(p0) | set(p1) <= everything
  assert len(p0) == len(p1) >= 2 * ((min(counts.values()) // 2) - 1)


def test_global_arrays_are_sharded_over_data_axes(shards):
  root, _ = shards
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "fsdp"))
  cfg = _config(root, batch_size=8)
  host = next(pipeline.make_iterator(cfg))
  dev = next(pipeline.make_iterator(cfg, mesh))
  for k in packing.BIN_KEYS:
    assert isinstance(dev[k], jax.Array)
    assert dev[k].sharding.spec == PartitionSpec(("data", "fsdp"))
    assert dev[k].shape == host[k].shape
    np.testing.assert_array_equal(np.asarray(dev[k]), host[k])
  assert len(dev["tokens"].addressable_shards) == 8


def test_on_the_fly_packing_from_samples():
  rng = np.random.default_rng(5)
  samples = {"a": [make_sample(rng, i, source="a") for i in range(40)],
             "b": [make_sample(rng, 100 + i, source="b") for i in range(40)]}
  cfg = _config("", pack_buffer=16)
  it = pipeline.make_iterator(cfg, samples_by_source=samples)
  batches = _take(it, 3)
  assert batches[0]["tokens"].shape == (4, SEQ) and batches[0]["patches"].shape == (4, BUDGET, 768)
  for b in batches:
    for row in range(4):
      sids = set(np.unique(b["source_ids"][row])) - {-1}
      assert sids <= {0, 1} and sids
      assert (np.count_nonzero(b["tokens"][row] == 151655) * 4
              == np.count_nonzero(b["patch_image_ids"][row]))
  state = it.get_state()
  expected = _take(it, 2)
  again = pipeline.make_iterator(cfg, samples_by_source=samples)
  again.set_state(state)
  _assert_same(expected, _take(again, 2))


# --- bad input end to end through pack_job ----------------------------------------------------


@pytest.fixture(scope="module")
def bad_set(tmp_path_factory):
  from mage_jax.data import synth
  root = str(tmp_path_factory.mktemp("synth"))
  synth.generate(root, seed=3, episodes=4, grounding=2, hybrid_every=2)
  good = [json.loads(line) for line in open(os.path.join(root, "gui.jsonl"))]
  good += [json.loads(line) for line in open(os.path.join(root, "hybrid.jsonl"))]
  with open(os.path.join(root, "broken.png"), "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\nthis is not an image")

  def variant(i, edit):
    d = json.loads(json.dumps(good[0]))
    d["id"] = f"bad-{i}"
    edit(d)
    return json.dumps(d)

  bad_lines = [
      '{"id": "x", "instruction": "oops", "steps": [',                                     # malformed JSON
      variant(1, lambda d: d["steps"][0]["observation"].update(screenshot="images/nope.png")),
      variant(2, lambda d: d["steps"][0]["observation"].update(screenshot="broken.png")),
      variant(3, lambda d: d["steps"][0]["tool_call"].update(name="browser")),            # unknown tool
      variant(4, lambda d: d["steps"][0]["tool_call"]["arguments"].update(coordinate=[5000, 1])),
      variant(5, lambda d: d.update(steps=[])),                                            # empty episode
      variant(6, lambda d: d.update(instruction="word " * 6000)),                          # too long to render
  ]
  lines = []
  for i, g in enumerate(good):
    lines.append(json.dumps(g))
    if i < len(bad_lines):
      lines.append(bad_lines[i])
  lines += bad_lines[len(good):]
  with open(os.path.join(root, "mixed.jsonl"), "w") as f:
    f.write("\n".join(lines) + "\n")
  return root, good


def test_bad_input_end_to_end_through_pack_job(bad_set, tmp_path):
  from mage_jax.data import pack_job as pack
  root, good = bad_set
  c = default_data_config()
  c.sources = sources_config({"mixed": (os.path.join(root, "mixed.jsonl"), 1.0)})
  c.seq_len, c.patch_budget, c.pack_buffer = 4096, 8192, 32
  c.render.context_len = 4096
  m = pack.pack(c, str(tmp_path / "packed"), workers=1)
  assert m["skipped"]["read"] == {"malformed_json": 1, "missing_image": 1, "unreadable_image": 1,
                                  "unknown_tool": 1, "invalid_arguments": 1, "empty_episode": 1}
  assert m["skipped"]["render"] == {"too_long": len(good[0]["steps"])}
  assert m["skipped"]["pack"] == {}
  assert any("mixed.jsonl:" in s and "malformed_json" in s for s in m["skipped_items"])
  assert m["episodes"] == len(good) + 1  # the overlong one is read fine, then skipped per step
  # Every good sample survives, exactly once.
  want = {(g["id"], t) for g in good for t in range(1, len(g["steps"]) + 1)}
  got = []
  for rec in records.read_records(records.shard_paths(str(tmp_path / "packed" / "mixed"))):
    got += [(s["episode_id"], s["step"]) for s in records.decode_meta(rec)]
  assert sorted(got) == sorted(want)
  assert m["samples"] == len(want) and m["bins"] >= 1 and 0 < m["token_fill"] <= 1
  assert m["sources"]["mixed"]["bins"] == m["bins"]
  with open(tmp_path / "packed" / "manifest.json") as f:
    assert json.load(f)["skipped_total"] == 6 + len(good[0]["steps"])


def test_on_the_fly_from_jsonl_matches_pack_counts(bad_set):
  root, good = bad_set
  c = default_data_config()
  c.sources = sources_config({"mixed": (os.path.join(root, "mixed.jsonl"), 1.0)})
  c.seq_len, c.patch_budget, c.pack_buffer, c.batch_size = 4096, 8192, 32, 2
  c.render.context_len = 4096
  report: dict = {}
  samples = pipeline.render_sources(c, report)
  assert len(samples["mixed"]) == sum(len(g["steps"]) for g in good)
  assert report["read"]["skipped"]["malformed_json"] == 1
  batch = next(pipeline.make_iterator(c, samples_by_source=samples))
  assert batch["tokens"].shape == (2, 4096) and batch["patches"].shape == (2, 8192, 768)
  assert (np.count_nonzero(batch["tokens"] == 151655) * 4 == np.count_nonzero(batch["patch_image_ids"]))


def test_inspect_marks_trained_spans_images_and_segments(bad_set, tmp_path):
  from launch import inspect as insp
  from mage_jax.data import tokenizer as tok_lib
  root, _ = bad_set
  c = default_data_config()
  c.sources = sources_config({"gui": (os.path.join(root, "gui.jsonl"), 1.0)})
  c.seq_len, c.patch_budget, c.pack_buffer, c.render.context_len = 4096, 12288, 32, 4096
  from mage_jax.data import pack_job
  pack_job.pack(c, str(tmp_path), workers=1)
  rec = next(iter(records.read_records(records.shard_paths(str(tmp_path / "gui")))))
  b, meta = records.decode_bin(rec), records.decode_meta(rec)
  text = insp.describe_bin(b, meta, tok_lib.load_tokenizer())
  assert text.count("=== segment") == len(meta) == int(b["segment_ids"].max())
  # One trained span per segment (the target turn), ending with <|im_end|>.
  assert text.count("«") == len(meta) and text.count("<|im_end|>»") == len(meta)
  n_images = int(b["patch_image_ids"].max())
  assert text.count("[image ") == n_images
  assert f"patches {np.count_nonzero(b['patch_image_ids'])}/12288" in text


def test_pack_holds_out_the_last_episodes_whole(bad_set, tmp_path):
  from mage_jax.data import pack_job
  root, _ = bad_set
  good = [json.loads(line) for kind in ("gui", "terminal", "hybrid")
          for line in open(os.path.join(root, f"{kind}.jsonl"))]
  with open(os.path.join(root, "all.jsonl"), "w") as f:  # beside the images they reference
    f.writelines(json.dumps(g) + "\n" for g in good)
  c = default_data_config()
  c.sources = sources_config({"gui": (os.path.join(root, "all.jsonl"), 1.0)})
  c.seq_len, c.patch_budget, c.pack_buffer, c.render.context_len = 4096, 12288, 32, 4096
  assert len(good) >= 3
  m = pack_job.pack(c, str(tmp_path / "packed"), workers=1, heldout_dir=str(tmp_path / "held"),
                    heldout_episodes=1)

  def episodes(d):
    return [s["episode_id"] for rec in records.read_records(records.shard_paths(d))
            for s in records.decode_meta(rec)]
  trained, held = episodes(str(tmp_path / "packed" / "gui")), episodes(str(tmp_path / "held" / "gui"))
  assert set(held) == {good[-1]["id"]} and len(held) == len(good[-1]["steps"])  # every step of it
  assert set(trained) == {g["id"] for g in good[:-1]}
  assert m["sources"]["gui"]["heldout"]["episodes"] == 1
  assert m["sources"]["gui"]["heldout"]["samples"] == len(held)
