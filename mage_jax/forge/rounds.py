"""Adaptive rounds: round k+1 reads a student's evaluation (launch.eval's results.json, whose
episode rows carry `skills`) and round k's gate statistics, then

  * moves the generation budget toward skills whose student success is in a frontier band
    [lo, hi] (neither solved nor hopeless): weight `boost` for those, 1 for skills not yet
    measured, `rest` for solved or hopeless ones;
  * refines the workflow of skills whose rejection rate is >= `refine_at`: the sample node's
    value pools are pruned of the top-level parameter values seen only in rejected tasks
    (`avoid`), so the next round stops drawing them;
  * can propose sibling skills through an LLM node (`propose_siblings`).

The student (until a trained model exists) is `forge.student.NoisyScriptedPolicy`: the scripted reference
policy with a per-step error probability p(skill) — at each step, with probability p, it
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
from typing import Any



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
  from mage_jax.forge import skill as S
  from mage_jax.forge.llm import LLMNode, validate_schema
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
    try:
      probe = {**parent.sample(random.Random(0)), **spec["fixed"]}
      validate_schema(probe, parent.param_schema)
      parent.build(probe)
    except Exception as e:  # noqa: BLE001 - an unusable proposal is recorded, not registered
      row["why"] = f"{type(e).__name__}: {e}"[:200]
      continue
    made.append(register_sibling(spec))
    row["accepted"] = True
  return made, records


SIBLINGS: list[dict[str, Any]] = []  # specs of the siblings registered in this process (workers re-register them)


def register_sibling(spec: dict[str, Any]):
  """Registers a sibling skill: the parent's build, its sampler with `fixed` overlaid."""
  from mage_jax.forge import skill as S
  if spec["id"] in S.REGISTRY:
    return S.REGISTRY[spec["id"]]
  parent, fixed = S.REGISTRY[spec["parent"]], spec["fixed"]

  def sample(rng):
    return {**parent.sample(rng), **fixed}
  SIBLINGS.append(spec)
  return S.register(dataclasses.replace(parent, id=spec["id"], description=spec["description"], sample=sample))
