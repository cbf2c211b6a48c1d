"""`run_forge(config)`: load skills, check their workflows, run the rounds, write the manifest.

Round 1 gives every skill `attempts_per_skill` attempts. After each round the student (any
policy: config `student.kind`, student.policy_factory; by default the noisy scripted stand-in)
plays that round's accepted tasks, >= `student.per_skill` episodes per skill, through the same
evaluation code as launch.eval (results.json under W/round_<k>/eval/; per-skill success with 95%
intervals in the round row); round k+1's budget, workflow refinements and child skills (grouped
student failures -> parameter regions) come from that file and round k's outcomes (rounds.py).
"""
from __future__ import annotations

import collections
import json
import math
import os
import shutil
import tempfile
import threading
import time
from typing import Any

from mage_jax.agent import evaluation
from mage_jax.agent.env import EnvConfig, LocalEnv
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.slots import LocalSlotPool
from mage_jax.agent.success_stats import wilson_interval
from mage_jax.forge import gates as G
from mage_jax.forge import rounds as R
from mage_jax.forge import run as RUN
from mage_jax.forge import student
from mage_jax.forge.skill import (REGISTRY, TaxonomyError, import_skill_modules, load_taxonomy,  # noqa: F401
                                  taxonomy_skill_ids)
from mage_jax.forge.workflow import default_workflow
from mage_jax.tasks.package import PackageError
from mage_jax.tasks.package import load_package
import random


def select_skills(c: dict[str, Any]) -> tuple[list[str], list[str]]:
  """(skill ids to run, taxonomy ids with no registered skill). A registered skill missing from
  the taxonomy file is an error naming both."""
  import_skill_modules(list(c.get("skill_modules") or []))
  unimplemented: list[str] = []
  if c.get("taxonomy"):
    tax_ids = taxonomy_skill_ids(load_taxonomy(c["taxonomy"]))
    unimplemented = [s for s in tax_ids if s not in REGISTRY]
    wanted = [s for s in tax_ids if s in REGISTRY]
    extra = set(REGISTRY) - set(tax_ids) - set(c.get("skills") or [])
    if extra and not c.get("skills"):
      raise TaxonomyError(f"{c['taxonomy']}: registered skills missing from the taxonomy: {sorted(extra)[:5]}")
  else:
    wanted = sorted(REGISTRY)
  if c.get("skills"):
    unknown = [s for s in c["skills"] if s not in REGISTRY]
    if unknown:
      raise TaxonomyError(f"config.skills: unknown skill ids {unknown}")
    wanted = list(c["skills"])
  if c.get("domains"):  # a typo here would silently run nothing: name it (excluding an absent domain is harmless)
    known = {s.split(".")[0] for s in REGISTRY}
    if set(c["domains"]) - known:
      raise TaxonomyError(f"config.domains: unknown domains {sorted(set(c['domains']) - known)}; known: {sorted(known)}")
    wanted = [s for s in wanted if s.split(".")[0] in c["domains"]]
  if not c.get("skills"):  # ids named one by one are run whatever their domain
    wanted = [s for s in wanted if s.split(".")[0] not in (c.get("exclude_domains") or [])]
  if c.get("skills_per_domain"):  # a small cross-section: the first N skills of each domain
    seen: collections.Counter = collections.Counter()
    kept = []
    for s in wanted:
      seen[s.split(".")[0]] += 1
      if seen[s.split(".")[0]] <= c["skills_per_domain"]:
        kept.append(s)
    wanted = kept
  for s in wanted:  # type-check every workflow before any work (WorkflowError names skill + node)
    llm = c.get("llm") or {}
    default_workflow(REGISTRY[s], llm_params=bool(llm.get("params")), reword=bool(llm.get("reword")))
  return wanted, unimplemented


class LoadSampler:
  """The 1-minute load average every `every` s while a round runs: the machine may be shared, so
  the manifest says how loaded it was next to every wall time."""

  def __init__(self, every: float = 10.0):
    self.every, self.samples, self._stop = every, [], threading.Event()
    self._thread = threading.Thread(target=self._loop, daemon=True)

  def _loop(self) -> None:
    while True:
      self.samples.append(os.getloadavg()[0])
      if self._stop.wait(self.every):
        return

  def __enter__(self) -> "LoadSampler":
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()

  def summary(self) -> dict[str, float]:
    xs = self.samples or [os.getloadavg()[0]]
    return {"min": round(min(xs), 1), "mean": round(sum(xs) / len(xs), 1), "max": round(max(xs), 1),
            "samples": len(xs)}


