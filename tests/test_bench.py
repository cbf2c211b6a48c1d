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

from mage_jax.bench import lm_step, results, timing
from mage_jax.models.config import RUNTIME_FIELDS, MageVLConfig
from mage_jax.train import flops as flops_lib

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
  arch = lambda c: {k: v for k, v in vars(c).items() if k not in RUNTIME_FIELDS}
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
  f = flops_lib.step_flops(lm_step.TINY, [64, 64])
  assert f["flops_model"] == 6 * flops_lib.qwen3_matmul_params(lm_step.TINY) * 128 + f["flops_attention"]


def test_head_counted_only_on_the_chunks_the_loss_computes():
  # Hand count of train.loss.token_stats: trained tokens move to the row's front, and only
  # chunks holding one run the [D, V] head; a row that fits one chunk computes all its slots.
  mask = np.zeros((2, 10), np.float32)
  mask[0, [1, 4, 5, 8, 9]] = 1   # 5 trained -> 2 chunks of 4
  mask[1, [7]] = 1               # 1 trained -> 1 chunk of 4
  assert flops_lib.head_tokens(mask, 4) == 8 + 4
  assert flops_lib.head_tokens(mask, 16) == 20       # one chunk per row: every slot
  assert flops_lib.head_tokens(np.zeros((1, 10)), 4) == 0
  text = lm_step.TINY
  batch = {"segment_ids": np.ones((2, 10), np.int32), "loss_mask": mask}
  f = flops_lib.batch_flops(text, batch, loss_chunk_size=4)
  every = flops_lib.batch_flops(text, batch)
  head = 6 * text.hidden_size * text.vocab_size
  assert f["head_tokens"] == 12 and every["head_tokens"] == 20
  assert every["flops_model"] - f["flops_model"] == head * 8
  # remat=none: the only recomputation is the chunked loss's head forward (1/3 of its cost).
  assert f["flops_hardware"] - f["flops_model"] == head * 12 / 3


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
  # the update padded to twice its micro-batches trained the same tokens to the same figures
  m_pad = details["rl_metrics_half_padding"]
  assert m_pad["policy_tokens"] == m["policy_tokens"]
  for k in ("loss", "grad_norm", "update_norm"):
    assert abs(m_pad[k] - m[k]) <= 1e-4 * max(1.0, abs(m[k])), (k, m_pad[k], m[k])
  assert rows[3].goal == "<= 1.15" and rows[3].met == (rows[3].value <= 1.15) and rows[3].value > 0


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
SECTIONS = ["engine_decode", "matmul_ceiling", "mage_vl_mid", "mage_vl_full", "attention_check",
            "flash_block_skipping"]


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
             BENCH_TOTAL_S="1500", PREFLIGHT_TIMEOUT="300")
  env["XLA_FLAGS"] = env.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count=8", "")
  for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
    env.pop(name, None)   # the test session's shared cache (conftest): the script picks its own, as on a device
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


