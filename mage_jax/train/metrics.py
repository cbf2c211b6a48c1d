"""Training metrics: console progress line, JSONL + TensorBoard events,
MFU per logging interval, the run manifest and the profiler window.

MFU = achieved FLOPs/s ÷ (peak FLOPs/s per device × devices), reported both
for the paper's 6·N accounting (`mfu_6n`) and with attention, head and ViT
(`mfu_total`), and as the matmul FLOPs really executed (`mfu_model`: no
embedding lookup, which dominates N for tiny models). The peak is `log.peak_tflops_per_device`,
the table below, or (when neither applies, e.g. on CPU) measured: a large jitted matmul, best of
several runs, cached per machine in ~/.cache/mage_jax/peak_tflops.json ($MAGE_JAX_CACHE overrides
the folder; the cache keeps the best rate ever measured there). A measurement taken on a busy
machine can still fall short of what a training step reaches, so the logger also raises the peak
to the highest executed-matmul rate it has seen (an achieved rate is a lower bound of the true
peak): `mfu_model` never exceeds 100%. `mfu_6n` / `mfu_total` count FLOPs that are not executed
(the embedding gather) and can exceed 100% for tiny models; the console prints the 6N figure
only when it is physically possible, the logs keep it as is.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# bf16 dense peaks (TFLOP/s per device) for known accelerators.
KNOWN_PEAKS = {"H200": 989.0, "H100": 989.0, "B200": 2250.0, "A100": 312.0}


def device_peak_tflops(configured: float = 0.0) -> tuple[float, str]:
  """(peak TFLOP/s per device, how it was obtained)."""
  if configured > 0:
    return configured, "config"
  kind = jax.devices()[0].device_kind
  for name, peak in KNOWN_PEAKS.items():
    if name in kind:
      return peak, f"table ({kind})"
  peak, cached = cached_matmul_tflops()
  return peak, f"measured matmul ({kind}{', cached' if cached else ''})"


def _cache_file() -> str:
  folder = os.environ.get("MAGE_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mage_jax")
  return os.path.join(folder, "peak_tflops.json")


def cached_matmul_tflops() -> tuple[float, bool]:
  """(the best matmul TFLOP/s measured on this machine, whether it came from the cache)."""
  dev = jax.devices()[0]
  key = f"{platform.node()}|{dev.platform}|{dev.device_kind}|cpus={os.cpu_count()}|jax={jax.__version__}"
  path = _cache_file()
  try:
    with open(path) as f:
      table = json.load(f)
  except (OSError, ValueError):
    table = {}
  if isinstance(table.get(key), (int, float)) and table[key] > 0:
    return float(table[key]), True
  table[key] = measure_matmul_tflops()
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump(table, f, indent=1)
    os.replace(tmp, path)
  except OSError:  # a read-only home: measure again next time
    pass
  return table[key], False


def measure_matmul_tflops(n: int | None = None, repeats: int = 5) -> float:
  """Best achieved TFLOP/s of an n×n fp32 (CPU) / bf16 (GPU) matmul on one device, over
  `repeats` runs. Large by default (2048 on CPU: a 512 matmul reached half of what a tiny
  model's training step does, so MFU read 180%)."""
  dev = jax.devices()[0]
  on_cpu = dev.platform == "cpu"
  n = n or (2048 if on_cpu else 8192)
  dtype = jnp.float32 if on_cpu else jnp.bfloat16
  a = jax.device_put(jnp.ones((n, n), dtype), dev)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2.0 * n ** 3 / best / 1e12


class Logger:
  """Aggregates per-step host metrics, prints a progress line every interval and
  writes metrics.jsonl (+ TensorBoard) on process 0."""

  def __init__(self, workdir: str, *, total_steps: int, every_steps: int, peak_tflops: float,
               num_devices: int, tensorboard: bool = True):
    self.workdir = workdir
    self.total_steps = total_steps
    self.every = max(1, every_steps)
    self.peak = peak_tflops * 1e12 * num_devices
    self.num_devices = num_devices
    self.peak_raised = False  # the peak was raised to an executed rate the step reached
    self.primary = jax.process_index() == 0
    self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a") if self.primary else None
    self._tb = None
    if self.primary and tensorboard:
      from tensorboardX import SummaryWriter   # optional logger, only with log.tensorboard
      self._tb = SummaryWriter(os.path.join(workdir, "tb"))
    self._reset(time.perf_counter())

  @classmethod
  def from_config(cls, workdir: str, config: Any, total_steps: int, peak_tflops: float) -> "Logger":
    """The logger a trainer (SFT or RL) builds from its config's `log` section."""
    return cls(workdir, total_steps=total_steps, every_steps=config.log.every_steps,
               peak_tflops=peak_tflops, num_devices=jax.device_count(),
               tensorboard=config.log.tensorboard)

  def _reset(self, now: float) -> None:
    self._t0, self._steps, self._tokens, self._f6, self._ft, self._fm = now, 0, 0.0, 0.0, 0.0, 0.0
    self._sums: dict[str, float] = {}

  def step(self, step: int, metrics: dict[str, Any], flops: dict[str, float],
           extra: dict[str, Any] | None = None) -> dict[str, float] | None:
    """Record one finished step (metrics already on host); returns the interval summary when logged."""
    m = {k: float(np.asarray(v)) for k, v in metrics.items()}
    self._steps += 1
    self._tokens += flops.get("tokens", 0.0)
    self._f6 += flops.get("flops_6nd", 0.0)
    self._ft += flops.get("flops_total", 0.0)
    self._fm += flops.get("flops_model", 0.0)
    for k, v in m.items():
      self._sums[k] = self._sums.get(k, 0.0) + v
    row = {"step": step, **m, **(extra or {}),
           **{k: v for k, v in flops.items() if k.startswith("flops_")}}
    if self._jsonl:
      self._jsonl.write(json.dumps(row) + "\n")
      self._jsonl.flush()
    if step % self.every and step != self.total_steps:
      return None
    now = time.perf_counter()
    dt = max(now - self._t0, 1e-9)
    summary = {k: v / self._steps for k, v in self._sums.items()}
    if self.peak and self._fm / dt > self.peak:  # what was executed bounds the true peak from below
      self.peak, self.peak_raised = self._fm / dt, True
    summary.update(
        peak_tflops=self.peak / 1e12 / max(self.num_devices, 1),
        steps_per_s=self._steps / dt, tokens_per_s=self._tokens / dt,
        mfu_6n=self._f6 / dt / self.peak if self.peak else 0.0,
        mfu_total=self._ft / dt / self.peak if self.peak else 0.0,
        mfu_model=self._fm / dt / self.peak if self.peak else 0.0,
        **{k: v for k, v in (extra or {}).items() if isinstance(v, (int, float))})
    eta = (self.total_steps - step) / summary["steps_per_s"] if self.total_steps else 0.0
    print(f"step {step}/{self.total_steps} loss {summary.get('loss', float('nan')):.4f} "
          f"acc {summary.get('accuracy', 0.0):.3f} gnorm {summary.get('grad_norm', 0.0):.3f} "
          f"{summary['tokens_per_s']:.0f} tok/s {summary['steps_per_s']:.2f} steps/s "
          f"{_mfu_text(summary, self.peak_raised)} ETA {_fmt_time(eta)}", flush=True)
    self.scalars(step, {f"train/{k}": v for k, v in summary.items()})
    self._reset(now)
    return summary

  def scalars(self, step: int, values: dict[str, float]) -> None:
    if self._tb:
      for k, v in values.items():
        self._tb.add_scalar(k, v, step)
      self._tb.flush()
    if self._jsonl:
      self._jsonl.write(json.dumps({"step": step, **values}) + "\n")
      self._jsonl.flush()

  def close(self) -> None:
    if self._jsonl:
      self._jsonl.close()
    if self._tb:
      self._tb.close()


def _mfu_text(summary: dict[str, float], peak_raised: bool) -> str:
  """The console's MFU: the executed-matmul figure (never over 100%), the 6N one when it is
  physically possible (6N counts the embedding gather, most of a tiny model's N); mfu_total
  (6N + attention + ViT) stays in the logs."""
  text = f"MFU {100 * summary['mfu_model']:.1f}% (executed, with attention)"
  if summary["mfu_6n"] <= 1.0:
    text += f" {100 * summary['mfu_6n']:.1f}% (6N)"
  if peak_raised:
    text += f" of {summary['peak_tflops']:.3g} TFLOP/s/device (this run's best rate; above the set peak)"
  return text


def _fmt_time(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h}:{m:02d}:{s:02d}"


def read_metrics(workdir: str) -> list[dict]:
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


# --- run manifest -------------------------------------------------------------------------------


def _git_commit() -> str:
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  try:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                         timeout=10)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True, timeout=10).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
  except (OSError, subprocess.SubprocessError):
    return "unknown"


