"""Gates every task package must pass before use (docs/tasks.md).

  schema          the package loads (fields, preparer/checker specs, calls valid)
  setup           setup runs cleanly in a fresh environment
  initial_zero    the checker scores 0 on the untouched initial state
  reference_one   the reference solution (when present) scores 1
  near_miss_below_one  the near-miss solution (when present) scores < 1

A failing package is rejected with the gate's name and reason. Each solution
runs in its own fresh environment, through the same `env.step` path as a policy.
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Any, Callable

from mage_jax.agent.env import Env
from mage_jax.agent.tasks.package import PackageError, TaskPackage, package_from_dict

GATES = ("schema", "setup", "initial_zero", "reference_one", "near_miss_below_one")


@dataclasses.dataclass
class GateResult:
  task_id: str
  passed: bool
  gate: str | None = None       # the first gate that failed
  reason: str | None = None
  scores: dict[str, float] = dataclasses.field(default_factory=dict)
  seconds: float = 0.0

  def __str__(self) -> str:
    if self.passed:
      return f"{self.task_id}: passed {self.scores}"
    return f"{self.task_id}: REJECTED at gate {self.gate!r}: {self.reason}"


def run_calls(env: Env, calls: list[dict[str, Any]], settle: float = 0.3) -> None:
  """Executes scripted calls (resolving '@app.widget' coordinates) until terminate."""
  for call in calls:
    args = env.resolve(call["arguments"])
    obs = env.step(call["name"], args)
    if obs.done:
      break
  time.sleep(settle)  # let apps flush files written by the last click


def check_package(pkg: TaskPackage | dict[str, Any], env_factory: Callable[[], Env]) -> GateResult:
  start = time.monotonic()
  if isinstance(pkg, dict):
    try:
      pkg = package_from_dict(pkg)
    except (PackageError, ValueError) as e:
      return GateResult(str(pkg.get("id", "?")), False, "schema", str(e))
  res = GateResult(pkg.id, True)

  def fail(gate: str, reason: str) -> GateResult:
    res.passed, res.gate, res.reason = False, gate, reason
    res.seconds = time.monotonic() - start
    return res

  env = env_factory()
  try:
    try:
      env.reset(pkg)
    except Exception as e:  # noqa: BLE001 - any setup failure rejects the package
      return fail("setup", f"{type(e).__name__}: {e}")
    res.scores["initial"] = s = env.score()
    if s != 0:
      return fail("initial_zero", f"the checker scores {s} on the untouched initial state")
    for name, calls, gate, ok in (
        ("reference", pkg.reference, "reference_one", lambda v: v == 1.0),
        ("near_miss", pkg.near_miss, "near_miss_below_one", lambda v: v < 1.0)):
      if calls is None:
        continue
      try:
        env.reset(pkg)
        run_calls(env, calls)
        res.scores[name] = s = env.score()
      except Exception as e:  # noqa: BLE001
        return fail(gate, f"{name} solution crashed: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
      if not ok(s):
        return fail(gate, f"the {name} solution scores {s}")
  finally:
    env.close()
  res.seconds = time.monotonic() - start
  return res
