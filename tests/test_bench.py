"""Benchmark suite: its pieces run on tiny configs and produce well-formed figures.

No timed assertions (this machine is shared and noisy): we check that figures
are finite and positive, that FLOP accounting matches the models' real
parameter counts, and that the GPU suite imports only jax/flax/optax/numpy and
runs end to end on CPU.
"""
import json
import math
import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from flax import nnx

from mage_jax.bench import flops as flops_lib
from mage_jax.bench import lm_step, results, timing
from mage_jax.models.config import MageVLConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _count(factory):
  model = nnx.eval_shape(lambda: factory(nnx.Rngs(0)))
  return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))


def test_flops_param_counts_match_the_models():
  # The FLOP formulas count parameters by hand; the models are the independent truth.
  for cfg in (lm_step.SMALL, lm_step.TINY):
    assert flops_lib.qwen3_total_params(cfg) == _count(lm_step.qwen3_factory(cfg))
  small = lm_step.SMALL
  embed = small.vocab_size * small.hidden_size
  norms = small.num_hidden_layers * (2 * small.hidden_size + 2 * small.head_dim) + small.hidden_size
  assert flops_lib.qwen3_matmul_params(small) == flops_lib.qwen3_total_params(small) - embed - norms


def test_mage_vl_flop_params_and_full_config():
  from configs import models
  from mage_jax.models.mage_vl import MageVL
  from mage_jax.bench import mage_vl_workload
  cfg = mage_vl_workload.mage_vl_config("full", "full")
  preset = models.build_model_config(models.get_config("mage_vl_4b"))
  arch = lambda c: {k: v for k, v in vars(c).items()
                    if k not in ("param_dtype", "compute_dtype", "attention_backend", "remat_policy")}
  assert arch(cfg.text) == arch(preset.text) and arch(cfg.vision) == arch(preset.vision)
  total = _count(lambda rngs: MageVL(cfg, rngs=rngs))
  assert abs(total / 1e9 - 4.74) < 0.01  # DESIGN.md: 4.74B
  per_patch, per_merged = flops_lib.vit_matmul_params(cfg.vision)
  lm = flops_lib.qwen3_total_params(cfg.text)
  v = cfg.vision
  vit_biases_norms = (v.num_hidden_layers * (3 * v.hidden_size + v.hidden_size + v.intermediate_size
                                             + v.hidden_size + 4 * v.hidden_size)
                      + 2 * v.hidden_size + 2 * v.hidden_size + 4 * v.hidden_size
                      + v.out_hidden_size)
  assert lm + per_patch + per_merged + vit_biases_norms == total


def test_attention_pairs_and_step_flops():
  assert flops_lib.attention_pair_count([3, 2], causal=True) == 6 + 3
  assert flops_lib.attention_pair_count([3, 2], causal=False) == 9 + 4
  f = flops_lib.qwen3_step_flops(lm_step.TINY, [64, 64])
  assert f["six_n_d"] == 6 * flops_lib.qwen3_matmul_params(lm_step.TINY) * 128
  assert f["total"] > f["six_n_d"] > 0


def test_timing_median_and_interleaving():
  t = timing.time_fn(lambda: time.sleep(0.01), reps=3, warmup=1, sync=lambda x: x)
  assert t.reps == 3 and 0.009 <= t.min_s <= t.median_s <= t.max_s
  calls = []
  out = timing.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                           reps=2, warmup=1, syncs={"a": lambda x: x, "b": lambda x: x})
  assert calls == ["a", "b", "a", "b", "b", "a"]  # warmups, then alternating direction
  assert set(out) == {"a", "b"}
  with pytest.raises(ValueError):
    timing.time_fn(lambda: None, reps=0)


def test_matmul_ceiling_and_compile_time():
  c = timing.matmul_ceiling(128, reps=2, warmup=1)
  assert c["flops"] == 2 * 128 ** 3 and c["flops_per_s"] > 0
  f = jax.jit(lambda x: x * 2)
  t = timing.compile_seconds(f, jax.ShapeDtypeStruct((4,), np.float32))
  assert t["total_s"] >= t["compile_s"] > 0


def test_packed_batch_layout():
  b = lm_step.packed_batch(2, 16, [[5, 7], [16]], vocab=100)
  assert b["segment_ids"][0].tolist() == [1] * 5 + [2] * 7 + [0] * 4
  assert b["positions"][0, 5:12].tolist() == list(range(7))
  # The label at slot i is token i+1 of the same segment; last slot of a segment untrained.
  assert b["targets"][0, 3] == b["tokens"][0, 4] and b["loss_mask"][0, 4] == 0
  with pytest.raises(ValueError, match="exceed seq_len"):
    lm_step.packed_batch(1, 8, [[5, 5]], vocab=100)


