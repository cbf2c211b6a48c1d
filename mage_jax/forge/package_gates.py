"""Gates every task package must pass before use (docs/tasks.md).

  schema          the package loads (fields, preparer/checker specs, calls valid)
  setup           setup runs cleanly in a fresh environment
  initial_zero    the checker scores 0 on the untouched initial state
  reference_one   every reference solution (when present) scores 1
  near_miss_below_one  the near-miss solution (when present) scores < 1
  no_blind_exploit     every blind exploit (tasks/exploits.py) that can touch what the checker
                       reads scores exactly 0; a hit names the exploit's family and score, and an
                       exploit that crashes (or an env that fails under it) is a counted gate error

A failing package is rejected with the gate's name and reason. Each solution
runs on a freshly set-up state, through the same `env.step` path as a policy:
the first one on the setup's own environment (untouched: it was only scored),
later ones after a new `reset`. `run_reference` may replace the plain replay of
the reference, e.g. with the full episode loop and a scripted policy, so one
run both gates the package and evaluates the policy.
"""
from __future__ import annotations

import collections
import dataclasses
import queue
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Sequence

from mage_jax.agent.env import Env, Observation
from mage_jax.tasks import checkers
from mage_jax.forge.exploits import REGISTRY, BlindView, Exploit
from mage_jax.tasks.package import PackageError, TaskPackage, package_from_dict

GATES = ("schema", "setup", "initial_zero", "reference_one", "near_miss_below_one", "no_blind_exploit")


@dataclasses.dataclass
class ExploitOutcome:
  name: str
  family: str
  score: float | None = None       # None: not run (skipped, or an error stopped it)
  skipped: str | None = None       # why it cannot touch what the checker reads
  error: str | None = None         # the exploit or the env failed: a gate error, never a pass
  steps: int = 0


@dataclasses.dataclass
class GateResult:
  task_id: str
  passed: bool
  gate: str | None = None       # the first gate that failed
  reason: str | None = None
  scores: dict[str, float] = dataclasses.field(default_factory=dict)
  seconds: float = 0.0
  skills: list[str] = dataclasses.field(default_factory=list)
  family: str | None = None        # no_blind_exploit: the family of the first exploit that scored
  exploit_errors: int = 0          # exploits that crashed or whose env failed
  exploits: list[ExploitOutcome] = dataclasses.field(default_factory=list)
  exploit_seconds: float = 0.0

  def __str__(self) -> str:
    if self.passed:
      return f"{self.task_id}: passed {self.scores}"
    return f"{self.task_id}: REJECTED at gate {self.gate!r}: {self.reason}"

  @property
  def rejection(self) -> str | None:
    """'gate' or 'no_blind_exploit:<family>' ('no_blind_exploit:error' for a gate error)."""
    if self.passed:
      return None
    if self.gate == "no_blind_exploit":
      return f"{self.gate}:{self.family or 'error'}"
    return self.gate


def rejection_counts(results: Iterable[GateResult]) -> dict[str, collections.Counter]:
  """Per skill, how many packages each gate (and each exploit family) rejected."""
  out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  for r in results:
    if r.rejection:
      for skill in r.skills or ["(none)"]:
        out[skill][r.rejection] += 1
  return dict(out)


SETTLE_SECONDS = 0.3  # after a solution: let apps flush files written by the last click


def settle_seconds(pkg: TaskPackage) -> float:
  """The pause between a solution and its score. Apps need it to flush files written by the
  last click; a package with no desktop has no apps, and its solutions are shell commands that
  have returned (their files written) before the score is read, so it gets none (Forge, 22
  terminal packages: 2.03 -> 1.23 s wall per gated package, the same scores)."""
  return SETTLE_SECONDS if pkg.needs_desktop else 0.0


def run_calls(env: Env, calls: list[dict[str, Any]]) -> None:
  """Executes scripted calls (resolving '@app.widget' coordinates) until terminate."""
  for call in calls:
    args = env.resolve(call["arguments"])
    obs = env.step(call["name"], args)
    if obs.done:
      break


def reference_name(pkg: TaskPackage, i: int) -> str:
  """The score key of the i-th reference: 'reference' for the first, 'reference[<channel>]' after."""
  return "reference" if i == 0 else f"reference[{pkg.references[i]['channel']}]"


# run_reference(env, package, first_observation): acts on an env that was just reset; the
# package it is given holds only the reference to run.
ReferenceRunner = Callable[[Env, TaskPackage, Observation], None]


def why_untouchable(exploit: Exploit, pkg: TaskPackage) -> str | None:
  """Why `exploit` cannot change what the package's checker reads (None: it can)."""
  if exploit.writes == "output" and not checkers.reads_output(pkg.checker):
    return "the checker reads no shell output"
  if exploit.writes == "screen" and not pkg.needs_desktop:
    return "the task has no desktop"
  if exploit.writes in ("files", "screen") and not checkers.reads_files(pkg.checker):
    return "the checker reads no files"
  return None


