"""The GPU suite's main workload: one SFT step of Mage-VL on a packed row with screenshots.

`full` is Mage-VL 4.74B (`MageVLConfig()` defaults == configs/models.py `mage_vl_4b`) on
32,768 tokens = 4 samples x 8,192, each with 3 screenshots of 1280x704 (880 merged tokens,
3,520 patches): bf16 compute, fp32 master weights, one remat policy, chunked
cross-entropy, AdamW, through the project's own train step (bench.lm_step). `mid` keeps
the full widths (vocabulary, hidden sizes, heads) with 4 LM and 4 ViT layers on 8,192
tokens = 2 samples x 4,096 with one screenshot each: the ladder's rung between a toy and
the full step. `small` and `tiny` are CPU stand-ins that only show the code runs.
Imports only jax/flax/optax/numpy.

Every config promises its packing's segment bounds (`max_segment_len`: tokens per sample
for the LM, patches per image for the ViT), so the "xla" attention fallback attends within
segments rather than over the whole 32k row or all 42k patches (models/attention.py).
"""
from __future__ import annotations

import gc
import re
import time
from typing import Any, Callable

import jax
import numpy as np

from mage_jax.bench import lm_step, timing
from mage_jax.models.config import (IMAGE_PAD_ID, VISION_END_ID, VISION_START_ID, MageViTConfig,
                                    MageVLConfig, Qwen3Config)
from mage_jax.train import flops as flops_lib

PATCH, MERGE = 16, 2
SIZES = ("full", "mid", "small", "tiny")
# An allocation failure, recognised by the allocator's own message only (another attention
# backend cannot help). Other RESOURCE_EXHAUSTED errors, e.g. Triton's "out of resource:
# shared memory", are kernel failures: the fallback backend may well run.
OUT_OF_MEMORY = re.compile(
    r"Out of memory while trying to allocate|out of memory allocating|ran out of memory "
    r"trying to allocate|Failed to allocate request for|CUDA_ERROR_OUT_OF_MEMORY")


def is_out_of_memory(error: str) -> bool:
  return bool(OUT_OF_MEMORY.search(error))


def workload(size: str) -> dict[str, Any]:
  """mage_vl_batch arguments and the loss chunk for `size`."""
  if size == "full":
    return dict(samples=4, tokens_per_sample=8192, images_per_sample=3, image_hw=(704, 1280),
                loss_chunk_size=2048)
  if size == "mid":
    return dict(samples=2, tokens_per_sample=4096, images_per_sample=1, image_hw=(704, 1280),
                loss_chunk_size=2048)
  if size not in SIZES:
    raise ValueError(f"gpu suite size {size!r} is not one of {SIZES}")
  # 3 screenshots of 32x32 px per sample (4 patches, 1 merged token each); the loss chunk
  # is below the row so the chunked head (and its head-token count) is exercised.
  return dict(samples=2, tokens_per_sample=128 if size == "small" else 64, images_per_sample=3,
              image_hw=(32, 32), loss_chunk_size=64 if size == "small" else 32)


def segment_bounds(size: str) -> tuple[int, int]:
  """(longest LM segment, most patches per image) of `size`'s packing."""
  work = workload(size)
  h, w = work["image_hw"]
  return work["tokens_per_sample"], (h // PATCH) * (w // PATCH)


def mage_vl_config(size: str, remat: str, attention: str = "") -> MageVLConfig:
  """Mage-VL at `size` (SIZES); `attention` = the step's attention backend (default:
  pallas_gpu for full and mid, xla for the CPU stand-ins)."""
  text_bound, vision_bound = segment_bounds(size)
  if size in ("full", "mid"):
    runtime = dict(param_dtype="float32", compute_dtype="bfloat16",
                   attention_backend=attention or "pallas_gpu", remat_policy=remat)
    layers = {} if size == "full" else {"num_hidden_layers": 4}
    return MageVLConfig(text=Qwen3Config(**runtime, **layers, max_segment_len=text_bound),
                        vision=MageViTConfig(**runtime, **layers, max_segment_len=vision_bound))
  runtime = dict(param_dtype="float32", compute_dtype="float32",
                 attention_backend=attention or "xla", remat_policy=remat)
  if size == "small":
    text = Qwen3Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=32, intermediate_size=256,
                       max_segment_len=text_bound, **runtime)
    vision = MageViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=128, out_hidden_size=128,
                           max_segment_len=vision_bound, **runtime)
    return MageVLConfig(text=text, vision=vision)
  # A 512-token vocabulary: the vision ids move inside it (the real ones are ~151k).
  text = Qwen3Config(vocab_size=512, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16, intermediate_size=64,
                     max_segment_len=text_bound, **runtime)
  vision = MageViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=1,
                         intermediate_size=64, out_hidden_size=32, max_segment_len=vision_bound,
                         **runtime)
  return MageVLConfig(text=text, vision=vision, image_token_id=511, vision_start_token_id=509,
                      vision_end_token_id=510)