def _check_rows(rows):
  for r in rows:
    assert isinstance(r, results.Row)
    assert math.isfinite(r.value) and r.value > 0, r
    assert r.command.startswith(("python -m launch.bench", "python3 -m launch.bench"))
    assert (r.met is None) == (r.goal == "")


@pytest.mark.slow
def test_cpu_train_step_vs_torch_tiny(tmp_path):
  from mage_jax.bench import cpu_suite
  rows, details = cpu_suite.train_step_vs_torch(
      lm_step.TINY, batch_size=2, seq_len=32, reps=1, torch_modes=("eager",), threads=1,
      matmul_n=128)
  _check_rows(rows)
  names = [r.name for r in rows]
  assert any(n.startswith("speedup ours vs torch (eager") for n in names)
  assert any(n.startswith("step efficiency") for n in names)
  assert math.isfinite(details["final_loss"])
  assert details["step_flops"]["tokens"] == 64
  out = tmp_path / "r.json"
  results.write_json(str(out), "cpu", rows, details, results.machine_info())
  data = json.loads(out.read_text())
  assert data["suite"] == "cpu" and len(data["rows"]) == len(rows)
  assert "| speedup ours vs torch" in results.table(rows)


def test_rl_update_vs_sft_step_tiny():
  from mage_jax.bench import rl_bench
  rows, details = rl_bench.rl_update_vs_sft(lm_step.TINY, batch_size=2, seq_len=32, reps=1)
  _check_rows(rows)
  assert [r.name for r in rows][1] == "RL: update / SFT step" and rows[1].value > 0
  assert rows[1].goal == "<= 1.05" and rows[1].met == (rows[1].value <= 1.05)
  m, m_sep = details["rl_metrics"], details["rl_metrics_separate_logp_old"]
  # logp_old is the update's own forward: ratio exactly 1, a real update.
  assert m["mean_ratio"] == 1.0 and m["clip_frac"] == 0.0
  assert m["policy_tokens"] == 2 * 31 and m["update_norm"] > 0 and math.isfinite(m["loss"])
  # Both runners took the same steps on the same batch: the separate forward's path agrees.
  assert abs(m_sep["mean_ratio"] - 1.0) < 1e-4
  for k in ("loss", "grad_norm", "update_norm"):
    assert abs(m_sep[k] - m[k]) <= 1e-4 * max(1.0, abs(m[k])), (k, m_sep[k], m[k])


def test_cpu_compile_times_tiny():
  from mage_jax.bench import cpu_suite
  rows, details = cpu_suite.compile_times({"tiny": (lm_step.TINY, 2, 32)})
  _check_rows(rows)
  assert details["tiny"]["compile_s"] > 0


@pytest.mark.slow
def test_cpu_data_path_small():
  from mage_jax.bench import cpu_suite
  rows, details = cpu_suite.data_path(read_bins=2, read_batches=2, episodes=3, fill_samples=300)
  _check_rows(rows)
  assert 0 < details["fill"]["token_fill"] <= 1
  assert details["render_pack"]["samples"] > 0


def test_mage_vl_bench_batch_layout():
  from mage_jax.bench import mage_vl_workload
  from mage_jax.models.mage_vl import check_inputs
  b = mage_vl_workload.mage_vl_batch(samples=2, tokens_per_sample=96, images_per_sample=3,
                              image_hw=(64, 32))
  assert b["tokens"].shape == (1, 192) and b["patches"].shape == (1, 2 * 3 * 8, 768)
  check_inputs(b["tokens"], b["patch_image_ids"], image_token_id=151655)  # raises on mismatch
  assert sorted(set(b["patch_image_ids"][0].tolist())) == list(range(1, 7))
  # 2x2 merge-block order: the first block is (0,0), (0,1), (1,0), (1,1).
  assert b["patch_positions"][0, :4, 1:].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
  assert (b["loss_mask"][0] * (b["targets"][0] == 0)).sum() == 0


ALLOWED = ("jax", "jaxlib", "flax", "optax", "numpy")
SECTIONS = ["matmul_ceiling", "attention_check", "flash_block_skipping", "mage_vl_step", "engine_decode"]