def evaluate_student(c: dict[str, Any], k: int, suite_dir: str, by_skill: dict[str, list[str]],
                     out_dir: str) -> str | None:
  """The round's student (config `student.kind`: student.policy_factory) on up to `per_skill`
  accepted tasks of each skill, each repeated until the skill has >= `per_skill` episodes;
  launch.eval's results.json under `out_dir` (its path, None without tasks)."""
  st = c["student"]
  want = int(st.get("per_skill", 8))
  groups: dict[int, list] = collections.defaultdict(list)   # repeats -> tasks
  for s, ids in sorted(by_skill.items()):
    ids = ids[:want]
    if ids:
      groups[math.ceil(want / len(ids))] += [load_package(os.path.join(suite_dir, i)) for i in ids]
  if not groups:
    return None
  factory = student.policy_factory(st, k)
  env_cfg = EnvConfig(**(c.get("env") or {}))
  pool = LocalSlotPool(lambda: LocalEnv(env_cfg), EpisodeConfig(
      max_steps=st["max_steps"], out_dir=os.path.join(out_dir, "shots")), c["gate_workers"])
  results = []
  try:
    for repeats, tasks in sorted(groups.items()):
      results += evaluation.evaluate(tasks, factory, pool, repeats=repeats)
  finally:
    pool.close()
  return evaluation.write_results(out_dir, results, evaluation.summarize(results),
                                  {"policy": st["kind"], **({"noise": st["noise"]} if st["kind"] == "noisy_scripted"
                                                            else {"model": st.get("model"),
                                                                  "base_url": st.get("base_url")})})["results"]


def per_skill_success(results_path: str) -> dict[str, dict[str, Any]]:
  """{skill: episodes, successes, success, 95% Wilson interval} of one round's student results."""
  out = {}
  for s, (a, n) in sorted(R.skill_success(results_path).items()):
    lo, hi = wilson_interval(a, n)
    out[s] = {"episodes": n, "successes": a, "success": round(a / max(1, n), 3), "ci95": [round(lo, 3), round(hi, 3)]}
  return out