def image_patch_positions(height: int, width: int) -> np.ndarray:
  """(t, h, w) per patch in 2×2 merge-block order (DESIGN.md), as `data.images.patchify`."""
  gh, gw = height // PATCH, width // PATCH
  hh = np.arange(gh).reshape(gh // MERGE, 1, MERGE, 1)
  ww = np.arange(gw).reshape(1, gw // MERGE, 1, MERGE)
  hh, ww = np.broadcast_arrays(hh, ww)
  return np.stack([np.zeros(gh * gw, np.int64), hh.reshape(-1), ww.reshape(-1)],
                  axis=1).astype(np.int32)


def mage_vl_batch(samples: int, tokens_per_sample: int, images_per_sample: int,
                  image_hw: tuple[int, int], seed: int = 0,
                  cfg: MageVLConfig | None = None) -> dict[str, np.ndarray]:
  """One packed row (ARCHITECTURE.md layout): samples back to back, images spread through
  each sample's prompt, the last quarter of each sample trained. Text ids are drawn below
  the vision ids of `cfg` (default: the real vocabulary's)."""
  start_id, pad_id, end_id = ((cfg.vision_start_token_id, cfg.image_token_id,
                               cfg.vision_end_token_id) if cfg else
                              (VISION_START_ID, IMAGE_PAD_ID, VISION_END_ID))
  text_vocab = min(150_000, start_id, pad_id, end_id)
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
    chunks = np.array_split(rng.integers(0, text_vocab, text_len).astype(np.int32),
                            images_per_sample + 1)
    parts = [chunks[0]]
    for i in range(images_per_sample):
      image_id += 1
      parts += [np.array([start_id], np.int32), np.full(merged, pad_id, np.int32),
                np.array([end_id], np.int32), chunks[i + 1]]
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
                 loss_chunk_size: int,
                 progress: Callable[..., None] = lambda **_: None) -> dict[str, Any]:
  """One SFT step's timings, FLOPs and memory; `progress(**phase_seconds)` is called as each
  phase (init, compile + first step) ends, so a run cut off mid-step still says how far it got."""
  from mage_jax.models.mage_vl import MageVL   # the bare GPU image runs this module: each path imports only what it needs
  factory = lambda rngs: MageVL(cfg, rngs=rngs)
  phases: dict[str, float] = {}
  progress(attention=cfg.text.attention_backend, phase="init")
  start = time.perf_counter()
  runner = lm_step.make_runner(factory, batch, loss_chunk_size=loss_chunk_size)
  jax.block_until_ready(runner.state)
  phases["init_s"] = time.perf_counter() - start
  progress(phase="compile", **phases)
  start = time.perf_counter()
  jax.block_until_ready(runner())
  phases["first_step_s"] = time.perf_counter() - start  # compile + one step
  progress(phase="timed steps", **phases)
  t = timing.time_fn(runner, reps=reps, warmup=1)
  metrics = {k: float(v) for k, v in runner.last_metrics.items() if np.ndim(v) == 0}
  ids = batch["patch_image_ids"][0]
  # The trainer's own accounting (train/loop.py makes the same call per step).
  f = flops_lib.batch_flops(cfg, batch, loss_chunk_size=loss_chunk_size)
  stats = jax.devices()[0].memory_stats() or {}
  return {"timing": t.as_dict(), "phases": phases, "flops": f, "metrics": metrics,
          "tokens": int(batch["tokens"].size), "patches": int((ids != 0).sum()),
          "attention_backend": cfg.text.attention_backend,
          "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
          "bytes_limit": stats.get("bytes_limit")}


class StepFailed(RuntimeError):
  """Every attempt of a step failed; `attempts` says how (attention backend, error)."""

  def __init__(self, message: str, attempts: list[dict[str, Any]]):
    super().__init__(message)
    self.attempts = attempts


def _attempt(run: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
  """(result, "") or (None, the error as text). Only text leaves: the exception, its
  traceback and the frames holding the failed runner's state die with this call."""
  try:
    return run(), ""
  except Exception as e:  # a kernel that fails to lower/compile/run: reported, maybe retried
    return None, f"{type(e).__name__}: {e}"


def free_device_memory() -> int:
  """Collect what a failed attempt left (its state, compiled step) and return the bytes of
  device arrays still alive."""
  gc.collect()
  jax.clear_caches()
  gc.collect()
  return int(sum(a.nbytes for a in jax.live_arrays()))


def step_with_attention_fallback(size: str, remat: str, attention: str, fallback: str,
                                 batch: dict[str, np.ndarray], reps: int, loss_chunk_size: int,
                                 progress: Callable[..., None] = lambda **_: None
                                 ) -> dict[str, Any]:
  """mage_vl_step with `attention`; if that fails other than by running out of memory, the
  failed attempt's memory is freed and the step runs once more with `fallback` ("" = no
  retry). Every attempt is reported under "attempts"; StepFailed when none ran."""
  attempts: list[dict[str, Any]] = []
  backends = [attention] + ([fallback] if fallback and fallback != attention else [])
  for backend in backends:
    cfg = mage_vl_config(size, remat, backend)
    out, error = _attempt(lambda: mage_vl_step(cfg, batch, reps, loss_chunk_size, progress))
    if not error:
      attempts.append({"attention": backend, "ok": True})
      return dict(out, attempts=attempts)
    oom = is_out_of_memory(error)
    attempts.append({"attention": backend, "ok": False, "out_of_memory": oom,
                     "error": error[:4000], "live_bytes_after_free": free_device_memory()})
    print(f"[mage_vl_step] attention={backend} FAILED{' (out of memory)' if oom else ''}: "
          f"{error[:500]}", flush=True)
    if oom or backend == backends[-1]:
      raise StepFailed(f"Mage-VL step failed with attention {[a['attention'] for a in attempts]}"
                       f": {error[:2000]}", attempts)
    print(f"[mage_vl_step] retrying once with attention={backends[-1]}", flush=True)
  raise AssertionError("unreachable")
