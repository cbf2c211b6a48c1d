"""The GPU suite: `python -m launch.bench --suite=gpu`, one script, < 5 minutes on an H100/H200.

Imports only jax, flax, optax, numpy and the standard library (checked by
tests/test_bench.py with torch/PIL/grain/tokenizers/ml_collections blocked), so
it runs on a bare JAX+CUDA image with no internet. Sections:

1. bf16 matmul ceiling (chained 8192³ matmuls in one jit);
2. packed attention == split attention on the GPU flash kernel (`pallas_gpu`),
   forward and gradients, plus the packed output against an fp32 XLA reference;
   The step's batch layout also reports how many tiles our kernel's block
   skipping visits vs a kernel that does not skip (a pure jnp count);
3. the SFT step of the full Mage-VL (4.74B; `MageVLConfig()` defaults equal
   configs/models.py `mage_vl_4b`) on one packed row of 32,768 tokens = 4 samples
   × 8,192 tokens, each with 3 screenshots of 1280×704 (880 merged tokens, 3,520
   patches each): bf16 compute, fp32 master weights, one fixed remat policy, the
   segment-aware flash kernel, chunked cross-entropy, AdamW. Reports step time,
   tokens/s, MFU (6·N·D, and with attention) against 989 TFLOP/s and against the
   measured ceiling, and peak device memory.

Without a GPU the same code runs on CPU with a small config (`size="small"`,
XLA attention for the step, the Pallas kernel in interpret mode for the check)
and every row is labelled "cpu-fallback": those figures say the script works,
not how fast anything is.
"""
from __future__ import annotations

import time
import traceback
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from mage_jax.bench import flops as flops_lib
from mage_jax.bench import lm_step, timing
from mage_jax.bench.results import Row, goal_row
from mage_jax.models.config import (IMAGE_PAD_ID, VISION_END_ID, VISION_START_ID, MageViTConfig,
                                    MageVLConfig, Qwen3Config)

CMD = "python -m launch.bench --suite=gpu"
DATASHEET_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16
PATCH, MERGE = 16, 2


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


# -------------------------------------------------------------------------- 3. Mage-VL step


def mage_vl_config(size: str, remat: str) -> MageVLConfig:
  """Full Mage-VL 4B (== configs/models.py mage_vl_4b) or the small CPU fallback."""
  if size == "full":
    runtime = dict(param_dtype="float32", compute_dtype="bfloat16",
                   attention_backend="pallas_gpu", remat_policy=remat)
    return MageVLConfig(text=Qwen3Config(**runtime), vision=MageViTConfig(**runtime))
  runtime = dict(param_dtype="float32", compute_dtype="float32", attention_backend="xla",
                 remat_policy=remat)
  text = Qwen3Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=32, intermediate_size=256, **runtime)
  vision = MageViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128, out_hidden_size=128, **runtime)
  return MageVLConfig(text=text, vision=vision)