def _episodes(exploits: Sequence[Exploit]) -> list[list[Exploit]]:
  """One episode per exploit, except that a chain shares one (in registry order)."""
  groups: dict[Any, list[Exploit]] = {}
  for i, e in enumerate(exploits):
    groups.setdefault(e.chain if e.chain is not None else ("alone", i), []).append(e)
  return list(groups.values())


EXPLOIT_ENVS = 3  # exploit episodes at once: they mostly wait on resets (X, apps), not on the CPU


def _run_episode(env: Env, pkg: TaskPackage, group: list[Exploit], outcomes: dict[str, ExploitOutcome]) -> None:
  current = group[0]
  try:
    view = BlindView(env, pkg.instruction, env.reset(pkg))
    for current in group:
      before = view.steps
      current.act(view)
      if current.writes == "screen":
        time.sleep(SETTLE_SECONDS)
      outcomes[current.name].score = env.score()
      outcomes[current.name].steps = view.steps - before
  except Exception as e:  # noqa: BLE001 - a broken exploit or env is a gate error, never a pass
    outcomes[current.name].error = f"{type(e).__name__}: {e}"
    for later in group[group.index(current) + 1:]:
      outcomes[later.name].error = f"not run: {current.name!r} failed before it in the same episode"


def run_exploits(env: Env, pkg: TaskPackage, exploits: Sequence[Exploit],
                 env_factory: Callable[[], Env] | None = None, max_envs: int = EXPLOIT_ENVS) -> list[ExploitOutcome]:
  """Every exploit on a fresh `reset`, scored by the package's checker; skips are recorded.
  With `env_factory`, up to `max_envs` episodes run at once (`env` plus new ones, closed after),
  unless the envs share one machine (`Env.independent_instances` False: a remote VM)."""
  outcomes = {e.name: ExploitOutcome(e.name, e.family, skipped=why_untouchable(e, pkg)) for e in exploits}
  groups = _episodes([e for e in exploits if outcomes[e.name].skipped is None])
  parallel = env_factory is not None and env.independent_instances
  n_envs = max(1, min(max_envs, len(groups))) if parallel else 1
  if n_envs == 1:
    for group in groups:
      _run_episode(env, pkg, group, outcomes)
    return [outcomes[e.name] for e in exploits]
  pool: queue.Queue = queue.Queue()
  extra = [env_factory() for _ in range(n_envs - 1)]
  for e in [env] + extra:
    pool.put(e)

  def job(group: list[Exploit]) -> None:
    e = pool.get()
    try:
      _run_episode(e, pkg, group, outcomes)
    finally:
      pool.put(e)
  try:
    with ThreadPoolExecutor(n_envs) as ex:
      list(ex.map(job, groups))
  finally:
    for e in extra:
      e.close()
  return [outcomes[e.name] for e in exploits]


def check_package(pkg: TaskPackage | dict[str, Any], env_factory: Callable[[], Env],
                  run_reference: ReferenceRunner | None = None,
                  exploits: Sequence[Exploit] | None = None) -> GateResult:
  """Runs the gates in order; `exploits` defaults to the whole registry (tasks/exploits.py)."""
  start = time.monotonic()
  if isinstance(pkg, dict):
    try:
      pkg = package_from_dict(pkg)
    except (PackageError, ValueError) as e:
      return GateResult(str(pkg.get("id", "?")), False, "schema", str(e))
  res = GateResult(pkg.id, True, skills=list(pkg.skills))

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
    solutions = [(reference_name(pkg, i), ref["calls"], "reference_one", lambda v: v == 1.0)
                 for i, ref in enumerate(pkg.references)]
    solutions.append(("near_miss", pkg.near_miss, "near_miss_below_one", lambda v: v < 1.0))
    for name, calls, gate, ok in solutions:
      if calls is None:
        continue
      try:
        if not fresh:
          obs = env.reset(pkg)
        fresh = False
        if gate == "reference_one" and run_reference is not None:
          run_reference(env, dataclasses.replace(pkg, references=[r for r in pkg.references
                                                                  if r["calls"] is calls]), obs)
        else:
          run_calls(env, calls)
        time.sleep(settle_seconds(pkg))
        res.scores[name] = s = env.score()
      except Exception as e:  # noqa: BLE001
        return fail(gate, f"{name} solution crashed: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
      if not ok(s):
        return fail(gate, f"the {name} solution scores {s}")
    t0 = time.monotonic()
    res.exploits = run_exploits(env, pkg, REGISTRY if exploits is None else exploits, env_factory)
    res.exploit_seconds = time.monotonic() - t0
    errors = [o for o in res.exploits if o.error]
    hits = [o for o in res.exploits if o.score is not None and o.score != 0]
    res.exploit_errors = len(errors)
    if hits:
      res.family = hits[0].family
      return fail("no_blind_exploit", "; ".join(
          f"blind exploit {o.name!r} (family {o.family}) scores {o.score}" for o in hits))
    if errors:
      return fail("no_blind_exploit", f"{len(errors)} exploit error(s): " + "; ".join(
          f"{o.name!r} (family {o.family}): {o.error}" for o in errors))
  finally:
    env.close()
  res.seconds = time.monotonic() - start
  return res