def _hand_counted_model_flops(cfg, batch, chunk):
  """Mage-VL training matmul FLOPs counted from the config by hand, apart from train/flops.py:
  3 x 2 x (weights x rows) per matmul, attention 3 x 4 x pairs x width per layer."""
  t, v = cfg.text, cfg.vision
  segs = batch["segment_ids"][0]
  tokens = int((segs > 0).sum())
  mask = batch["loss_mask"][0] > 0
  heads = -(-int(mask.sum()) // chunk) * chunk
  lm_w = t.num_hidden_layers * (t.hidden_size * t.head_dim * 2 * (t.num_attention_heads
                                                                  + t.num_key_value_heads)
                                + 3 * t.hidden_size * t.intermediate_size)
  lm_pairs = sum(n * (n + 1) // 2 for n in np.bincount(segs)[1:])
  ids = batch["patch_image_ids"][0]
  patches = int((ids > 0).sum())
  vit_w = v.patch_dim * v.hidden_size + v.num_hidden_layers * (
      4 * v.hidden_size ** 2 + 2 * v.hidden_size * v.intermediate_size)
  g = v.hidden_size * 4
  merger_w = g * g + g * v.out_hidden_size
  vit_pairs = sum(n * n for n in np.bincount(ids)[1:])
  return (6 * (lm_w * tokens + t.hidden_size * t.vocab_size * heads + vit_w * patches
               + merger_w * patches // 4)
          + 12 * lm_pairs * t.num_attention_heads * t.head_dim * t.num_hidden_layers
          + 12 * vit_pairs * v.hidden_size * v.num_hidden_layers)


def test_dry_run_ladder_when_the_kernel_fails(tmp_path, monkeypatch):
  """`scripts/device_gpu_bench.sh --dry_run`, as the device runs it but on CPU, with nothing
  but jax/flax/optax/numpy importable, forcing `pallas_gpu` (which cannot lower on CPU): the
  lease's failure case. The preflight writes versions, then the kernel's error; every step
  uses the xla fallback without retrying the kernel; every section is written before the
  next starts; the bench's MFU equals the trainer logger's on the same step (3 digits)."""
  import threading
  from mage_jax.bench import mage_vl_workload as workload_lib
  from mage_jax.train import metrics
  env, tops = _only_allowed_env(tmp_path)
  out = tmp_path / "out" / "results_gpu.json"
  stop, seen = threading.Event(), []
  watcher = threading.Thread(target=_watch, args=(out, stop, seen), daemon=True)
  watcher.start()
  start = time.time()
  proc = subprocess.run(["bash", "scripts/device_gpu_bench.sh", "--dry_run", "--reps=1",
                         "--gpu_attention=pallas_gpu"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=1600)
  stop.set()
  watcher.join()
  log = proc.stdout + proc.stderr
  assert proc.returncode == 0, log[-4000:]
  pre = json.loads((tmp_path / "out" / "preflight.json").read_text())["details"]
  assert pre["versions"]["jax"] == jax.__version__ and pre["versions"]["flax_nnx_list"]
  verdict = pre["verdict"]
  assert verdict["kernel"] == "pallas_gpu" and verdict["kernel_ok"] is False
  assert verdict["error"] and verdict["attention"] == "xla"
  # Budget before each section, result after it, then the file rewritten: in that order.
  pos = lambda text: proc.stdout.index(text)
  for name in SECTIONS:
    if name == "attention_check":
      assert "[attention_check] SKIPPED" in proc.stdout
      continue
    assert (pos(f"[{name}] starting, budget") < pos(f"[{name}] done")
            < pos(f"[{name}] results so far written")), name
  assert "retrying" not in proc.stdout   # the failed kernel is never tried again

  data = json.loads(out.read_text())
  d = data["details"]
  assert d["complete"] is True and d["section_order"] == SECTIONS
  assert d["step_attention"] == "xla" and d["preflight"]["kernel_ok"] is False
  for name in ("mage_vl_mid", "mage_vl_full"):
    assert [a["attention"] for a in d[name]["attempts"]] == ["xla"]
    assert set(d["progress"][name]) >= {"init_s", "first_step_s"}
  packages = {m for m in d["imported_packages"] if not m.startswith("_") and m != "cython_runtime"}
  assert packages - {"mage_jax", "launch"} <= tops, sorted(packages - tops)
  # Partial files: each names a prefix of the sections.
  prefixes = [x["details"].get("section_order", []) for x in seen if not x["details"]["complete"]]
  assert all(p == SECTIONS[:len(p)] for p in prefixes), prefixes
  assert SECTIONS[:1] in prefixes and SECTIONS[:3] in prefixes, prefixes
  # The compile cache under $OUT: the full rung (same tiny config) compiled from it.
  assert any((tmp_path / "out" / "jax_cache").iterdir())
  assert d["mage_vl_full"]["phases"]["first_step_s"] < d["mage_vl_mid"]["phases"]["first_step_s"]

  # MFU: the bench's row against the trainer's logger fed the trainer's FLOPs for the same
  # batch over the same seconds, and the FLOPs against a count by hand.
  step = d["mage_vl_mid"]
  row = next(r for r in data["rows"] if r["name"].startswith("Mage-VL tiny MFU"))
  size = d["rungs"]["mage_vl_mid"]
  work = workload_lib.workload(size)
  chunk = work.pop("loss_chunk_size")
  cfg = workload_lib.mage_vl_config(size, "full", "xla")
  batch = workload_lib.mage_vl_batch(**work, cfg=cfg)
  trainer_flops = flops_lib.batch_flops(cfg, batch, loss_chunk_size=chunk)  # as train/loop.py
  assert trainer_flops["flops_model"] == pytest.approx(_hand_counted_model_flops(cfg, batch, chunk))
  assert trainer_flops["flops_model"] == step["flops"]["flops_model"]
  clock = iter([0.0, step["timing"]["median_s"]])
  monkeypatch.setattr(metrics.time, "perf_counter", lambda: next(clock))
  logger = metrics.Logger(str(tmp_path), total_steps=1, every_steps=1,
                          peak_tflops=d["peak"]["flops_per_s"] / 1e12, num_devices=1,
                          tensorboard=False)
  logged = logger.step(1, {"loss": 1.0}, trainer_flops)
  logger.close()
  assert f"{row['value']:.3g}" == f"{100 * logged['mfu_model']:.3g}"
  print(f"dry run: {time.time() - start:.0f} s wall")


def test_step_retry_frees_the_failed_attempt_and_oom_is_not_retried(monkeypatch):
  """A kernel failure: the failed attempt's device arrays are gone before the retry starts
  (none of the traceback survives), and the retry runs. An allocation failure: no retry.
  A Triton shared-memory error is a kernel failure, not an out-of-memory."""
  import jax.numpy as jnp
  from mage_jax.bench import mage_vl_workload as workload_lib
  live_at_retry = []

  def fake_step(cfg, batch, reps, chunk, progress):
    if cfg.text.attention_backend == "pallas_gpu":
      state = jnp.ones((1024, 1024), jnp.float32)  # the failed attempt's 4 MiB "state"
      raise RuntimeError(f"INTERNAL: Triton lowering failed ({state.shape})")
    live_at_retry.append(sum(a.nbytes for a in jax.live_arrays()))
    return {"ran": cfg.text.attention_backend}

  monkeypatch.setattr(workload_lib, "mage_vl_step", fake_step)
  before = sum(a.nbytes for a in jax.live_arrays())
  out = workload_lib.step_with_attention_fallback("tiny", "none", "pallas_gpu", "xla", {}, 1, 32)
  assert out["ran"] == "xla" and [a["ok"] for a in out["attempts"]] == [False, True]
  assert "Triton lowering failed" in out["attempts"][0]["error"]
  assert live_at_retry[0] - before < 4 * 2 ** 20   # the 4 MiB array was freed
  assert not workload_lib.is_out_of_memory("RESOURCE_EXHAUSTED: out of resource: shared memory,"
                                           " Required: 233472, Hardware limit: 232448")

  def oom_step(cfg, batch, reps, chunk, progress):
    raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 61.20GiB.")

  monkeypatch.setattr(workload_lib, "mage_vl_step", oom_step)
  with pytest.raises(workload_lib.StepFailed) as failed:
    workload_lib.step_with_attention_fallback("tiny", "none", "pallas_gpu", "xla", {}, 1, 32)
  assert [a["out_of_memory"] for a in failed.value.attempts] == [True]


def test_sections_past_the_deadline_are_skipped_and_say_so(tmp_path):
  from mage_jax.bench.sections import SuiteRun
  suite = SuiteRun("gpu", str(tmp_path / "r.json"), {}, deadline=time.time() + 20)
  assert suite.section("short", 5, lambda: 1) == 1
  assert suite.section("long", 60, lambda: pytest.fail("ran past the deadline")) is None
  suite.progress("short", init_s=1.5)
  d = json.loads((tmp_path / "r.json").read_text())["details"]
  assert d["section_order"] == ["short", "long"] and d["sections"]["long"]["skipped"]
  assert "needs its 60 s budget" in d["long"]["skipped"] and d["progress"]["short"] == {"init_s": 1.5}


def test_the_kernel_verdict_picks_every_step_attention(tmp_path):
  from mage_jax.bench import gpu_suite, preflight
  failed = {"kernel_ok": False}
  assert gpu_suite.choose_step_attention("auto", failed, gpu=True) == "xla"
  assert gpu_suite.choose_step_attention("pallas_gpu", failed, gpu=True) == "xla"
  assert gpu_suite.choose_step_attention("auto", {"kernel_ok": True}, gpu=True) == "pallas_gpu"
  assert gpu_suite.choose_step_attention("auto", {"kernel_ok": True}, gpu=False) == "xla"
  # A preflight that never wrote its verdict (timed out in the kernel) reads as failed.
  path = tmp_path / "preflight.json"
  path.write_text(json.dumps({"details": {"section_order": ["versions"]}}))
  assert preflight.read_verdict(str(path))["kernel_ok"] is False
  assert "did not finish" in preflight.read_verdict(str(path))["error"]
  assert preflight.read_verdict(str(tmp_path / "missing.json"))["kernel_ok"] is False
  assert sum(gpu_suite.GPU_BUDGETS_S.values()) + preflight.BUDGETS_S["kernel_check"] <= 570 - 60


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
  from mage_jax.bench import preflight
  from mage_jax.models import attention as attention_lib
  good = preflight.attention_packed_vs_split("xla", [20, 33, 9], 2, 2, 1, 16, jnp.float32)
  assert good["ok"] and good["max_abs_packed_vs_split_out"] < 1e-5
  real = attention_lib.attention

  def leaky(q, k, v, *, q_segment_ids, kv_segment_ids, **kw):  # ignores packing
    ones = jnp.where(q_segment_ids > 0, 1, 0)
    return real(q, k, v, q_segment_ids=ones, kv_segment_ids=ones, **kw)

  monkeypatch.setattr(attention_lib, "attention", leaky)
  bad = preflight.attention_packed_vs_split("xla", [20, 33, 9], 2, 2, 1, 16, jnp.float32)
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


def test_student_decode_rows_vs_full_tiny():
  from mage_jax.bench import decode_bench
  ids = np.arange(1000, 1300, dtype=np.int32)
  rows, details = decode_bench.student_decode(ids, rows=2, max_len=64, reps=1)
  assert [r.unit for r in rows] == ["ms", "ms", "ms", "x"] and details["kept_ids"] == 300
  assert all(r.value > 0 for r in rows) and rows[3].value == pytest.approx(rows[0].value / rows[2].value)
  assert set(details["ms_per_call"]) == {"full", "rows_full_sampler", "rows"}
