"""The GPU suite: `python3 -m launch.bench --suite=gpu`, < 5 minutes on one H100/H200.

The device command is `bash scripts/device_gpu_bench.sh` (BENCHMARKS.md "GPU"). Imports
only jax, flax, optax, numpy and the standard library (tests/test_bench.py runs it with
nothing else importable), so it runs on a bare JAX+CUDA image with no internet. Sections,
each with a time budget printed before it starts (sections.SuiteRun: a failing section is
recorded and the next runs; results JSON rewritten after each; device memory after each):

1. bf16 matmul ceiling (chained 8192³ matmuls in one jit);
2. packed attention == split attention on the GPU flash kernel (`pallas_gpu`, or the
   kernel --gpu_attention names), forward and gradients, plus the packed output against
   an fp32 XLA reference;
3. how many tiles our kernel's block skipping visits for the step's batch layout vs a
   kernel that does not skip (a pure jnp count);
4. the SFT step of the full Mage-VL 4.74B on 32,768 packed tokens with 3 screenshots per
   sample (bench.mage_vl_workload): step time, tokens/s, MFU (6·N·D, and with attention)
   against 989 TFLOP/s and against the measured ceiling, and peak device memory. A step
   whose attention kernel fails is retried once with `xla` in the same run; both
   attempts are reported.

Without a GPU the suite refuses to run (with the backend's error) unless allow_cpu: then
the same code runs on CPU with a `small` or `tiny` config (XLA attention for the step,
the Pallas kernel in interpret mode for the check) and every row is labelled
"cpu-fallback": those figures say the script works, not how fast anything is.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mage_jax.bench import decode_bench
from mage_jax.bench import mage_vl_workload as workload_lib
from mage_jax.bench import timing
from mage_jax.bench.results import Row, goal_row
from mage_jax.bench.sections import SuiteRun

CMD = "python3 -m launch.bench --suite=gpu"
DATASHEET_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16
ATTENTION_CHOICES = ("auto", "pallas_gpu", "xla", "cudnn")
# Seconds per section on one H200, compile included (sum 300 s: the suite's 5-minute goal;
# the full step compiled in 185 s on 2 CPU cores). On CPU the budgets are informational.
GPU_BUDGETS_S = {"matmul_ceiling": 15, "attention_check": 45, "flash_block_skipping": 10,
                 "mage_vl_step": 230, "engine_decode": 60}
CPU_BUDGETS_S = {"matmul_ceiling": 30, "attention_check": 90, "flash_block_skipping": 15,
                 "mage_vl_step": 180, "engine_decode": 30}


def on_gpu() -> bool:
  return jax.default_backend() == "gpu"


# ----------------------------------------------------------------------------- 1. ceiling


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


# ------------------------------------------------------------------- 2. packed == split attention


def _xla_reference(q, k, v, seg):
  from mage_jax.models.attention import attention
  f32 = lambda x: x.astype(jnp.float32)
  return attention(f32(q), f32(k), f32(v), q_segment_ids=seg, kv_segment_ids=seg, causal=True,
                   backend="xla", q_chunk=None)


def attention_packed_vs_split(backend: str, seg_lengths: list[int], pad: int, heads: int,
                              kv_heads: int, head_dim: int, dtype) -> dict[str, Any]:
  """Max |packed − split| of the kernel's output and input gradients, per segment."""
  from mage_jax.models.attention import attention
  t = sum(seg_lengths) + pad
  kq, kk, kv, kc = jax.random.split(jax.random.key(3), 4)
  q = jax.random.normal(kq, (1, t, heads, head_dim), jnp.float32).astype(dtype)
  k = jax.random.normal(kk, (1, t, kv_heads, head_dim), jnp.float32).astype(dtype)
  v = jax.random.normal(kv, (1, t, kv_heads, head_dim), jnp.float32).astype(dtype)
  cot = jax.random.normal(kc, (1, t, heads, head_dim), jnp.float32).astype(dtype)
  seg = np.zeros((1, t), np.int32)
  starts = np.cumsum([0] + seg_lengths)
  for i, n in enumerate(seg_lengths):
    seg[0, starts[i]:starts[i] + n] = i + 1
  seg = jnp.asarray(seg)

  def loss(q, k, v, seg, cot):
    out = attention(q, k, v, q_segment_ids=seg, kv_segment_ids=seg, causal=True, backend=backend)
    return jnp.sum(out.astype(jnp.float32) * cot.astype(jnp.float32)), out

  fwd_bwd = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
  (_, packed_out), packed_grads = fwd_bwd(q, k, v, seg, cot)
  reference = jax.jit(_xla_reference)(q, k, v, seg)
  err_out = err_grad = 0.0
  for i, n in enumerate(seg_lengths):
    sl = slice(int(starts[i]), int(starts[i] + n))
    one = jnp.ones((1, n), jnp.int32)
    (_, out_i), grads_i = fwd_bwd(q[:, sl], k[:, sl], v[:, sl], one, cot[:, sl])
    err_out = max(err_out, float(jnp.max(jnp.abs(
        packed_out[:, sl].astype(jnp.float32) - out_i.astype(jnp.float32)))))
    for gp, gi in zip(packed_grads, grads_i):
      # Relative to the tensor's scale: dk/dv sum over thousands of queries, so their
      # bf16 ulp is large in absolute terms.
      gi32 = gi.astype(jnp.float32)
      err_grad = max(err_grad, float(jnp.max(jnp.abs(gp[:, sl].astype(jnp.float32) - gi32))
                                     / jnp.maximum(jnp.max(jnp.abs(gi32)), 1e-6)))
  real = seg != 0
  err_ref = float(jnp.max(jnp.where(real[:, :, None, None], jnp.abs(
      packed_out.astype(jnp.float32) - reference), 0.0)))
  pad_max = float(jnp.max(jnp.where(real[:, :, None, None], 0.0, jnp.abs(packed_out.astype(jnp.float32)))))
  tol = 2e-2 if jnp.dtype(dtype) == jnp.bfloat16 else 1e-4
  ok = err_out <= tol and err_grad <= tol and err_ref <= 2 * tol and pad_max == 0.0
  return {"backend": backend, "seq_len": t, "segments": seg_lengths, "dtype": jnp.dtype(dtype).name,
          "max_abs_packed_vs_split_out": err_out, "max_rel_packed_vs_split_grad": err_grad,
          "max_abs_packed_vs_fp32_xla": err_ref, "max_abs_padding_out": pad_max,
          "tolerance_out": tol, "ok": bool(ok)}


