"""The GPU suite's main workload: one SFT step of Mage-VL on a packed row with screenshots.

`full` is Mage-VL 4.74B (`MageVLConfig()` defaults == configs/models.py `mage_vl_4b`) on
32,768 tokens = 4 samples x 8,192, each with 3 screenshots of 1280x704 (880 merged tokens,
3,520 patches): bf16 compute, fp32 master weights, one remat policy, chunked
cross-entropy, AdamW, through the project's own train step (bench.lm_step). `small` and
`tiny` are CPU stand-ins that only show the code runs. Imports only jax/flax/optax/numpy.
"""
from __future__ import annotations

import gc
import time
from typing import Any

import jax
import numpy as np

from mage_jax.bench import flops as flops_lib
from mage_jax.bench import lm_step, timing
from mage_jax.models.config import (IMAGE_PAD_ID, VISION_END_ID, VISION_START_ID, MageViTConfig,
                                    MageVLConfig, Qwen3Config)

PATCH, MERGE = 16, 2
SIZES = ("full", "small", "tiny")
# Errors after which another attention backend cannot help (it would only fail again, slower).
NOT_A_KERNEL_FAILURE = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory")

def mage_vl_config(size: str, remat: str, attention: str = "") -> MageVLConfig:
  """Mage-VL at `size` (SIZES); `attention` = the step's attention backend (default:
  pallas_gpu for full, xla for the CPU stand-ins)."""
  if size == "full":
    runtime = dict(param_dtype="float32", compute_dtype="bfloat16",
                   attention_backend=attention or "pallas_gpu", remat_policy=remat)
    return MageVLConfig(text=Qwen3Config(**runtime), vision=MageViTConfig(**runtime))
  runtime = dict(param_dtype="float32", compute_dtype="float32",
                 attention_backend=attention or "xla", remat_policy=remat)
  if size == "small":
    text = Qwen3Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=32, intermediate_size=256, **runtime)
    vision = MageViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=128, out_hidden_size=128, **runtime)
    return MageVLConfig(text=text, vision=vision)
  if size != "tiny":
    raise ValueError(f"gpu suite size {size!r} is not one of {SIZES}")
  # A 512-token vocabulary: the vision ids move inside it (the real ones are ~151k).
  text = Qwen3Config(vocab_size=512, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16, intermediate_size=64, **runtime)
  vision = MageViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=1,
                         intermediate_size=64, out_hidden_size=32, **runtime)
  return MageVLConfig(text=text, vision=vision, image_token_id=511, vision_start_token_id=509,
                      vision_end_token_id=510)


def workload(size: str) -> dict[str, Any]:
  """mage_vl_batch arguments and the loss chunk for `size`."""
  if size == "full":
    return dict(samples=4, tokens_per_sample=8192, images_per_sample=3, image_hw=(704, 1280),
                loss_chunk_size=2048)
  # 3 screenshots of 32x32 px per sample (4 patches, 1 merged token each).
  return dict(samples=2, tokens_per_sample=128 if size == "small" else 64, images_per_sample=3,
              image_hw=(32, 32), loss_chunk_size=256 if size == "small" else 64)


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
          "attention_backend": cfg.text.attention_backend,
          "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
          "bytes_limit": stats.get("bytes_limit")}


def step_with_attention_fallback(size: str, remat: str, attention: str,
                                 batch: dict[str, np.ndarray], reps: int,
                                 loss_chunk_size: int) -> dict[str, Any]:
  """mage_vl_step with `attention`; if that fails for a reason other than memory, once more
  with `xla` in the same run. Both attempts are reported under "attempts"."""
  attempts: list[dict[str, Any]] = []
  backends = [attention] + (["xla"] if attention != "xla" else [])
  for backend in backends:
    try:
      out = mage_vl_step(mage_vl_config(size, remat, backend), batch, reps, loss_chunk_size)
    except Exception as e:  # a kernel that fails to lower/compile: report it, try xla
      error = f"{type(e).__name__}: {e}"
      attempts.append({"attention": backend, "ok": False, "error": error[:4000]})
      print(f"[mage_vl_step] attention={backend} FAILED: {error[:500]}", flush=True)
      gc.collect()  # drop the failed attempt's state before the next one allocates its own
      if any(s in error for s in NOT_A_KERNEL_FAILURE) or backend == backends[-1]:
        raise RuntimeError(f"Mage-VL step failed with attention {[a['attention'] for a in attempts]}"
                           f": {error[:2000]}") from e
      print(f"[mage_vl_step] retrying once with attention=xla", flush=True)
      continue
    attempts.append({"attention": backend, "ok": True})
    return dict(out, attempts=attempts)
  raise AssertionError("unreachable")


