"""Median-of-N wall-clock timing with warmup excluded.

These machines are noisy, so every figure is a median over repetitions and
every comparison is measured side by side in one run (see BENCHMARKS.md).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Timing:
  """Seconds per call over `reps` timed repetitions (warmup excluded)."""
  median_s: float
  min_s: float
  max_s: float
  reps: int
  warmup: int
  cpu_median_s: float = float("nan")  # process CPU-seconds per call (all threads)

  def as_dict(self) -> dict[str, float | int]:
    return dataclasses.asdict(self)


def block(tree: Any) -> Any:
  """Waits for every array in `tree` (JAX arrays; anything else passes through)."""
  return jax.block_until_ready(tree)


def time_fn(fn: Callable[[], Any], *, reps: int = 5, warmup: int = 1,
            sync: Callable[[Any], Any] = block) -> Timing:
  """Times `fn()` (a thunk); `sync` forces completion of its result.

  The thunk form lets stateful steps (train state threaded through calls)
  keep their own state in a closure, so the harness never holds a donated
  buffer.
  """
  if reps < 1:
    raise ValueError(f"reps must be >= 1, got {reps}")
  for _ in range(warmup):
    sync(fn())
  times = []
  for _ in range(reps):
    start = time.perf_counter()
    sync(fn())
    times.append(time.perf_counter() - start)
  return Timing(median_s=statistics.median(times), min_s=min(times), max_s=max(times),
                reps=reps, warmup=warmup)


def interleaved(fns: dict[str, Callable[[], Any]], *, reps: int = 5, warmup: int = 1,
                syncs: dict[str, Callable[[Any], Any]] | None = None) -> dict[str, Timing]:
  """Times several thunks round-robin so machine noise hits each alike.

  On a shared 2-core machine, load from other processes drifts over seconds;
  alternating A, B, B, A, A, B... makes the ratio of medians robust to that
  drift, where timing all of A then all of B would not be.
  """
  syncs = syncs or {}
  for name, fn in fns.items():
    for _ in range(warmup):
      syncs.get(name, block)(fn())
  times: dict[str, list[float]] = {name: [] for name in fns}
  cpu: dict[str, list[float]] = {name: [] for name in fns}
  order = list(fns)
  for rep in range(reps):
    # A B C, C B A, A B C, ...: no thunk always runs right after the same neighbour.
    for name in (order if rep % 2 == 0 else order[::-1]):
      start_cpu, start = time.process_time(), time.perf_counter()
      syncs.get(name, block)(fns[name]())
      times[name].append(time.perf_counter() - start)
      cpu[name].append(time.process_time() - start_cpu)
  return {name: Timing(median_s=statistics.median(t), min_s=min(t), max_s=max(t),
                       reps=reps, warmup=warmup, cpu_median_s=statistics.median(cpu[name]))
          for name, t in times.items()}


def matmul_ceiling(n: int = 2048, dtype: str = "float32", *, reps: int = 5,
                   warmup: int = 2) -> dict[str, float]:
  """Measured FLOP/s of one jitted n×n×n `jnp` matmul: the device's practical ceiling."""
  key_a, key_b = jax.random.split(jax.random.key(0))
  a = jax.random.normal(key_a, (n, n), dtype=jnp.float32).astype(dtype)
  b = jax.random.normal(key_b, (n, n), dtype=jnp.float32).astype(dtype)
  matmul = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=x.dtype))
  timing = time_fn(lambda: matmul(a, b), reps=reps, warmup=warmup)
  flops = 2.0 * n ** 3
  return {"n": n, "dtype": dtype, "flops": flops, "median_s": timing.median_s,
          "flops_per_s": flops / timing.median_s,
          "best_flops_per_s": flops / timing.min_s}


def compile_seconds(jitted: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, float]:
  """Lower + compile time of a `jax.jit` function for these (possibly abstract) args."""
  start = time.perf_counter()
  lowered = jitted.lower(*args, **kwargs)
  lowered_at = time.perf_counter()
  lowered.compile()
  done = time.perf_counter()
  return {"lower_s": lowered_at - start, "compile_s": done - lowered_at,
          "total_s": done - start}
