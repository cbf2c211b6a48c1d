"""The CPU suite (`make bench`): ratios measured side by side in one run.

1. train step vs PyTorch (HF transformers Qwen3ForCausalLM, eager and
   torch.compile; the faster is the baseline), same config/batch/loss/AdamW;
2. step efficiency = (model FLOPs / step time) / (2048³ fp32 matmul FLOP/s),
   with the matmul timed *inside the same interleaved loop* as the step so both
   see the same machine load;
3. data path (read, render+pack, fill) from the data modules;
4. compile time of the train step for the tiny and small configs;
5. one RL (GRPO) update vs one SFT step on the same model and batch;
6. the learning proof's student update throughput, full vs compact vocabulary, SFT and RL (student_bench),
   and its engine decode, expanded params as they are vs on their distinct rows (decode_bench).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from mage_jax.bench import lm_step, timing
from mage_jax.bench.results import Row, goal_row
from mage_jax.models.config import Qwen3Config
from mage_jax.train import flops as flops_lib

CMD = "python -m launch.bench --suite=cpu"


def _matmul_thunk(n: int) -> tuple[Callable[[], Any], float]:
  a = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
  b = jax.random.normal(jax.random.key(2), (n, n), jnp.float32)
  mm = jax.jit(jnp.matmul)
  return (lambda: mm(a, b)), 2.0 * n ** 3


def train_step_vs_torch(cfg: Qwen3Config, *, batch_size: int, seq_len: int, reps: int,
                        torch_modes: tuple[str, ...], threads: int, matmul_n: int = 2048,
                        loss_chunk_size: int = 1024) -> tuple[list[Row], dict[str, Any]]:
  """Rows 1 and 2: ours vs torch, and our step efficiency vs the matmul ceiling."""
  batch = lm_step.packed_batch(batch_size, seq_len, None, cfg.vocab_size)
  runner = lm_step.make_runner(lm_step.qwen3_factory(cfg), batch, loss_chunk_size=loss_chunk_size)
  start = time.perf_counter()
  jax.block_until_ready(runner())  # first call: compile + run
  ours_first_s = time.perf_counter() - start
  thunks: dict[str, Callable[[], Any]] = {"ours_jax_jit": runner}
  syncs: dict[str, Callable[[Any], Any]] = {}
  details: dict[str, Any] = {"ours_first_call_s": ours_first_s, "torch_first_call_s": {}}
  if torch_modes:
    from mage_jax.bench import torch_baseline  # torch only on the CPU suite's path
    for mode in torch_modes:
      step = torch_baseline.make_step(cfg, batch, compile_mode=mode, threads=threads)
      details["torch_first_call_s"][mode] = torch_baseline.first_call_seconds(step)
      thunks[f"torch_{mode}"] = step
      syncs[f"torch_{mode}"] = lambda x: x  # torch CPU ops are synchronous
  mm, mm_flops = _matmul_thunk(matmul_n)
  thunks["matmul"] = mm
  times = timing.interleaved(thunks, reps=reps, warmup=1, syncs=syncs)
  ours = times["ours_jax_jit"].median_s
  step_flops = flops_lib.batch_flops(cfg, batch, loss_chunk_size=loss_chunk_size)
  ceiling = mm_flops / times["matmul"].median_s
  achieved = step_flops["flops_model"] / ours
  details.update(
      config={k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
      batch_size=batch_size, seq_len=seq_len, threads=threads,
      timings={k: t.as_dict() for k, t in times.items()}, step_flops=step_flops,
      matmul={"n": matmul_n, "flops_per_s": ceiling}, achieved_flops_per_s=achieved,
      final_loss=float(runner.last_metrics["loss"]))
  rows = [Row("ours: train step (median)", ours, "s", command=CMD,
              note=f"{batch_size}x{seq_len} tokens, fp32, jax.jit; "
                   f"{times['ours_jax_jit'].cpu_median_s:.3g} CPU-s")]
  if torch_modes:
    torch_times = {m: times[f"torch_{m}"].median_s for m in torch_modes}
    best = min(torch_times, key=torch_times.get)
    for m, t in torch_times.items():
      rows.append(Row(f"torch {m}: train step (median)", t, "s", command=CMD,
                      note=f"HF transformers Qwen3ForCausalLM, {threads} threads; "
                           f"{times[f'torch_{m}'].cpu_median_s:.3g} CPU-s"))
    details["torch_baseline_mode"] = best
    min_ratio = times[f"torch_{best}"].min_s / times["ours_jax_jit"].min_s
    rows.append(goal_row(f"speedup ours vs torch ({best}, the faster)", torch_times[best] / ours,
                         "x", 1.2, command=CMD,
                         note=f"ratio of medians; ratio of best times {min_ratio:.3g}"))
  rows += [
      Row(f"matmul ceiling {matmul_n}^3 fp32 (median)", ceiling / 1e9, "GFLOP/s", command=CMD),
      Row("ours: achieved model FLOP/s", achieved / 1e9, "GFLOP/s", command=CMD,
          note="6*N*D + causal attention"),
      goal_row("step efficiency vs matmul ceiling", 100 * achieved / ceiling, "%", 50,
               command=CMD),
  ]
  return rows, details


def compile_times(configs: dict[str, tuple[Qwen3Config, int, int]]) -> tuple[list[Row], dict]:
  """Lower+compile seconds of the real jitted train step, per config (batch, seq)."""
  rows, details = [], {}
  for name, (cfg, batch_size, seq_len) in configs.items():
    batch = lm_step.packed_batch(batch_size, seq_len, None, cfg.vocab_size)
    step_fn, _, abstract, device_batch = lm_step.build_step(lm_step.qwen3_factory(cfg), batch)
    t = timing.compile_seconds(step_fn, abstract, device_batch)
    details[name] = t
    rows.append(Row(f"compile time: train step, {name} config", t["total_s"], "s",
                    command=CMD, note=f"lower {t['lower_s']:.1f}s + compile {t['compile_s']:.1f}s"))
  return rows, details


def data_path(*, read_bins: int, read_batches: int, episodes: int,
              fill_samples: int) -> tuple[list[Row], dict]:
  from mage_jax.bench import data_bench   # the bare GPU image runs this module: each path imports only what it needs
  read = data_bench.read_throughput(num_bins=read_bins, num_batches=read_batches)
  rp = data_bench.render_pack_throughput(episodes=episodes)
  fill = data_bench.fill(fill_samples)
  rows = [
      goal_row("data: packed ArrayRecord -> host batch, tokens/s per core",
               read["slot_tokens_per_cpu_s"], "tok/s", 100_000, command=CMD,
               note=f"slot tokens per CPU-second; real (non-pad) {read['real_tokens_per_cpu_s']:.3g}"),
      Row("data: render+pack, samples/s per core", rp["samples_per_cpu_s"], "samples/s",
          command=CMD, note=f"{rp['samples']} synthetic samples, wall {rp['samples_per_s']:.3g}/s"),
      goal_row("data: packing token fill (stage-4-like)", 100 * fill["token_fill"], "%", 97,
               command=CMD, note=f"{fill['samples']} samples, 32,768-token bins"),
  ]
  return rows, {"read": read, "render_pack": rp, "fill": fill}


def run(*, reps: int = 5, torch_compile: bool = True, with_data: bool = True,
        quick: bool = False, threads: int | None = None) -> tuple[list[Row], dict[str, Any]]:
  """The whole suite. `quick`: tiny config and short loops (tests, smoke runs)."""
  threads = threads or os.cpu_count() or 1
  modes = ("eager", "compile") if torch_compile else ("eager",)
  rows: list[Row] = []
  details: dict[str, Any] = {"reps": reps, "threads": threads, "quick": quick}
  if quick:
    cfg, b, t, mm_n = lm_step.TINY, 2, 64, 256
  else:
    cfg, b, t, mm_n = lm_step.SMALL, 4, 512, 2048
  print(f"[train step vs torch] {t}x{b} tokens, torch modes {modes}, {reps} reps ...", flush=True)
  r, details["train_step"] = train_step_vs_torch(cfg, batch_size=b, seq_len=t, reps=reps,
                                                 torch_modes=modes, threads=threads,
                                                 matmul_n=mm_n)
  rows += r
  comp = {"tiny": (lm_step.TINY, 2, 64)}
  if not quick:
    comp["small"] = (lm_step.SMALL, 4, 512)
  print(f"[compile times] {list(comp)} ...", flush=True)
  r, details["compile"] = compile_times(comp)
  rows += r
  print("[RL update vs SFT step] ...", flush=True)
  from mage_jax.bench import rl_bench   # the bare GPU image runs this module: each path imports only what it needs
  r, details["rl"] = rl_bench.rl_update_vs_sft(cfg, batch_size=b, seq_len=t, reps=reps)
  rows += r
  print("[student update throughput: full vs compact vocabulary] ...", flush=True)
  from mage_jax.bench import student_bench   # the bare GPU image runs this module: each path imports only what it needs
  vocab_ids = student_bench.proof_vocabulary(200 if quick else 1_000)
  r, details["student"] = (student_bench.student_throughput(vocab_ids, batch_size=2, seq_len=128, reps=2)
                           if quick else student_bench.student_throughput(vocab_ids, reps=reps))
  rows += r
  print("[student engine decode: expanded vs on its distinct rows] ...", flush=True)
  from mage_jax.bench import decode_bench   # the bare GPU image runs this module: each path imports only what it needs
  r, details["student_decode"] = (decode_bench.student_decode(vocab_ids, max_len=256, reps=2) if quick
                                  else decode_bench.student_decode(vocab_ids))
  rows += r
  if with_data:
    kw = (dict(read_bins=4, read_batches=2, episodes=4, fill_samples=500) if quick else
          dict(read_bins=16, read_batches=12, episodes=16, fill_samples=20_000))
    print("[data path] ...", flush=True)
    r, details["data"] = data_path(**kw)
    rows += r
  return rows, details
