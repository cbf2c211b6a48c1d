"""The Forge run: rounds of (generate -> de-duplicate -> gate -> student eval -> re-plan).

Layout of a workdir W:
  W/suite/<task id>/task.json     accepted packages (launch.eval --config.suite=W/suite)
  W/cache/nodes/..                per-node outputs, content-addressed (resume)
  W/cache/gates/..                gate results by package hash (resume)
  W/round_<k>/outcomes.jsonl      every candidate: skill, seed, params, node, reason
  W/round_<k>/eval/results.json   the student's launch.eval-format results
  W/manifest.json                 counts, rejections, cost, rounds (rewritten after each round)

Accepted packages are written to the suite as soon as they pass, so a run stopped by a dead
endpoint or a crash keeps everything accepted so far; rerunning resumes from the caches.
"""
from __future__ import annotations

import collections
from concurrent.futures import ProcessPoolExecutor, as_completed
import dataclasses
import importlib
import json
import multiprocessing
import os
import sys
import time
from typing import Any, Iterable

from tqdm import tqdm

from mage_jax.forge import gates as G
from mage_jax.forge import rounds as R
from mage_jax.forge.llm import ChatClient, EndpointError, client_from_config
from mage_jax.forge.nodes import digest
from mage_jax.forge.skill import REGISTRY, import_skill_modules
from mage_jax.forge.workflow import NodeCache, default_workflow
from mage_jax.tasks.package import package_from_dict, save_package


class ForgeError(RuntimeError):
  """A run that cannot go on (bad config, dead endpoint); accepted tasks are kept."""


# ---- progress ------------------------------------------------------------------------------------
def progress(it: Iterable, total: int, desc: str, enabled: bool = True):
  if not enabled:
    yield from it
    return
  yield from tqdm(it, total=total, desc=desc, file=sys.stderr, mininterval=2.0)


# ---- worker side (module level: run in forked processes) -----------------------------------------
_WORKER: dict[str, Any] = {}


def _init_worker(settings: dict[str, Any]) -> None:
  """Under spawn, a worker imports the modules that registered the skills and re-registers the
  LLM-proposed siblings; under fork it inherits them (both are no-ops then)."""
  _WORKER.clear()
  _WORKER.update(settings)
  import_skill_modules(settings.get("skill_modules") or [])
  for name in settings.get("modules", []):
    importlib.import_module(name)
  for spec in settings.get("siblings", []):
    R.register_sibling(spec)


def _client() -> ChatClient | None:
  llm = _WORKER.get("llm") or {}
  if not (llm.get("params") or llm.get("reword")):
    return None
  return client_from_config(llm)


def generate_one(skill_id: str, seed: int, avoid: dict[str, list] | None) -> dict[str, Any]:
  """One candidate of one skill: the workflow's Outcome as a dict (EndpointError propagates)."""
  llm = _WORKER.get("llm") or {}
  skill = REGISTRY[skill_id]
  wf = default_workflow(skill, llm_params=bool(llm.get("params")), reword=bool(llm.get("reword")),
                        avoid=avoid, max_retries=int(llm.get("max_retries", 2)), judge=bool(llm.get("judge")),
                        phrase=bool(_WORKER.get("phrasing")))
  t0 = time.monotonic()
  out = wf.run(seed, NodeCache(_WORKER.get("node_cache")), _client())
  d = dataclasses.asdict(out)
  d["seconds"] = time.monotonic() - t0
  return d


def gate_one(pkg: dict[str, Any]) -> dict[str, Any]:
  cache = NodeCache(_WORKER.get("gate_cache"))
  key = digest({"package": pkg, "env": _WORKER.get("env") or {}})
  hit, res = cache.get(key)
  if hit:
    return dict(res, cached=True)
  res = G.gate_package(pkg, _WORKER.get("env"))
  if res.get("rejection") != "gate_error":
    cache.put(key, res)
  return res


def _jax_running() -> bool:
  """Whether JAX has started a backend in this process (its thread pools start with it; importing
  jax starts none: the student's episode code imports it and never computes)."""
  if "jax" not in sys.modules:
    return False
  try:
    from jax._src import xla_bridge   # only when jax is already loaded (checked above)
    return bool(xla_bridge._backends)
  except Exception:  # noqa: BLE001 - a JAX without that table: assume it runs
    return True


def _pool(workers: int, settings: dict[str, Any]) -> ProcessPoolExecutor:
  # fork is cheap and inherits the registry, but forking a process whose JAX threads are running
  # can deadlock the child: once a JAX backend is up (e.g. a test session that ran a model) the
  # workers are spawned (each re-imports the skill modules: ~2-4 s of CPU per worker).
  method = "spawn" if _jax_running() else "fork"
  settings = dict(settings, modules=sorted({s.sample.__module__ for s in REGISTRY.values()
                                            if s.id not in {x["id"] for x in R.SIBLINGS}}),
                  siblings=list(R.SIBLINGS))
  return ProcessPoolExecutor(max(1, workers), mp_context=multiprocessing.get_context(method),
                             initializer=_init_worker, initargs=(settings,))


# ---- one round -----------------------------------------------------------------------------------
@dataclasses.dataclass
class RoundStats:
  round: int
  attempts: int = 0
  accepted: int = 0
  rejections: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  by_skill: dict[str, collections.Counter] = dataclasses.field(
      default_factory=lambda: collections.defaultdict(collections.Counter))
  by_node: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  llm: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  llm_by_node: dict[str, collections.Counter] = dataclasses.field(   # LLM node -> the same counts
      default_factory=lambda: collections.defaultdict(collections.Counter))
  # the consistency gate on reworded instructions: replies checked / rejected, rejections by reason,
  # candidates whose every reply was rejected (the original instruction kept)
  consistency: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  gate_seconds: list[float] = dataclasses.field(default_factory=list)
  generate_seconds: float = 0.0
  gating_seconds: float = 0.0
  error: str | None = None

  def reject(self, skill: str, reason: str, node: str) -> None:
    self.rejections[reason] += 1
    self.by_skill[skill][reason] += 1
    self.by_node[f"{node}:{reason}"] += 1