def run_forge(c: dict[str, Any]) -> dict[str, Any]:
  wd = c["workdir"]
  suite_dir = c.get("suite_dir") or os.path.join(wd, "suite")
  os.makedirs(suite_dir, exist_ok=True)
  skills, unimplemented = select_skills(c)
  deduper = G.Deduper(c.get("near_dup", 0.9))
  for pkg in existing_packages(suite_dir):  # a resumed run keeps and de-duplicates against them
    deduper.resumed.add(pkg["id"])
    deduper.check(pkg["skills"][0] if pkg.get("skills") else pkg["id"], None, pkg["instruction"], pkg["checker"],
                  pkg["id"])
  budget = {s: c["attempts_per_skill"] for s in skills}
  avoid: dict[str, dict] = {}
  success: dict[str, tuple[int, int]] = {}
  manifest: dict[str, Any] = {"version": 1, "workdir": wd, "suite": suite_dir, "rounds": [],
                              "unimplemented_skills": unimplemented}
  all_outcomes: list[dict[str, Any]] = []
  t_start = time.monotonic()
  for k in range(1, c["rounds"] + 1):
    round_dir = os.path.join(wd, f"round_{k}")
    load = LoadSampler().__enter__()
    t_round = time.monotonic()
    st, outcomes = RUN.run_round(c, k, budget, avoid, deduper, suite_dir, round_dir)
    all_outcomes += outcomes
    by_skill: dict[str, list[str]] = collections.defaultdict(list)   # this round's accepted tasks
    for o in outcomes:
      if o.get("accepted"):
        by_skill[o["skill"]].append(o["package"]["id"])
    row = round_row(st, budget, success, c, skills)
    results = None
    t_eval = time.monotonic()
    if st.error is None and c["student"]["enabled"]:
      results = evaluate_student(c, k, suite_dir, by_skill, os.path.join(round_dir, "eval"))
    load.__exit__()
    with_rows = _episode_rows(results)
    row.update(student_kind=c["student"].get("kind", "noisy_scripted") if results else None,
               student_episodes=len(with_rows), student_seconds=round(time.monotonic() - t_eval, 1),
               round_seconds=round(time.monotonic() - t_round, 1), load_average=load.summary())
    if results:
      for s, (a, n) in R.skill_success(results).items():
        prev = success.get(s, (0, 0))
        success[s] = (prev[0] + a, prev[1] + n)
      row["student_results"] = results
      row["student_per_skill"] = per_skill_success(results)
      rates = {s: a / n for s, (a, n) in success.items() if n}
      row["student_success"] = round(sum(rates.values()) / max(1, len(rates)), 3)
      row["bands"] = dict(collections.Counter(R.band_of(rates.get(s), tuple(c["band"])) for s in skills))
    children = c.get("children") or {}
    if results and children.get("enabled") and st.error is None and k < c["rounds"]:
      params_of = {o["package"]["id"]: o["params"] for o in outcomes if o.get("accepted") and o.get("params")}
      new, recs = R.child_skills(with_rows, params_of, min_failures=int(children.get("min_failures", 2)),
                                 per_skill=int(children.get("per_skill", 1)))
      row["children"] = recs
      skills += [s.id for s in new if s.id not in skills]
    row["child_skills_accepted_tasks"] = {s: n for s, n in sorted(collections.Counter(
        o["skill"] for o in outcomes if o.get("accepted") and o["skill"] in {x["id"] for x in R.SIBLINGS}).items())}
    avoid = {**avoid, **R.refinements(all_outcomes, c["refine_at"])}
    row["refined_skills"] = sorted(s for s in avoid if avoid[s])
    if c["llm"].get("siblings") and st.error is None and k < c["rounds"]:
      new, recs = R.propose_siblings(RUN.client_from_config(c["llm"]),
                                     [REGISTRY[s] for s in skills[: c["llm"]["siblings"]]])
      row["sibling_proposals"] = recs
      skills += [s.id for s in new]
    manifest["rounds"].append(row)
    manifest.update(summary(suite_dir, manifest["rounds"], time.monotonic() - t_start, len(skills)))
    write_manifest(wd, manifest)
    if st.error:
      raise RUN.ForgeError(f"round {k} stopped: {st.error} (accepted so far kept in {suite_dir}; "
                           f"rerun to resume from {os.path.join(wd, 'cache')})")
    budget = R.allocate(skills, success, c["attempts_per_skill"] * len(skills), band=tuple(c["band"]))
  return manifest


def _episode_rows(results_path: str | None) -> list[dict[str, Any]]:
  if not results_path:
    return []
  with open(results_path) as f:
    return json.load(f)["episodes"]


def round_row(st: RUN.RoundStats, budget: dict[str, int], success, c, skills) -> dict[str, Any]:
  rates = {s: a / n for s, (a, n) in success.items() if n}
  frontier = [s for s in budget if R.band_of(rates.get(s), tuple(c["band"])) == "frontier"]
  gs = st.gate_seconds
  return {"round": st.round, "attempts": st.attempts, "accepted": st.accepted,
          "acceptance": round(st.accepted / max(1, st.attempts), 4),
          "frontier_budget_share": round(sum(budget[s] for s in frontier) / max(1, sum(budget.values())), 4),
          "rejections": dict(st.rejections), "rejections_by_node": dict(st.by_node),
          "rejections_by_skill": {s: dict(v) for s, v in st.by_skill.items()},
          "consistency": dict(st.consistency), "llm": dict(st.llm), "llm_by_node": {n: dict(v) for n, v in sorted(st.llm_by_node.items())},
          "generate_seconds": round(st.generate_seconds, 1),
          "gating_seconds": round(st.gating_seconds, 1), "gated_fresh": len(gs),
          "gate_seconds_per_task": round(sum(gs) / max(1, len(gs)), 3), "error": st.error}


def existing_packages(suite_dir: str) -> list[dict[str, Any]]:
  out = []
  for name in sorted(os.listdir(suite_dir)):
    path = os.path.join(suite_dir, name, "task.json")
    if os.path.isfile(path):
      with open(path) as f:
        out.append(json.load(f))
  return out


