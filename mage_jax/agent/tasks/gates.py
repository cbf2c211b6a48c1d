"""Gates every task package must pass before use (docs/tasks.md).

  schema          the package loads (fields, preparer/checker specs, calls valid)
  setup           setup runs cleanly in a fresh environment
  initial_zero    the checker scores 0 on the untouched initial state
  reference_one   the reference solution (when present) scores 1
  near_miss_below_one  the near-miss solution (when present) scores < 1

A failing package is rejected with the gate's name and reason. Each solution
runs on a freshly set-up state, through the same `env.step` path as a policy:
the first one on the setup's own environment (untouched: it was only scored),
later ones after a new `reset`. `run_reference` may replace the plain replay of
the reference, e.g. with the full episode loop and a scripted policy, so one
run both gates the package and evaluates the policy.
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Any, Callable

from mage_jax.agent.env import Env, Observation
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


SETTLE_SECONDS = 0.3  # after a solution: let apps flush files written by the last click


def run_calls(env: Env, calls: list[dict[str, Any]]) -> None:
  """Executes scripted calls (resolving '@app.widget' coordinates) until terminate."""
  for call in calls:
    args = env.resolve(call["arguments"])
    obs = env.step(call["name"], args)
    if obs.done:
      break


# run_reference(env, package, first_observation): acts on an env that was just reset.
ReferenceRunner = Callable[[Env, TaskPackage, Observation], None]


def check_package(pkg: TaskPackage | dict[str, Any], env_factory: Callable[[], Env],
                  run_reference: ReferenceRunner | None = None) -> GateResult:
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
      obs = env.reset(pkg)
    except Exception as e:  # noqa: BLE001 - any setup failure rejects the package
      return fail("setup", f"{type(e).__name__}: {e}")
    res.scores["initial"] = s = env.score()
    if s != 0:
      return fail("initial_zero", f"the checker scores {s} on the untouched initial state")
    fresh = True  # the setup's state is untouched (scoring reads files only): the first solution uses it
    for name, calls, gate, ok in (
        ("reference", pkg.reference, "reference_one", lambda v: v == 1.0),
        ("near_miss", pkg.near_miss, "near_miss_below_one", lambda v: v < 1.0)):
      if calls is None:
        continue
      try:
        if not fresh:
          obs = env.reset(pkg)
        fresh = False
        if name == "reference" and run_reference is not None:
          run_reference(env, pkg, obs)
        else:
          run_calls(env, calls)
        time.sleep(SETTLE_SECONDS)
        res.scores[name] = s = env.score()
      except Exception as e:  # noqa: BLE001
        return fail(gate, f"{name} solution crashed: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
      if not ok(s):
        return fail(gate, f"the {name} solution scores {s}")
  finally:
    env.close()
  res.seconds = time.monotonic() - start
  return res