def image_patch_positions(height: int, width: int) -> np.ndarray:
  """(t, h, w) per patch in 2×2 merge-block order (DESIGN.md), as `data.images.patchify`."""
  gh, gw = height // PATCH, width // PATCH
  hh = np.arange(gh).reshape(gh // MERGE, 1, MERGE, 1)
  ww = np.arange(gw).reshape(1, gw // MERGE, 1, MERGE)
  hh, ww = np.broadcast_arrays(hh, ww)
  return np.stack([np.zeros(gh * gw, np.int64), hh.reshape(-1), ww.reshape(-1)],
                  axis=1).astype(np.int32)


def mage_vl_batch(samples: int, tokens_per_sample: int, images_per_sample: int,
                  image_hw: tuple[int, int], seed: int = 0) -> dict[str, np.ndarray]:
  """One packed row (ARCHITECTURE.md layout): samples back to back, images spread through
  each sample's prompt, the last quarter of each sample trained."""
  rng = np.random.default_rng(seed)
  h, w = image_hw
  pos_one = image_patch_positions(h, w)
  per_image = pos_one.shape[0]
  merged = per_image // MERGE ** 2
  t = samples * tokens_per_sample
  tokens, mask, segs, pos = [], [], [], []
  rows_ids, rows_pos = [], []
  image_id = 0
  for s in range(samples):
    text_len = tokens_per_sample - images_per_sample * (merged + 2)
    if text_len < images_per_sample + 8:
      raise ValueError(f"{tokens_per_sample} tokens cannot hold {images_per_sample} images of "
                       f"{merged} tokens")
    chunks = np.array_split(rng.integers(0, 150_000, text_len).astype(np.int32),
                            images_per_sample + 1)
    parts = [chunks[0]]
    for i in range(images_per_sample):
      image_id += 1
      parts += [np.array([VISION_START_ID], np.int32), np.full(merged, IMAGE_PAD_ID, np.int32),
                np.array([VISION_END_ID], np.int32), chunks[i + 1]]
      rows_ids.append(np.full(per_image, image_id, np.int32))
      rows_pos.append(pos_one)
    seq = np.concatenate(parts)
    trained = np.zeros(tokens_per_sample, np.float32)
    trained[-tokens_per_sample // 4:-1] = 1.0  # labels at slot i are token i+1 of the sample
    tokens.append(seq)
    mask.append(trained)
    segs.append(np.full(tokens_per_sample, s + 1, np.int32))
    pos.append(np.arange(tokens_per_sample, dtype=np.int32))
  tokens_row = np.concatenate(tokens)
  seg_row = np.concatenate(segs)
  targets = np.where(np.roll(seg_row, -1) == seg_row, np.roll(tokens_row, -1), 0).astype(np.int32)
  targets[-1] = 0
  patch_ids = np.concatenate(rows_ids)
  batch = {
      "tokens": tokens_row, "targets": targets, "loss_mask": np.concatenate(mask),
      "segment_ids": seg_row, "positions": np.concatenate(pos),
      "patches": rng.integers(0, 256, (patch_ids.shape[0], 768), dtype=np.uint8),
      "patch_image_ids": patch_ids, "patch_positions": np.concatenate(rows_pos),
  }
  assert batch["tokens"].shape == (t,)
  return {k: v[None] for k, v in batch.items()}


def mage_vl_step(cfg: MageVLConfig, batch: dict[str, np.ndarray], reps: int,
                 loss_chunk_size: int) -> dict[str, Any]:
  from mage_jax.models.mage_vl import MageVL
  factory = lambda rngs: MageVL(cfg, rngs=rngs)
  phases = {}
  start = time.perf_counter()
  runner = lm_step.make_runner(factory, batch, loss_chunk_size=loss_chunk_size)
  jax.block_until_ready(runner.state)
  phases["init_s"] = time.perf_counter() - start
  start = time.perf_counter()
  jax.block_until_ready(runner())
  phases["first_step_s"] = time.perf_counter() - start  # compile + one step
  t = timing.time_fn(runner, reps=reps, warmup=1)
  metrics = {k: float(v) for k, v in runner.last_metrics.items() if np.ndim(v) == 0}
  seg_lengths = [int(n) for n in np.bincount(batch["segment_ids"][0])[1:]]
  ids = batch["patch_image_ids"][0]
  image_patches = [int(n) for n in np.bincount(ids)[1:]]
  f = flops_lib.mage_vl_step_flops(cfg, seg_lengths, image_patches)
  stats = jax.devices()[0].memory_stats() or {}
  return {"timing": t.as_dict(), "phases": phases, "flops": f, "metrics": metrics,
          "tokens": int(batch["tokens"].size), "patches": int((ids != 0).sum()),
          "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
          "bytes_limit": stats.get("bytes_limit")}


# ------------------------------------------------------------------------------------ run


def _section(details: dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
  """Runs one section; a failure is recorded (and printed) and the others still run."""
  start = time.perf_counter()
  print(f"[{name}] ...", flush=True)
  try:
    out = fn()
    details[name] = out
    print(f"[{name}] done in {time.perf_counter() - start:.1f}s", flush=True)
    return out
  except Exception as e:  # a benchmark reports a broken section instead of dying
    details[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    print(f"[{name}] FAILED: {type(e).__name__}: {e}")
    return None
  finally:
    details.setdefault("section_seconds", {})[name] = time.perf_counter() - start


def run(*, size: str = "auto", remat: str = "full", reps: int = 3) -> tuple[list[Row], dict]:
  gpu = on_gpu()
  if size == "auto":
    size = "full" if gpu else "small"
  label = (f"device: {jax.devices()[0].device_kind}" if gpu else
           "cpu-fallback: no GPU found; small config, figures only show that the script runs")
  tag = "" if gpu else " [cpu-fallback]"
  details: dict[str, Any] = {"label": label, "size": size, "remat": remat, "gpu": gpu}
  rows: list[Row] = []
  reps = max(1, min(reps, 3))

  ceil = _section(details, "matmul_ceiling", lambda: matmul_ceiling(
      8192 if gpu else 512, chain=8 if gpu else 2, reps=5 if gpu else 2))
  if ceil:
    rows.append(Row(f"bf16 matmul ceiling {ceil['n']}^3{tag}", ceil["flops_per_s"] / 1e12,
                    "TFLOP/s", command=CMD, note=f"datasheet {DATASHEET_BF16_FLOPS / 1e12:g}"))

  if gpu:
    att = _section(details, "attention_check", lambda: attention_packed_vs_split(
        "pallas_gpu", [2500, 1000, 500], 96, 32, 8, 128, jnp.bfloat16))
  else:
    att = _section(details, "attention_check", lambda: attention_packed_vs_split(
        "pallas_interpret", [40, 64, 17], 7, 2, 1, 32, jnp.float32))
  rows.append(Row(f"packed == split attention ({'pallas_gpu' if gpu else 'pallas_interpret'}){tag}",
                  float(bool(att and att["ok"])), "bool", goal="== 1",
                  met=bool(att and att["ok"]), command=CMD,
                  note="" if att else details["attention_check"]["error"][:120]))

  cfg = mage_vl_config(size, remat)
  if size == "full":
    batch = mage_vl_batch(samples=4, tokens_per_sample=8192, images_per_sample=3,
                          image_hw=(704, 1280))
  else:
    # 3 screenshots of 32x32 px per sample (4 patches, 1 merged token each): the real vocab
    # (<|image_pad|> is 151655) keeps the LM head the dominant cost, so keep rows short.
    batch = mage_vl_batch(samples=2, tokens_per_sample=128, images_per_sample=3, image_hw=(32, 32))
  details["batch"] = {"shape": {k: list(v.shape) for k, v in batch.items()},
                      "images_per_sample": 3}
  skip = _section(details, "flash_block_skipping", lambda: flash_block_skipping(batch))
  if skip:
    for part, what in (("lm", "LM causal"), ("vit", "ViT per-image")):
      c = skip[part]
      rows.append(Row(f"flash tiles visited vs dense, {what} fwd{tag}",
                      100 * c["fwd"] / c["fwd_dense"], "%", command=CMD,
                      note=f"{c['fwd']} of {c['fwd_dense']} tiles; bwd dq "
                           f"{100 * c['dq'] / c['dq_dense']:.0f}%, dkv "
                           f"{100 * c['dkv'] / c['dkv_dense']:.0f}%"))
  step = _section(details, "mage_vl_step", lambda: mage_vl_step(
      cfg, batch, reps, loss_chunk_size=2048 if size == "full" else 256))
  if step:
    s = step["timing"]["median_s"]
    f = step["flops"]
    name = "Mage-VL 4B" if size == "full" else "Mage-VL small"
    rows += [
        Row(f"{name} SFT step, {step['tokens']} tokens (median){tag}", s, "s", command=CMD,
            note=f"remat={remat}, {step['patches']} patches, compile+1st {step['phases']['first_step_s']:.0f}s"),
        Row(f"{name} tokens/s{tag}", step["tokens"] / s, "tok/s", command=CMD),
    ]
    for kind, fl in (("6N", f["six_n_d"]), ("6N+attn", f["total"])):
      achieved = fl / s
      if gpu:
        rows.append(goal_row(f"MFU {kind} vs 989 TFLOP/s", 100 * achieved / DATASHEET_BF16_FLOPS,
                             "%", 50, command=CMD))
      if ceil:
        rows.append(Row(f"MFU {kind} vs measured ceiling{tag}",
                        100 * achieved / ceil["flops_per_s"], "%", command=CMD))
    if step["peak_bytes_in_use"] is not None:
      rows.append(Row(f"peak device memory{tag}", step["peak_bytes_in_use"] / 2 ** 30, "GiB",
                      command=CMD))
  else:
    rows.append(Row(f"Mage-VL SFT step{tag}", float("nan"), "s", goal="runs", met=False,
                    command=CMD, note=details["mage_vl_step"]["error"][:120]))
  return rows, details
