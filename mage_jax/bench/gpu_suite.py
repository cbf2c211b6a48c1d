"""The GPU suite: `bash scripts/device_gpu_bench.sh` (one 10-minute lease on one H200).

A ladder, each rung written to $OUT/results_gpu.json before the next starts (sections.
SuiteRun: a failing section is recorded and the next runs; a section that cannot fit the
time left before the deadline is skipped and says so; the step rungs record init /
compile / step seconds as they happen):

0. preflight (its own process, before this suite: bench/preflight.py): versions, devices
   and the flash kernel's verdict, read here; it picks the attention of every step;
1. embedded engine decode (needs nothing from the steps, so it does not wait for them);
2. bf16 matmul ceiling (chained 8192³ matmuls in one jit);
3. the mid-size Mage-VL SFT step (full widths, 4 LM + 4 ViT layers, 8,192 packed tokens);
4. the full Mage-VL 4.74B SFT step on 32,768 packed tokens with 3 screenshots per sample:
   step time, tokens/s, MFU (model FLOPs, train/flops.py: the trainer's own accounting)
   and HFU (hardware FLOPs, with remat) against 989 TFLOP/s and the measured ceiling,
   peak device memory;
5. packed == split attention at the step's head shapes (only when the kernel passed the
   preflight);
6. how many tiles the kernel's block skipping visits for the step's layout (pure jnp).

A step whose kernel fails other than by running out of memory frees that attempt's memory
and runs once more on the fallback ("xla" attending within segments, never the dense row);
after one kernel failure later steps use the fallback directly.

Without a GPU the suite refuses to run (with the backend's error) unless allow_cpu: then
the same ladder runs on CPU with the `tiny` and `small` stand-ins (`--dry_run` of the device
script) and every row is labelled "cpu-fallback": those figures say the script works, not
how fast anything is. Imports only jax, flax, optax, numpy and the standard library.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mage_jax.bench import decode_bench
from mage_jax.bench import mage_vl_workload as workload_lib
from mage_jax.bench import preflight, timing
from mage_jax.bench.results import Row, goal_row
from mage_jax.bench.sections import SuiteRun
from mage_jax.train import flops as flops_lib

CMD = "bash scripts/device_gpu_bench.sh"
DATASHEET_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16
ATTENTION_CHOICES = ("auto", "pallas_gpu", "xla")
# Seconds per section on one H200, compile included; a section starts only with its budget
# left before the deadline. With the preflight's 30 s they sum to 480 s, inside the device
# script's 570 s (a 600 s lease less start-up). The full step compiled in 185 s on 2 CPU
# cores. On CPU (the dry run) the budgets are what this 2-core machine needs.
GPU_BUDGETS_S = {"engine_decode": 60, "matmul_ceiling": 15, "mage_vl_mid": 90,
                 "mage_vl_full": 230, "attention_check": 45, "flash_block_skipping": 10}
CPU_BUDGETS_S = {"engine_decode": 40, "matmul_ceiling": 20, "mage_vl_mid": 60,
                 "mage_vl_full": 90, "attention_check": 60, "flash_block_skipping": 15}
SECTIONS = tuple(GPU_BUDGETS_S)
# CPU: both rungs at `tiny` (the full rung's compile then comes from the persistent cache,
# which the dry run thereby checks; `--gpu_size=small` runs a bigger stand-in).
STEP_SIZES = {True: {"mage_vl_mid": "mid", "mage_vl_full": "full"},
              False: {"mage_vl_mid": "tiny", "mage_vl_full": "tiny"}}


def on_gpu() -> bool:
  return jax.default_backend() == "gpu"


# ----------------------------------------------------------------------------- ceiling


def matmul_ceiling(n: int, chain: int, reps: int, dtype=jnp.bfloat16) -> dict[str, float]:
  """FLOP/s of `chain` dependent n×n matmuls in one jit (amortises dispatch)."""
  a = (jax.random.normal(jax.random.key(0), (n, n), jnp.float32) / np.sqrt(n)).astype(dtype)
  x0 = jax.random.normal(jax.random.key(1), (n, n), jnp.float32).astype(dtype)

  @jax.jit
  def run(x, a):
    return jax.lax.fori_loop(0, chain, lambda _, y: jnp.dot(y, a, preferred_element_type=dtype), x)

  t = timing.time_fn(lambda: run(x0, a), reps=reps, warmup=2)
  flops = 2.0 * n ** 3 * chain
  return {"n": n, "chain": chain, "dtype": jnp.dtype(dtype).name, "median_s": t.median_s,
          "flops_per_s": flops / t.median_s, "best_flops_per_s": flops / t.min_s}


def flash_block_skipping(batch: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
  """Tiles our flash kernel visits for this batch's LM (causal) and ViT (bidirectional)
  layouts, with the count a kernel without block skipping would run ("dense": every
  tile below the diagonal for the LM, every tile for the ViT), at the default tiles."""
  from mage_jax.models import flash_attention as flash   # the bare GPU image runs this module: each path imports only what it needs
  return {"lm": flash.visited_blocks(jnp.asarray(batch["segment_ids"]), causal=True),
          "vit": flash.visited_blocks(jnp.asarray(batch["patch_image_ids"]), causal=False)}


def gpu_backend_error() -> str | None:
  """None when JAX runs on a GPU; else why not (the CUDA backend's own error)."""
  if on_gpu():
    return None
  try:
    devices = jax.devices("gpu")
  except RuntimeError as e:  # "Unable to initialize backend 'cuda': ..." or "Unknown backend"
    return f"{e}"
  return f"default backend is {jax.default_backend()!r} although GPU devices exist: {devices}"


class NoGPU(RuntimeError):
  """--suite=gpu without a GPU and without allow_cpu."""


def peak_flops(gpu: bool, ceiling: dict | None) -> tuple[float, str]:
  """The MFU denominator: the trainer's per-device peak (train/metrics.py: the datasheet for
  known GPUs) on a GPU; on CPU this run's measured ceiling (NaN without one)."""
  if gpu:
    from mage_jax.train import metrics   # the bare GPU image runs this module: each path imports only what it needs
    tflops, source = metrics.device_peak_tflops()
    return tflops * 1e12, source
  if ceiling:
    return ceiling["flops_per_s"], "measured matmul ceiling (this run)"
  return float("nan"), "no ceiling measured"


def choose_step_attention(attention: str, verdict: dict[str, Any], gpu: bool) -> str:
  """The steps' attention: the kernel unless the preflight failed it (then the fallback,
  never the kernel again); on CPU the stand-ins use xla unless a kernel is forced
  (interpret mode is too slow there)."""
  if attention == "xla" or verdict.get("kernel_ok") is False:
    return preflight.FALLBACK_ATTENTION
  if attention == "auto" and not gpu:
    return "xla"
  return preflight.kernel_for(attention, gpu)


def run(suite: SuiteRun, *, size: str = "auto", remat: str = "full", reps: int = 3,
        attention: str = "auto", allow_cpu: bool = False,
        verdict: dict[str, Any] | None = None) -> SuiteRun:
  """The ladder into `suite` (rows + details; JSON after each section). `verdict`: the
  preflight's (preflight.read_verdict); None = no preflight, the kernel is assumed to work.
  `size`: auto = the mid and full rungs (CPU: tiny and small); one size = that rung only."""
  gpu = on_gpu()
  if not gpu:
    error = gpu_backend_error()
    suite.details["gpu_backend_error"] = error
    if not allow_cpu:
      suite.details["error"] = f"no GPU backend: {error}"
      suite.write(complete=False)
      raise NoGPU(f"--suite=gpu found no GPU backend ({error}); pass --allow_cpu for the CPU "
                  "smoke run (bash scripts/device_gpu_bench.sh --dry_run)")
  if attention not in ATTENTION_CHOICES:
    raise ValueError(f"attention={attention!r} is not one of {ATTENTION_CHOICES}")
  rungs = dict(STEP_SIZES[gpu]) if size == "auto" else {"mage_vl_full": size}
  verdict = dict(verdict or {"kernel_ok": None, "attention": ""})
  kernel = preflight.kernel_for(attention, gpu)
  step_attention = choose_step_attention(attention, verdict, gpu)
  state = {"attention": step_attention}
  budgets = GPU_BUDGETS_S if gpu else CPU_BUDGETS_S
  tag = "" if gpu else " [cpu-fallback]"
  suite.details.update(
      label=(f"device: {jax.devices()[0].device_kind}" if gpu else
             "cpu-fallback: no GPU found; stand-in configs, figures only show that the script "
             "runs"),
      rungs=rungs, remat=remat, gpu=gpu, attention=attention, preflight=verdict,
      step_attention=step_attention, budgets_s=budgets)
  print(suite.details["label"], flush=True)
  print(f"preflight verdict: {verdict}; steps use attention={step_attention}", flush=True)
  print(f"sections and budgets (s): {budgets}, {sum(budgets.values())} s in all; "
        f"{suite.remaining_s():.0f} s left before the deadline", flush=True)
  if verdict.get("kernel_ok") is not None:
    ok = bool(verdict["kernel_ok"])
    suite.add(Row(f"preflight: {verdict.get('kernel', kernel)} packed fwd+bwd{tag}", float(ok),
                  "bool", goal="== 1", met=ok, command=CMD,
                  note=str(verdict.get("error", ""))[:120]))
  reps = max(1, min(reps, 3))

  decode = suite.section("engine_decode", budgets["engine_decode"],
                         lambda: decode_bench.engine_decode(gpu))
  if decode:
    ms = decode["ms_per_call"]
    for rows in [r for r in ("8", "32") if r in ms]:
      suite.add(Row(f"embedded engine decode, {rows} rows vs 1{tag}",
                    int(rows) * ms["1"] / ms[rows], "x", command=CMD,
                    note=f"{decode['model']}: {ms['1']:.2f} ms (1 row) vs {ms[rows]:.2f} ms "
                         f"({rows} rows) per 4-token decode_slots call"))

  ceil = suite.section("matmul_ceiling", budgets["matmul_ceiling"], lambda: matmul_ceiling(
      8192 if gpu else 256, chain=8 if gpu else 2, reps=5 if gpu else 2))
  if ceil:
    suite.add(Row(f"bf16 matmul ceiling {ceil['n']}^3{tag}", ceil["flops_per_s"] / 1e12,
                  "TFLOP/s", command=CMD, note=f"datasheet {DATASHEET_BF16_FLOPS / 1e12:g}"))
  peak, peak_source = peak_flops(gpu, ceil)
  suite.details["peak"] = {"flops_per_s": peak, "source": peak_source}

  batch = None
  for name in ("mage_vl_mid", "mage_vl_full"):
    if name not in rungs:
      continue
    step, batch = _step_rung(suite, name, rungs[name], budgets[name], remat, reps, state,
                             kernel, gpu)
    if step:
      _step_rows(suite, step, ceil, peak, rungs[name], remat, gpu, tag)

  if step_attention == kernel and kernel.startswith("pallas") and state["attention"] == kernel:
    shape = ([2500, 1000, 500], 96, 32, 8, 128, jnp.bfloat16) if gpu else (
        [40, 64, 17], 7, 2, 1, 32, jnp.float32)
    att = suite.section("attention_check", budgets["attention_check"],
                        lambda: preflight.attention_packed_vs_split(kernel, *shape))
    if att or "error" in suite.details.get("attention_check", {}):
      suite.add(Row(f"packed == split attention at the step's heads ({kernel}){tag}",
                    float(bool(att and att["ok"])), "bool", goal="== 1",
                    met=bool(att and att["ok"]), command=CMD,
                    note="" if att else suite.details["attention_check"]["error"][:120]))
  else:
    suite.skip("attention_check", f"the steps ran attention={state['attention']}, not a "
                                  "flash kernel that passed the preflight")

  if batch is not None:
    skip = suite.section("flash_block_skipping", budgets["flash_block_skipping"],
                         lambda: flash_block_skipping(batch))
    if skip:
      for part, what in (("lm", "LM causal"), ("vit", "ViT per-image")):
        c = skip[part]
        suite.add(Row(f"flash tiles visited vs dense, {what} fwd{tag}",
                      100 * c["fwd"] / c["fwd_dense"], "%", command=CMD,
                      note=f"{c['fwd']} of {c['fwd_dense']} tiles; bwd dq "
                           f"{100 * c['dq'] / c['dq_dense']:.0f}%, dkv "
                           f"{100 * c['dkv'] / c['dkv_dense']:.0f}%"))
  return suite


def _step_rung(suite: SuiteRun, name: str, size: str, budget: float, remat: str, reps: int,
               state: dict[str, str], kernel: str, gpu: bool
               ) -> tuple[dict[str, Any] | None, dict[str, np.ndarray]]:
  """One Mage-VL step rung; a kernel failure here switches `state["attention"]` to the
  fallback for every later rung."""
  work = workload_lib.workload(size)
  chunk = work.pop("loss_chunk_size")
  cfg = workload_lib.mage_vl_config(size, remat, state["attention"])
  batch = workload_lib.mage_vl_batch(**work, cfg=cfg)
  suite.details.setdefault("batches", {})[name] = {
      "size": size, "shape": {k: list(v.shape) for k, v in batch.items()},
      "images_per_sample": work["images_per_sample"], "loss_chunk_size": chunk}
  fallback = "" if state["attention"] == preflight.FALLBACK_ATTENTION else (
      preflight.FALLBACK_ATTENTION)
  attempts: list[dict[str, Any]] = []

  def body():
    try:
      return workload_lib.step_with_attention_fallback(
          size, remat, state["attention"], fallback, batch, reps, chunk,
          progress=lambda **kw: suite.progress(name, **kw))
    except workload_lib.StepFailed as e:
      attempts.extend(e.attempts)
      raise

  step = suite.section(name, budget, body)
  attempts = step["attempts"] if step else attempts
  if any(not a["ok"] and not a.get("out_of_memory") and a["attention"] == kernel
         for a in attempts):
    state["attention"] = preflight.FALLBACK_ATTENTION
    suite.details["kernel_failed_in"] = name
  if not step:
    info = suite.details.get(name, {})
    if attempts:
      info["attempts"] = attempts
    tag = "" if gpu else " [cpu-fallback]"
    suite.add(Row(f"Mage-VL {size} SFT step{tag}", float("nan"), "s", goal="runs", met=False,
                  command=CMD, note=str(info.get("error") or info.get("skipped", ""))[:120]))
  return step, batch


def _step_rows(suite: SuiteRun, step: dict[str, Any], ceil: dict | None, peak: float,
               size: str, remat: str, gpu: bool, tag: str) -> None:
  s = step["timing"]["median_s"]
  f = step["flops"]
  name = {"full": "Mage-VL 4B", "mid": "Mage-VL mid (4+4 layers)", "small": "Mage-VL small",
          "tiny": "Mage-VL tiny"}[size]
  tried = " then ".join(a["attention"] + ("" if a["ok"] else " (failed)") for a in step["attempts"])
  mfu = flops_lib.mfu(f["flops_model"], s, peak)
  hfu = flops_lib.mfu(f["flops_hardware"], s, peak)
  step["mfu"] = {"model": mfu, "hardware": hfu, "peak_flops_per_s": peak}
  suite.add(
      Row(f"{name} SFT step, {step['tokens']} tokens (median){tag}", s, "s", command=CMD,
          note=f"remat={remat}, attention {tried}, {step['patches']} patches, init "
               f"{step['phases']['init_s']:.0f}s, compile+1st {step['phases']['first_step_s']:.0f}s"),
      Row(f"{name} tokens/s{tag}", step["tokens"] / s, "tok/s", command=CMD))
  peak_note = f"peak {peak / 1e12:.4g} TFLOP/s; head on {f['head_tokens']:.0f} loss tokens"
  if gpu and size == "full":
    suite.add(goal_row(f"{name} MFU (model FLOPs)", 100 * mfu, "%", 50, command=CMD,
                       note=peak_note))
  else:
    suite.add(Row(f"{name} MFU (model FLOPs){tag}", 100 * mfu, "%", command=CMD, note=peak_note))
  suite.add(Row(f"{name} HFU (hardware FLOPs, remat={remat}){tag}", 100 * hfu, "%",
                command=CMD, note=peak_note))
  if gpu and ceil:
    suite.add(Row(f"{name} MFU vs measured ceiling", 100 * f["flops_model"] / s
                  / ceil["flops_per_s"], "%", command=CMD))
  if step["peak_bytes_in_use"] is not None:
    suite.add(Row(f"{name} peak device memory{tag}", step["peak_bytes_in_use"] / 2 ** 30, "GiB",
                  command=CMD, note=f"pool {step['bytes_limit'] / 2 ** 30:.1f} GiB"
                  if step.get("bytes_limit") else ""))
