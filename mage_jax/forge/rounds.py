"""Adaptive rounds: round k+1 reads a student's evaluation (launch.eval's results.json, whose
episode rows carry `skills`) and round k's gate statistics, then

  * moves the generation budget toward skills whose student success is in a frontier band
    [lo, hi] (neither solved nor hopeless): weight `boost` for those, 1 for skills not yet
    measured, `rest` for solved or hopeless ones;
  * refines the workflow of skills whose rejection rate is >= `refine_at`: the sample node's
    value pools are pruned of the top-level parameter values seen only in rejected tasks
    (`avoid`), so the next round stops drawing them;
  * can propose sibling skills through an LLM node (`propose_siblings`);
  * grows the taxonomy from the student's failures (`child_skills`): a skill's failed episodes
    are grouped by (failure reason, top-level parameter value); the largest group whose value
    covers only part of the skill's episodes and fails at least as often as the skill does
    becomes a child skill that fixes that value (a parameter region), registered like a sibling,
    so its packages go through the same workflow and gates in the next round.

The student is any policy (config `student.kind`, forge/engine.evaluate_student): an endpoint,
a checkpoint, the scripted reference, or the default stand-in `forge.student.NoisyScriptedPolicy`:
the scripted reference policy with a per-step error probability p(skill) — at each step, with probability p, it
takes a wrong action instead (a bash command becomes a no-op `true`, a click lands on the
screen corner, typed text is reversed); terminate steps are never corrupted. p(skill) is
`base + spread * u(skill)`, u a hash of the skill id in [0, 1), so failure rates differ
per skill and an episode of n working steps succeeds with probability about (1 - p)^n.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import random
import re
from typing import Any

from mage_jax.forge import skill as S
from mage_jax.forge.llm import LLMNode
from mage_jax.forge.llm import validate_schema



def unit_hash(text: str) -> float:
  return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16 ** 8


@dataclasses.dataclass(frozen=True)
class NoiseModel:
  base: float = 0.05
  spread: float = 0.5

  def p(self, skill: str) -> float:
    return self.base + self.spread * unit_hash("noise:" + skill)


def skill_success(results_path: str) -> dict[str, tuple[int, int]]:
  """{skill: (successes, episodes)} from launch.eval's results.json (env errors left out)."""
  with open(results_path) as f:
    rows = json.load(f)["episodes"]
  out: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
  for r in rows:
    if "skills" not in r:
      raise ValueError(f"{results_path}: episode rows carry no 'skills' (an older launch.eval?)")
    if r.get("status") == "env_error":
      continue
    for s in r["skills"][:1]:  # the package's own skill comes first
      out[s][0] += int(bool(r["success"]))
      out[s][1] += 1
  return {s: (v[0], v[1]) for s, v in out.items()}


def allocate(skills: list[str], success: dict[str, tuple[int, int]], total: int, *,
             band: tuple[float, float] = (0.2, 0.8), boost: float = 3.0, rest: float = 0.5,
             minimum: int = 1) -> dict[str, int]:
  """Attempts per skill for the next round (see the module docstring); sums to about `total`."""
  lo, hi = band
  weights = {}
  for s in skills:
    if s not in success or success[s][1] == 0:
      weights[s] = 1.0
    else:
      rate = success[s][0] / success[s][1]
      weights[s] = boost if lo <= rate <= hi else rest
  z = sum(weights.values()) or 1.0
  return {s: max(minimum, round(total * w / z)) for s, w in weights.items()}


def band_of(rate: float | None, band: tuple[float, float]) -> str:
  if rate is None:
    return "unmeasured"
  return "frontier" if band[0] <= rate <= band[1] else "solved" if rate > band[1] else "hopeless"