def _pip_freeze() -> list[str]:
  try:
    out = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True,
                         timeout=60)
    return out.stdout.splitlines()
  except (OSError, subprocess.SubprocessError):
    return []


def write_manifest(workdir: str, config: Any, mesh: Any, extra: dict | None = None) -> str:
  """<workdir>/manifest.json: resolved config, git commit, pip freeze, devices and mesh."""
  path = os.path.join(workdir, "manifest.json")
  if jax.process_index() != 0:
    return path
  devices = jax.devices()
  manifest = {
      "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
      "argv": sys.argv,
      "config": config.to_dict() if hasattr(config, "to_dict") else config,
      "git_commit": _git_commit(),
      "pip_freeze": _pip_freeze(),
      "python": sys.version,
      "platform": platform.platform(),
      "jax": jax.__version__,
      "process_count": jax.process_count(),
      "devices": [{"id": d.id, "kind": d.device_kind, "platform": d.platform,
                   "process": d.process_index} for d in devices],
      "mesh": dict(mesh.shape) if mesh is not None else None,
      **(extra or {}),
  }
  with open(path, "w") as f:
    json.dump(manifest, f, indent=1, default=str)
  return path


class Profiler:
  """jax.profiler trace for steps [start, stop) from a 'start:stop' string."""

  def __init__(self, spec: str, logdir: str):
    self.start = self.stop = -1
    if spec:
      try:
        a, b = spec.split(":")
        self.start, self.stop = int(a), int(b)
      except ValueError:
        raise ValueError(f"log.profile_steps={spec!r}: expected 'start:stop', e.g. '10:13'") from None
      if self.stop <= self.start:
        raise ValueError(f"log.profile_steps={spec!r}: stop must be > start")
    self.logdir = logdir
    self.active = False

  def before_step(self, step: int) -> None:
    if step == self.start and not self.active:
      jax.profiler.start_trace(self.logdir)
      self.active = True

  def after_step(self, step: int, sync: Any = None) -> None:
    if self.active and step + 1 >= self.stop:
      if sync is not None:
        jax.block_until_ready(sync)
      jax.profiler.stop_trace()
      self.active = False