def _closure(dists):
  """Distributions `dists` require, transitively (extras off): what an image with only
  jax/flax/optax/numpy installed holds."""
  from importlib import metadata
  from packaging.requirements import Requirement
  from packaging.utils import canonicalize_name
  seen, todo = {}, list(dists)
  while todo:
    name = canonicalize_name(todo.pop())
    if name in seen:
      continue
    seen[name] = metadata.distribution(name)
    for req in map(Requirement, seen[name].requires or []):
      if req.marker is None or req.marker.evaluate({"extra": ""}):
        todo.append(req.name)
  return seen


def _site_with_only(tmp_path, dists):
  """A site folder linking the top-level entries (modules + metadata) of `dists` only."""
  site = tmp_path / "site"
  site.mkdir()
  tops = set()
  for dist in _closure(dists).values():
    for f in dist.files or []:
      top = f.parts[0]
      if top in ("..", "__pycache__") or top.endswith(".pth") or top in tops:
        continue
      src = dist.locate_file(top)
      if os.path.exists(src):
        os.symlink(src, site / top)
        tops.add(top)
  return site, {t.split(".")[0] for t in tops}


def _only_allowed_env(tmp_path):
  """(env, importable top-level names): `python3` on PATH is this interpreter with -S (no
  site-packages) and PYTHONPATH = the allowed packages' site + the repository."""
  site, tops = _site_with_only(tmp_path, ALLOWED)
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
  (bin_dir / "python3").chmod(0o755)
  env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=f"{site}:{ROOT}",
             JAX_PLATFORMS="cpu", OUT=str(tmp_path / "out"), PYLIB=str(tmp_path / "no_pylib"),
             BENCH_TIMEOUT="900")
  env["XLA_FLAGS"] = env.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count=8", "")
  return env, tops