def summary(suite_dir: str, rounds: list[dict[str, Any]], seconds: float, n_skills: int) -> dict[str, Any]:
  pkgs = existing_packages(suite_dir)
  per_skill = collections.Counter(p["skills"][0] for p in pkgs if p.get("skills"))
  multi = sum(len(p.get("apps", [])) > 1 for p in pkgs)
  rej, consistency = collections.Counter(), collections.Counter()
  for r in rounds:
    rej.update(r["rejections"])
    consistency.update(r.get("consistency", {}))
  llm, by_node = collections.Counter(), collections.defaultdict(collections.Counter)
  for r in rounds:
    llm.update(r["llm"])
    for node, counts in r.get("llm_by_node", {}).items():
      by_node[node].update(counts)
  dollars = llm.pop("micro_dollars", 0) / 1e6
  attempts = sum(r["attempts"] for r in rounds)
  return {"round": len(rounds), "seconds": round(seconds, 1),
          "counts": {"tasks": len(pkgs), "skills_covered": len(per_skill), "skills": n_skills,
                     "per_skill": dict(sorted(per_skill.items())),
                     "per_domain": dict(collections.Counter(s.split(".")[0] for p in pkgs for s in p["skills"][:1])),
                     "per_kind": dict(collections.Counter(p["kind"] for p in pkgs)),
                     "single_app": len(pkgs) - multi, "multi_app": multi,
                     "multi_app_share": round(multi / max(1, len(pkgs)), 4),
                     "skills_with_3_plus": sum(v >= 3 for v in per_skill.values())},
          "rejections": dict(rej.most_common()), "consistency": dict(sorted(consistency.items())),
          "cost": {**dict(llm), "dollars": round(dollars, 6), "attempts": attempts,
                   "dollars_per_accepted_task": round(dollars / max(1, len(pkgs)), 6),
                   "tokens_per_accepted_task": round((llm["prompt_tokens"] + llm["completion_tokens"])
                                                     / max(1, len(pkgs)), 1),
                   "token_source": token_source(llm),
                   "by_node": {n: node_cost(v, len(pkgs)) for n, v in sorted(by_node.items())}}}


def token_source(counts) -> str:
  """Where the token figures come from: the replies' `usage`, or partly the character estimate."""
  est = counts.get("estimated", 0)
  return "usage" if not est else f"usage, except {est} of {counts.get('requests', 0)} requests estimated as ceil(chars/4)"


def node_cost(counts: collections.Counter, accepted: int) -> dict[str, Any]:
  """One LLM node's cost over the run, and per accepted task."""
  counts = collections.Counter(counts)
  dollars = counts.pop("micro_dollars", 0) / 1e6
  return {**dict(counts), "dollars": round(dollars, 6),
          "dollars_per_accepted_task": round(dollars / max(1, accepted), 6),
          "tokens_per_accepted_task": round((counts["prompt_tokens"] + counts["completion_tokens"])
                                            / max(1, accepted), 1)}


def write_manifest(wd: str, manifest: dict[str, Any]) -> str:
  path = os.path.join(wd, "manifest.json")
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=False)
  os.replace(tmp, path)
  return path


def recheck(suite_dir: str, workers: int = 2, env: dict[str, Any] | None = None, sample: int = 0) -> dict[str, Any]:
  """Copies the suite to a fresh directory, loads it with launch.eval's loader and gates every
  package again (no cache; `sample` > 0: a seeded random subset of that many); returns
  {checked, failed: [(id, gate, reason)], seconds}."""
  t0 = time.monotonic()
  with tempfile.TemporaryDirectory(prefix="forge_recheck_") as tmp:
    copy = shutil.copytree(suite_dir, os.path.join(tmp, "suite"))
    pkgs, failed = [], []
    for name in sorted(os.listdir(copy)):  # launch.eval's loader, one package at a time
      try:
        pkgs += [p.to_dict() for p in load_suite_entry(copy, name)]
      except (PackageError, ValueError) as e:
        failed.append((name, "schema", str(e)[:200]))
    if 0 < sample < len(pkgs):
      pkgs = random.Random(0).sample(pkgs, sample)
    with RUN._pool(workers, {"env": env}) as ex:
      res = list(ex.map(G.gate_package, pkgs, [env] * len(pkgs)))
  failed += [(r["id"], r["rejection"], r["reason"][:200]) for r in res if not r["passed"]]
  return {"checked": len(pkgs) + sum(f[1] == "schema" for f in failed), "failed": failed,
          "seconds": round(time.monotonic() - t0, 1)}


def load_suite_entry(suite: str, name: str) -> list:
  full = os.path.join(suite, name)
  if name.endswith(".json") or os.path.isfile(os.path.join(full, "task.json")):
    return [load_package(full)]
  return []