def refinements(outcomes: list[dict[str, Any]], refine_at: float = 0.5, min_seen: int = 3) -> dict[str, dict[str, list]]:
  """{skill: {param: [values to avoid]}} for skills rejected at rate >= refine_at: top-level
  scalar parameter values that occur in rejected tasks and never in accepted ones."""
  by_skill: dict[str, list[tuple[dict, bool]]] = collections.defaultdict(list)
  for o in outcomes:
    if o.get("params") is not None and o.get("reason") not in ("dedup_instruction", "dedup_params",
                                                               "dedup_near_instruction"):
      by_skill[o["skill"]].append((o["params"], o.get("accepted", False)))
  out = {}
  for s, rows in by_skill.items():
    rejected = [p for p, ok in rows if not ok]
    if len(rows) < min_seen or len(rejected) / len(rows) < refine_at:
      continue
    good = collections.defaultdict(set)
    for p, ok in rows:
      if ok:
        for k, v in p.items():
          good[k].add(json.dumps(v, sort_keys=True))
    avoid: dict[str, list] = collections.defaultdict(list)
    for p in rejected:
      for k, v in p.items():
        if isinstance(v, (str, int, float, bool)) and json.dumps(v) not in good[k] and v not in avoid[k]:
          avoid[k].append(v)
    out[s] = dict(avoid) if avoid else {}
  return out


SIBLING_PROMPT = ("Skill {skill_id}: {description}\nIts parameters follow this schema: {param_schema}\n"
                  "Propose one sibling skill: a narrower or harder variant that fixes some parameters. "
                  "Reply with JSON matching: {schema}")


def sibling_schema(param_schema: dict[str, Any]) -> dict[str, Any]:
  return {"type": "object", "required": ["name", "description", "fixed"],
          "properties": {"name": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,40}$"},
                         "description": {"type": "string", "minLength": 10, "maxLength": 200},
                         "fixed": {"type": "object", "properties": param_schema.get("properties", {}),
                                   "additionalProperties": False, "minProperties": 1}}}


def propose_siblings(client, skills: list, ledger=None, max_retries: int = 1) -> tuple[list, list[dict[str, Any]]]:
  """For each skill, an LLM proposes a sibling that fixes some parameters; a valid proposal whose
  fixed values build a package becomes a registered Skill (id <domain>.<capability>.<name>, the
  parent's build, its sampler with the fixed values overlaid). Returns (new skills, records)."""
  made, records = [], []
  for parent in skills:
    node = LLMNode("propose_sibling", SIBLING_PROMPT, sibling_schema(parent.param_schema),
                   max_retries=max_retries, fallback=lambda inputs: None)
    value, rec = node.run(client, {"skill_id": parent.id, "description": parent.description,
                                   "param_schema": parent.param_schema}, skill=parent.id, ledger=ledger)
    row = {"parent": parent.id, "fallback": rec.fallback, "accepted": False}
    records.append(row)
    if value is None:
      continue
    sid = f"{parent.domain}.{parent.capability}.{value['name']}"
    row.update(id=sid, description=value["description"], fixed=value["fixed"])
    if sid in S.REGISTRY:
      row["why"] = "id exists"
      continue
    spec = {"id": sid, "parent": parent.id, "description": value["description"], "fixed": value["fixed"]}
    register_if_it_builds(parent, spec, row, made)
  return made, records


def register_if_it_builds(parent, spec: dict[str, Any], record: dict[str, Any], made: list) -> None:
  """Registers the sibling / child `spec` when the parent's build accepts its fixed values on a
  seeded draw (valid against the parent's schema); else the record says why. Its packages meet
  every gate later, like any skill's."""
  try:
    probe = {**parent.sample(random.Random(0)), **spec["fixed"]}
    validate_schema(probe, parent.param_schema)
    parent.build(probe)
  except Exception as e:  # noqa: BLE001 - an unusable proposal is recorded, not registered
    record["why"] = f"{type(e).__name__}: {e}"[:200]
    return
  made.append(register_sibling(spec))
  record["accepted"] = True