def count_call(counts: collections.Counter, call: dict[str, Any]) -> None:
  """One llm.CallRecord (as a dict) into a round's counters; dollars as integer micro-dollars so
  Counter sums stay exact."""
  for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "estimated", "requests", "retries"):
    counts[key] += call.get(key, 0)
  counts["fallbacks"] += int(call["fallback"])
  counts["calls"] += 1
  counts["micro_dollars"] += round(call["dollars"] * 1e6)


def count_consistency(counts: collections.Counter, outcome: dict[str, Any]) -> None:
  """One candidate's consistency verdicts (nodes.RewordNode) into a round's counter."""
  events = outcome.get("gate_events") or []
  for e in events:
    counts["replies_checked"] += 1
    if e["reasons"]:
      counts["replies_rejected"] += 1
      for r in e["reasons"]:
        counts["rejected:" + r] += 1
  if events:
    counts["reworded"] += int(not events[-1]["reasons"])
    counts["kept_original"] += int(bool(events[-1]["reasons"]))


def run_round(c: dict[str, Any], k: int, budget: dict[str, int], avoid: dict[str, dict],
              deduper: G.Deduper, suite_dir: str, round_dir: str) -> tuple[RoundStats, list[dict[str, Any]]]:
  st = RoundStats(k)
  settings = worker_settings(c)
  jobs = [(s, k * 100_000 + i) for s in sorted(budget) for i in range(budget[s])]
  st.attempts = len(jobs)
  outcomes: list[dict[str, Any]] = []
  t0 = time.monotonic()
  with _pool(c["workers"], settings) as ex:
    futs = [ex.submit(generate_one, s, seed, avoid.get(s)) for s, seed in jobs]
    try:
      for f in progress(as_completed(futs), len(futs), f"round {k} generate", c["progress"]):
        outcomes.append(f.result())
    except EndpointError as e:
      for f in futs:
        f.cancel()
      st.error = str(e)
  st.generate_seconds = time.monotonic() - t0
  outcomes.sort(key=lambda o: (o["skill"], o["seed"]))
  to_gate = []
  for o in outcomes:
    for call in o["llm_calls"]:
      for counts in (st.llm, st.llm_by_node[call["node"]]):
        count_call(counts, call)
    count_consistency(st.consistency, o)
    if o["package"] is None:
      st.reject(o["skill"], o["reason"], o["node"])
      continue
    pkg = o["package"]
    if pkg["id"] in deduper.resumed:  # accepted by an earlier (interrupted) run of this workdir
      o["accepted"] = o["resumed"] = True
      st.accepted += 1
      continue
    dup = deduper.check(o["skill"], o["params"], pkg["instruction"], pkg["checker"], pkg["id"])
    if dup:
      o["reason"], o["node"], o["detail"] = dup[0], "dedup", f"duplicates {dup[1]}"
      st.reject(o["skill"], dup[0], "dedup")
      continue
    to_gate.append(o)
  # GUI and hybrid packages first: a desktop gate takes ~6x a terminal one (Xvfb and a Tk app per
  # reset, mostly waiting), so started last they would leave the other workers idle at the end
  to_gate.sort(key=lambda o: o["package"].get("kind") == "terminal")
  t0 = time.monotonic()
  if c["gate"]:
    with _pool(c["gate_workers"], settings) as ex:
      futs = {ex.submit(gate_one, o["package"]): o for o in to_gate}
      for f in progress(as_completed(futs), len(futs), f"round {k} gate", c["progress"]):
        o, res = futs[f], f.result()
        o["gate"] = res
        if not res.get("cached"):
          st.gate_seconds.append(res["seconds"])
        if res["passed"]:
          _accept(o, suite_dir, st)
        else:
          o["reason"], o["node"], o["detail"] = res["rejection"], "package_gate", res["reason"]
          st.reject(o["skill"], res["rejection"], "package_gate")
  else:
    for o in to_gate:
      _accept(o, suite_dir, st)
  st.gating_seconds = time.monotonic() - t0
  os.makedirs(round_dir, exist_ok=True)
  with open(os.path.join(round_dir, "outcomes.jsonl"), "w") as f:
    for o in outcomes:
      f.write(json.dumps({k2: o.get(k2) for k2 in ("skill", "seed", "params", "reason", "node", "detail",
                                                    "accepted", "seconds", "cache_hits")}
                         | {"id": (o["package"] or {}).get("id"), "llm_calls": len(o["llm_calls"]),
                            "gate_seconds": (o.get("gate") or {}).get("seconds")}) + "\n")
  return st, outcomes


def _accept(o: dict[str, Any], suite_dir: str, st: RoundStats) -> None:
  pkg = o["package"]
  save_package(package_from_dict(pkg, source=pkg["id"]), os.path.join(suite_dir, pkg["id"]))
  o["accepted"] = True
  st.accepted += 1


def worker_settings(c: dict[str, Any]) -> dict[str, Any]:
  return {"llm": c.get("llm"), "env": c.get("env"), "skill_modules": list(c.get("skill_modules") or []),
          "phrasing": bool(c.get("phrasing")),
          "node_cache": os.path.join(c["workdir"], "cache", "nodes"),
          "gate_cache": os.path.join(c["workdir"], "cache", "gates")}