def test_restricted_env_hides_other_packages(tmp_path):
  env, tops = _only_allowed_env(tmp_path)
  assert {"jax", "flax", "optax", "numpy", "absl"} <= tops and "torch" not in tops
  for name in ("torch", "PIL", "grain", "tokenizers", "ml_collections", "transformers"):
    proc = subprocess.run(["python3", "-c", f"import {name}"], env=env, capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode != 0 and "No module named" in proc.stderr, name


def _watch(path, stop, seen):
  """Every distinct version of the results file while the run goes on."""
  last = None
  while not stop.is_set():
    try:
      text = path.read_text()
    except OSError:
      text = None
    if text and text != last:
      last = text
      seen.append(json.loads(text))
    time.sleep(0.01)


@pytest.mark.slow
def test_device_script_on_cpu_with_only_jax_flax_optax_numpy(tmp_path):
  """scripts/device_gpu_bench.sh, exactly as the device runs it, on CPU (--allow_cpu, tiny
  config) with nothing but jax/flax/optax/numpy (and what they require) importable. On CPU
  the `pallas_gpu` kernel cannot lower: the attention check section raises and the rest
  still runs; the step retries once with xla. Results are rewritten after every section."""
  import threading
  env, tops = _only_allowed_env(tmp_path)
  out = tmp_path / "out" / "results_gpu.json"
  stop, seen = threading.Event(), []
  watcher = threading.Thread(target=_watch, args=(out, stop, seen), daemon=True)
  watcher.start()
  proc = subprocess.run(["bash", "scripts/device_gpu_bench.sh", "--allow_cpu", "--gpu_size=tiny",
                         "--reps=1", "--gpu_attention=pallas_gpu"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=900)
  stop.set()
  watcher.join()
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log[-4000:]
  assert "| jax" in proc.stdout and "| flax" in proc.stdout and "nvidia-smi" in log
  # Budget before each section, result after it, then the file rewritten: in that order.
  pos = lambda text: proc.stdout.index(text)
  for name in SECTIONS:
    status = "FAILED" if name == "attention_check" else "done"
    assert (pos(f"[{name}] starting, budget") < pos(f"[{name}] {status}")
            < pos(f"[{name}] results so far written")), name
  assert "retrying once with attention=xla" in proc.stdout

  data = json.loads(out.read_text())
  d = data["details"]
  assert d["complete"] is True and d["section_order"] == SECTIONS
  assert [d["sections"][n]["ok"] for n in SECTIONS] == [True, False, True, True, True]
  assert "interpret" in d["attention_check"]["error"]
  assert [a["attention"] for a in d["mage_vl_step"]["attempts"]] == ["pallas_gpu", "xla"]
  assert [a["ok"] for a in d["mage_vl_step"]["attempts"]] == [False, True]
  # Leading-underscore names and cython_runtime are interpreter/extension internals, not packages.
  packages = {m for m in d["imported_packages"] if not m.startswith("_") and m != "cython_runtime"}
  assert packages - {"mage_jax", "launch"} <= tops, sorted(packages - tops)
  step = [r for r in data["rows"] if "SFT step" in r["name"]]
  assert step and step[0]["value"] > 0 and "cpu-fallback" in step[0]["name"]
  # Partial files: each names a prefix of the sections, and one came before the step.
  partial = [x["details"] for x in seen if not x["details"]["complete"]]
  prefixes = [p.get("section_order", []) for p in partial]
  assert all(p == SECTIONS[:len(p)] for p in prefixes), prefixes
  assert SECTIONS[:3] in prefixes, prefixes


def test_gpu_suite_without_a_gpu_fails_loudly_with_the_backend_error(tmp_path):
  from mage_jax.bench import gpu_suite
  from mage_jax.bench.sections import SuiteRun
  suite = SuiteRun("gpu", str(tmp_path / "r.json"), {})
  with pytest.raises(gpu_suite.NoGPU, match=r"no GPU backend \(.+\); pass --allow_cpu"):
    gpu_suite.run(suite, size="tiny")
  written = json.loads((tmp_path / "r.json").read_text())["details"]
  assert written["complete"] is False and written["gpu_backend_error"]
  assert "no GPU backend" in written["error"]


def test_suite_run_records_a_raising_section_and_writes_after_each(tmp_path):
  from mage_jax.bench.sections import SuiteRun
  suite = SuiteRun("gpu", str(tmp_path / "r.json"), {})
  snapshots = []

  def boom():
    snapshots.append(json.loads((tmp_path / "r.json").read_text())["details"])
    raise ZeroDivisionError("section broke")

  assert suite.section("first", 5, lambda: {"x": 1}) == {"x": 1}
  assert suite.section("second", 5, boom) is None
  assert suite.section("third", 5, lambda: 3) == 3
  assert snapshots[0]["section_order"] == ["first"]   # written before the next section
  d = json.loads((tmp_path / "r.json").read_text())["details"]
  assert d["section_order"] == ["first", "second", "third"] and d["complete"] is False
  assert d["second"]["error"] == "ZeroDivisionError: section broke"
  assert [d["sections"][k]["ok"] for k in ("first", "second", "third")] == [True, False, True]
  assert all(v["budget_s"] == 5 for v in d["sections"].values())


def test_attention_check_passes_and_catches_cross_segment_leaks(monkeypatch):
  import jax.numpy as jnp
  from mage_jax.bench import gpu_suite
  from mage_jax.models import attention as attention_lib
  good = gpu_suite.attention_packed_vs_split("xla", [20, 33, 9], 2, 2, 1, 16, jnp.float32)
  assert good["ok"] and good["max_abs_packed_vs_split_out"] < 1e-5
  real = attention_lib.attention

  def leaky(q, k, v, *, q_segment_ids, kv_segment_ids, **kw):  # ignores packing
    ones = jnp.where(q_segment_ids > 0, 1, 0)
    return real(q, k, v, q_segment_ids=ones, kv_segment_ids=ones, **kw)

  monkeypatch.setattr(attention_lib, "attention", leaky)
  bad = gpu_suite.attention_packed_vs_split("xla", [20, 33, 9], 2, 2, 1, 16, jnp.float32)
  assert not bad["ok"] and bad["max_abs_packed_vs_split_out"] > 1e-2


def test_real_model_step_never_recompiles_over_varied_packed_batches():
  """The benchmarked step (real Qwen3 + chunked CE + AdamW) compiles once for 20 steps of
  differently packed batches (segment counts, lengths, padding, trained-token counts)."""
  rng = np.random.default_rng(0)
  seq = 32

  def layout():
    rows = []
    for _ in range(2):
      left, row = seq - int(rng.integers(0, 6)), []
      while left > 1 and len(row) < 4:
        n = int(rng.integers(2, left + 1))
        row.append(n)
        left -= n
      rows.append(row)
    return rows

  first = lm_step.packed_batch(2, seq, layout(), lm_step.TINY.vocab_size, seed=0)
  runner = lm_step.make_runner(lm_step.qwen3_factory(lm_step.TINY), first, loss_chunk_size=16)
  losses = []
  for i in range(20):
    batch = lm_step.packed_batch(2, seq, layout(), lm_step.TINY.vocab_size, seed=i)
    batch["loss_mask"] *= (rng.random(batch["loss_mask"].shape) < 0.7)
    runner.batch = {k: jax.numpy.asarray(v) for k, v in batch.items()}
    losses.append(float(runner()["loss"]))
  assert all(math.isfinite(x) for x in losses)
  assert runner.step_fn._cache_size() == 1