SIBLINGS: list[dict[str, Any]] = []  # specs of the siblings registered in this process (workers re-register them)


def register_sibling(spec: dict[str, Any]):
  """Registers a sibling skill: the parent's build, its sampler with `fixed` overlaid."""
  if spec["id"] in S.REGISTRY:
    return S.REGISTRY[spec["id"]]
  parent, fixed = S.REGISTRY[spec["parent"]], spec["fixed"]

  def sample(rng):
    return {**parent.sample(rng), **fixed}
  SIBLINGS.append(spec)
  return S.register(dataclasses.replace(parent, id=spec["id"], description=spec["description"], sample=sample))


def failure_reason(row: dict[str, Any]) -> str:
  """Why a student episode (a results.json row) failed: env_lost | budget (out of steps) |
  invalid_calls (unparseable or invalid turns) | wrong_result (it stopped with a wrong state)."""
  if row.get("status") == "env_lost":
    return "env_lost"
  if sum((row.get("parse_errors") or {}).values()):
    return "invalid_calls"
  if row.get("status") == "budget":
    return "budget"
  return "wrong_result"


def _slug(value: Any) -> str:
  return re.sub(r"[^a-z0-9]+", "_", str(value).lower()).strip("_")[:16] or "x"


def child_skills(rows: list[dict[str, Any]], params_of: dict[str, dict[str, Any]], *,
                 min_failures: int = 2, per_skill: int = 1) -> tuple[list, list[dict[str, Any]]]:
  """Child skills from the student's grouped failures (the module docstring). `rows`: results.json
  episode rows (task_id, skills, success, status, parse_errors); `params_of`: task id -> the
  parameters it was built from. Returns (registered child skills, one record per proposal)."""
  by_skill: dict[str, list[tuple[dict, bool, str]]] = collections.defaultdict(list)
  for r in rows:
    if r.get("status") == "env_error" or r["task_id"] not in params_of or not r.get("skills"):
      continue
    by_skill[r["skills"][0]].append((params_of[r["task_id"]], bool(r["success"]), failure_reason(r)))
  made, records = [], []
  for sid, eps in sorted(by_skill.items()):
    failed = [(p, why) for p, ok, why in eps if not ok]
    if len(failed) < min_failures or sid not in S.REGISTRY:
      continue
    rate = len(failed) / len(eps)
    groups = collections.Counter((why, k, json.dumps(v)) for p, why in failed for k, v in p.items()
                                 if isinstance(v, (str, int, float)) and not isinstance(v, bool))
    ranked = []
    for (why, k, v), n in groups.items():
      value = json.loads(v)
      covered = [ok for p, ok, _ in eps if p.get(k) == value]
      if n >= min_failures and len(covered) < len(eps) and (len(covered) - sum(covered)) / len(covered) >= rate:
        ranked.append((-n, -(len(covered) - sum(covered)) / len(covered), k, v, why, len(covered)))
    parent = S.REGISTRY[sid]
    for neg_n, neg_rate, k, v, why, n_cov in sorted(ranked)[:per_skill]:
      value = json.loads(v)
      child_id = f"{parent.domain}.{parent.capability}.{parent.id.split('.')[2]}_{_slug(k)}_{_slug(value)}"[:120]
      rec = {"parent": sid, "id": child_id, "fixed": {k: value}, "reason": why, "failures": -neg_n,
             "episodes_in_region": n_cov, "region_failure_rate": round(-neg_rate, 3),
             "skill_failure_rate": round(rate, 3), "accepted": False}
      records.append(rec)
      if child_id in S.REGISTRY:
        rec["why"] = "id exists"
        continue
      spec = {"id": child_id, "parent": sid, "fixed": {k: value},
              "description": f"{parent.description} (region {k}={value}: the student failed {-neg_n} of "
                             f"{n_cov} episodes there, {why})"[:300]}
      register_if_it_builds(parent, spec, rec, made)
  return made, records
