"""A suite run in sections that survives a short device lease.

Each section prints its time budget before it starts; a section that raises is
recorded (error + traceback) and the next one still runs; device memory is read
after each; every result row is printed (flushed) and written as soon as it exists; the
results JSON is rewritten after every section, so a run cut off by `timeout`
still returns what it measured ("complete": false until the end). A section may
report progress inside itself (`progress`: written at once), and one that cannot
fit the time left before `deadline` is skipped and says so. Imports only the
standard library and jax (the GPU suite's image has nothing else).
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Any, Callable

from mage_jax.bench import results
from mage_jax.bench.results import Row


def device_memory() -> dict[str, int | None]:
  """Bytes in use, peak since the process started, and the pool limit of device 0 (None on
  backends without memory stats, e.g. CPU). The peak never resets, so a section's own peak
  shows only where it exceeds every earlier section's."""
  import jax   # the bare GPU image runs this module: each path imports only what it needs
  stats = jax.devices()[0].memory_stats() or {}
  return {k: stats.get(k) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")}


@dataclasses.dataclass
class SuiteRun:
  suite: str
  out_path: str
  machine: dict[str, Any]
  rows: list[Row] = dataclasses.field(default_factory=list)
  details: dict[str, Any] = dataclasses.field(default_factory=dict)
  deadline: float | None = None  # time.time() by which the run must be over; None: no limit

  def remaining_s(self) -> float:
    return float("inf") if self.deadline is None else self.deadline - time.time()

  def add(self, *rows: Row) -> None:
    """Append rows, print each, and rewrite the JSON (a row is on disk as soon as it exists)."""
    for r in rows:
      self.rows.append(r)
      goal = f"  (goal {r.goal}: {'met' if r.met else 'NOT met'})" if r.goal else ""
      print(f"  {r.name}: {r.value:.6g} {r.unit}{goal}{'  ' + r.note if r.note else ''}",
            flush=True)
    if rows:
      self.write(complete=False)

  def skip(self, name: str, reason: str) -> None:
    """Record `name` as not run, with why (written at once)."""
    self.details[name] = {"skipped": reason}
    self.details.setdefault("sections", {})[name] = {"ok": False, "skipped": True,
                                                     "reason": reason}
    self.details.setdefault("section_order", []).append(name)
    print(f"[{name}] SKIPPED: {reason}", flush=True)
    self.write(complete=False)

  def progress(self, name: str, **fields: Any) -> None:
    """Record how far section `name` got (e.g. init / compile seconds) and write at once."""
    entry = self.details.setdefault("progress", {}).setdefault(name, {})
    entry.update(fields)
    print(f"[{name}] progress: {fields}", flush=True)
    self.write(complete=False)

  def section(self, name: str, budget_s: float, fn: Callable[[], Any]) -> Any:
    """Run one section; returns its result, or None when it raised or was skipped (less
    than its budget left before the deadline)."""
    left = self.remaining_s()
    if left < budget_s:
      self.skip(name, f"needs its {budget_s:.0f} s budget, {max(left, 0):.0f} s left")
      return None
    print(f"[{name}] starting, budget {budget_s:.0f} s", flush=True)
    start = time.perf_counter()
    out, error = None, None
    try:
      out = fn()
      self.details[name] = out
    except Exception as e:  # a benchmark reports a broken section instead of dying
      error = f"{type(e).__name__}: {e}"
      self.details[name] = {"error": error, "traceback": traceback.format_exc()}
    seconds = time.perf_counter() - start
    info = {"seconds": seconds, "budget_s": budget_s, "over_budget": seconds > budget_s,
            "ok": error is None, "memory_after": device_memory()}
    self.details.setdefault("sections", {})[name] = info
    self.details.setdefault("section_order", []).append(name)  # the JSON sorts dict keys
    over = f" (OVER its {budget_s:.0f} s budget)" if info["over_budget"] else ""
    status = "done" if error is None else f"FAILED: {error[:500]}"
    print(f"[{name}] {status} in {seconds:.1f} s{over}; memory {_gib(info['memory_after'])}",
          flush=True)
    self.write(complete=False)
    print(f"[{name}] results so far written to {self.out_path}", flush=True)
    return out

  def write(self, complete: bool) -> None:
    self.details["complete"] = complete
    results.write_json(self.out_path, self.suite, self.rows, self.details, self.machine)


def _gib(mem: dict[str, int | None]) -> str:
  if mem.get("peak_bytes_in_use") is None:
    return "n/a (no device memory stats)"
  g = lambda k: f"{mem[k] / 2 ** 30:.1f}" if mem.get(k) is not None else "?"
  return f"{g('bytes_in_use')} GiB in use, peak {g('peak_bytes_in_use')} of {g('bytes_limit')} GiB"