def flash_block_skipping(batch: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
  """Tiles our flash kernel visits for this batch's LM (causal) and ViT (bidirectional)
  layouts, with the count a kernel without block skipping would run ("dense": every
  tile below the diagonal for the LM, every tile for the ViT), at the default tiles."""
  from mage_jax.models import flash_attention as flash
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


def run(suite: SuiteRun, *, size: str = "auto", remat: str = "full", reps: int = 3,
        attention: str = "auto", allow_cpu: bool = False) -> SuiteRun:
  """All sections into `suite` (rows + details; JSON after each section)."""
  gpu = on_gpu()
  if not gpu:
    error = gpu_backend_error()
    suite.details["gpu_backend_error"] = error
    if not allow_cpu:
      suite.details["error"] = f"no GPU backend: {error}"
      suite.write(complete=False)
      raise NoGPU(f"--suite=gpu found no GPU backend ({error}); pass --allow_cpu for the CPU "
                  "smoke run")
  if size == "auto":
    size = "full" if gpu else "small"
  if attention not in ATTENTION_CHOICES:
    raise ValueError(f"attention={attention!r} is not one of {ATTENTION_CHOICES}")
  step_attention = "" if attention == "auto" else attention
  kernel = attention if attention in ("pallas_gpu", "cudnn") else (
      "pallas_gpu" if gpu else "pallas_interpret")
  budgets = GPU_BUDGETS_S if gpu else CPU_BUDGETS_S
  tag = "" if gpu else " [cpu-fallback]"
  suite.details.update(
      label=(f"device: {jax.devices()[0].device_kind}" if gpu else
             f"cpu-fallback: no GPU found; {size} config, figures only show that the script runs"),
      size=size, remat=remat, gpu=gpu, attention=attention, budgets_s=budgets)
  print(suite.details["label"], flush=True)
  print(f"sections and budgets (s): {budgets}, {sum(budgets.values())} s in all", flush=True)
  reps = max(1, min(reps, 3))

  ceil = suite.section("matmul_ceiling", budgets["matmul_ceiling"], lambda: matmul_ceiling(
      8192 if gpu else 512 if size == "small" else 256, chain=8 if gpu else 2,
      reps=5 if gpu else 2))
  if ceil:
    suite.add(Row(f"bf16 matmul ceiling {ceil['n']}^3{tag}", ceil["flops_per_s"] / 1e12,
                  "TFLOP/s", command=CMD, note=f"datasheet {DATASHEET_BF16_FLOPS / 1e12:g}"))

  shape = ([2500, 1000, 500], 96, 32, 8, 128, jnp.bfloat16) if gpu else (
      [40, 64, 17], 7, 2, 1, 32, jnp.float32)
  att = suite.section("attention_check", budgets["attention_check"],
                      lambda: attention_packed_vs_split(kernel, *shape))
  suite.add(Row(f"packed == split attention ({kernel}){tag}", float(bool(att and att["ok"])),
                "bool", goal="== 1", met=bool(att and att["ok"]), command=CMD,
                note="" if att else suite.details["attention_check"]["error"][:120]))

  cfg = workload_lib.mage_vl_config(size, remat, step_attention)
  work = workload_lib.workload(size)
  chunk = work.pop("loss_chunk_size")
  batch = workload_lib.mage_vl_batch(**work, cfg=cfg)
  suite.details["batch"] = {"shape": {k: list(v.shape) for k, v in batch.items()},
                            "images_per_sample": work["images_per_sample"]}
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

  step = suite.section("mage_vl_step", budgets["mage_vl_step"],
                       lambda: workload_lib.step_with_attention_fallback(
                           size, remat, cfg.text.attention_backend, batch, reps, chunk))
  if step:
    _step_rows(suite, step, ceil, size, remat, gpu, tag)
  else:
    suite.add(Row(f"Mage-VL SFT step{tag}", float("nan"), "s", goal="runs", met=False,
                  command=CMD, note=suite.details["mage_vl_step"]["error"][:120]))

  decode = suite.section("engine_decode", budgets["engine_decode"],
                         lambda: decode_bench.engine_decode(gpu))
  if decode:
    ms = decode["ms_per_call"]
    for rows in [r for r in ("8", "32") if r in ms]:
      suite.add(Row(f"embedded engine decode, {rows} rows vs 1{tag}",
                    int(rows) * ms["1"] / ms[rows], "x", command=CMD,
                    note=f"{decode['model']}: {ms['1']:.2f} ms (1 row) vs {ms[rows]:.2f} ms "
                         f"({rows} rows) per 4-token decode_slots call"))
  return suite


def _step_rows(suite: SuiteRun, step: dict[str, Any], ceil: dict | None, size: str, remat: str,
               gpu: bool, tag: str) -> None:
  s = step["timing"]["median_s"]
  f = step["flops"]
  name = {"full": "Mage-VL 4B", "small": "Mage-VL small", "tiny": "Mage-VL tiny"}[size]
  tried = " then ".join(a["attention"] + ("" if a["ok"] else " (failed)") for a in step["attempts"])
  suite.add(
      Row(f"{name} SFT step, {step['tokens']} tokens (median){tag}", s, "s", command=CMD,
          note=f"remat={remat}, attention {tried}, {step['patches']} patches, "
               f"compile+1st {step['phases']['first_step_s']:.0f}s"),
      Row(f"{name} tokens/s{tag}", step["tokens"] / s, "tok/s", command=CMD))
  for kind, fl in (("6N", f["six_n_d"]), ("6N+attn", f["total"])):
    achieved = fl / s
    if gpu:
      suite.add(goal_row(f"MFU {kind} vs 989 TFLOP/s", 100 * achieved / DATASHEET_BF16_FLOPS,
                         "%", 50, command=CMD))
    if ceil:
      suite.add(Row(f"MFU {kind} vs measured ceiling{tag}", 100 * achieved / ceil["flops_per_s"],
                    "%", command=CMD))
  if step["peak_bytes_in_use"] is not None:
    suite.add(Row(f"peak device memory{tag}", step["peak_bytes_in_use"] / 2 ** 30, "GiB",
                  command=CMD, note=f"pool {step['bytes_limit'] / 2 ** 30:.1f} GiB"
                  if step.get("bytes_limit") else ""))
