"""The GPU lease's first 30 seconds: `python3 -m launch.bench --suite=preflight`.

Run by scripts/device_gpu_bench.sh under its own short timeout, in its own process, before
the suite: a Triton lowering that hangs or crashes costs this process only. It writes
$OUT/preflight.json twice — versions and devices at once (the lease's first result file),
then the verdict of one small packed forward + backward through the flash kernel
(`pallas_gpu` on a GPU, `pallas_interpret` on CPU) against the split-per-segment run and an
fp32 XLA reference. The GPU suite reads the verdict: a kernel that failed here (or did
not report in time) is never tried again in that run; every step uses the "xla" fallback.
Imports only jax, flax, optax, numpy and the standard library.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mage_jax.bench.results import Row
from mage_jax.bench.sections import SuiteRun

CMD = "python3 -m launch.bench --suite=preflight"
FALLBACK_ATTENTION = "xla"  # with the workload's max_segment_len: follows the segments
BUDGETS_S = {"versions": 10, "kernel_check": 30}


def versions() -> dict[str, Any]:
  """Interpreter, library versions and devices; whether flax has nnx.List (the models need it)."""
  import flax   # the bare GPU image runs this module: each path imports only what it needs
  import optax   # the bare GPU image runs this module: each path imports only what it needs
  from flax import nnx   # the bare GPU image runs this module: each path imports only what it needs
  out = {"python": sys.version.split()[0], "jax": jax.__version__, "flax": flax.__version__,
         "optax": optax.__version__, "numpy": np.__version__, "backend": jax.default_backend(),
         "devices": [f"{d.platform}:{d.device_kind}" for d in jax.devices()],
         "flax_nnx_list": hasattr(nnx, "List")}
  try:
    import jaxlib   # the bare GPU image runs this module: each path imports only what it needs
    out["jaxlib"] = jaxlib.__version__
  except ImportError:  # informational only
    pass
  print(" | ".join(f"{k} {v}" for k, v in out.items()), flush=True)
  return out


def _xla_reference(q, k, v, seg):
  from mage_jax.models.attention import attention   # the bare GPU image runs this module: each path imports only what it needs
  f32 = lambda x: x.astype(jnp.float32)
  return attention(f32(q), f32(k), f32(v), q_segment_ids=seg, kv_segment_ids=seg, causal=True,
                   backend="xla", q_chunk=None)


def attention_packed_vs_split(backend: str, seg_lengths: list[int], pad: int, heads: int,
                              kv_heads: int, head_dim: int, dtype) -> dict[str, Any]:
  """Max |packed − split| of the kernel's output and input gradients, per segment, and the
  packed output against an fp32 XLA reference."""
  from mage_jax.models.attention import attention   # the bare GPU image runs this module: each path imports only what it needs
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
  pad_max = float(jnp.max(jnp.where(real[:, :, None, None], 0.0,
                                    jnp.abs(packed_out.astype(jnp.float32)))))
  tol = 2e-2 if jnp.dtype(dtype) == jnp.bfloat16 else 1e-4
  ok = err_out <= tol and err_grad <= tol and err_ref <= 2 * tol and pad_max == 0.0
  return {"backend": backend, "seq_len": t, "segments": seg_lengths, "dtype": jnp.dtype(dtype).name,
          "max_abs_packed_vs_split_out": err_out, "max_rel_packed_vs_split_grad": err_grad,
          "max_abs_packed_vs_fp32_xla": err_ref, "max_abs_padding_out": pad_max,
          "tolerance_out": tol, "ok": bool(ok)}


def kernel_for(attention: str, gpu: bool) -> str:
  """The flash kernel the preflight checks: the one the steps would use."""
  if attention == "pallas_gpu" or (attention == "auto" and gpu):
    return "pallas_gpu"
  return "pallas_interpret" if attention == "auto" else attention


def run(suite: SuiteRun, *, attention: str = "auto") -> SuiteRun:
  """Versions, then the kernel check; `details["verdict"]` says which attention the later
  sections use. Written after each part."""
  gpu = jax.default_backend() == "gpu"
  info = suite.section("versions", BUDGETS_S["versions"], versions)
  if info is not None and not info["flax_nnx_list"]:
    suite.details["verdict"] = {"fatal": f"flax {info['flax']} has no flax.nnx.List: carry a "
                                         "newer flax (BENCHMARKS.md)"}
    suite.write(complete=True)
    return suite
  kernel = kernel_for(attention, gpu)
  verdict: dict[str, Any] = {"kernel": kernel}
  if kernel == "xla":
    verdict.update(kernel_ok=None, attention="xla", reason="--gpu_attention=xla: no kernel to check")
  else:
    # Three segments and padding, GQA 2:1, head_dim 64: the step's layout at a tiny size.
    shape = ([100, 60, 27], 5, 4, 2, 64, jnp.bfloat16) if gpu else ([20, 9], 3, 2, 1, 16,
                                                                    jnp.float32)
    check = suite.section("kernel_check", BUDGETS_S["kernel_check"],
                          lambda: attention_packed_vs_split(kernel, *shape))
    ok = bool(check and check["ok"])
    error = ("" if check else suite.details["kernel_check"].get("error", "")) or (
        "" if ok else f"numerics out of tolerance: {check}")
    verdict.update(kernel_ok=ok, error=error[:4000],
                   attention=kernel if ok else FALLBACK_ATTENTION)
    suite.add(Row(f"preflight: {kernel} packed fwd+bwd == split and == fp32 XLA",
                  float(ok), "bool", goal="== 1", met=ok, command=CMD, note=error[:120]))
  suite.details["verdict"] = verdict
  print(f"[preflight] verdict: {json.dumps(verdict)[:600]}", flush=True)
  suite.write(complete=True)
  return suite


def read_verdict(path: str) -> dict[str, Any]:
  """The verdict a preflight run wrote to `path`; a missing or unfinished file (the preflight
  crashed or ran out of time) reads as a failed kernel, so the suite never retries it."""
  try:
    with open(path) as f:
      details = json.load(f)["details"]
  except (OSError, ValueError, KeyError) as e:
    return {"kernel_ok": False, "attention": FALLBACK_ATTENTION,
            "error": f"no preflight result at {path} ({type(e).__name__}: {e})"}
  verdict = details.get("verdict")
  if verdict is None:
    where = details.get("section_order", [])
    return {"kernel_ok": False, "attention": FALLBACK_ATTENTION,
            "error": f"preflight {path} did not finish (sections done: {where}): timed out "
                     "or crashed in the kernel check"}
  return verdict
