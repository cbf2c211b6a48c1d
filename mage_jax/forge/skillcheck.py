"""The skill library's own checks: gate one sampled package per skill, or rewrite taxonomy.json.

  python -m launch.skillcheck [--domains=shell,text] [--skills=ID,..] [--seed=0] [--workers=6]
  python -m launch.skillcheck --write_taxonomy     # taxonomy.json from the registry

Every skill's package (one param set from `sample(Random(seed ^ hash(id)))`) runs the full gates
(schema, setup, initial 0, every reference 1, near-miss < 1, blind exploits) in a fresh sandbox.
The default test (tests/test_forge_skills.py) gates a hashed subset; this gates them all.
"""
from __future__ import annotations

import collections
import json
import random
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

from mage_jax.forge import package_gates as gates
from mage_jax.forge import skill as skill_lib
from mage_jax.forge.skills import load_all, package_dict, taxonomy_from_registry


def sample_package(s: skill_lib.Skill, seed: int = 0) -> dict:
  params = s.sample(random.Random(seed ^ zlib.crc32(s.id.encode())))
  return package_dict(s, params, f"{s.id}-s{seed}")


def gate_skills(ids: Iterable[str], env_factory: Callable, seed: int = 0, workers: int = 6) -> list[gates.GateResult]:
  reg = load_all()

  def one(sid: str) -> gates.GateResult:
    try:
      d = sample_package(reg[sid], seed)
    except Exception as e:  # noqa: BLE001 - a build error is a rejection naming the skill
      return gates.GateResult(sid, False, "build", f"{type(e).__name__}: {e}", skills=[sid])
    return gates.check_package(d, env_factory)
  with ThreadPoolExecutor(workers) as ex:
    return list(ex.map(one, ids))


def summary(results: list[gates.GateResult]) -> str:
  per = collections.defaultdict(lambda: [0, 0])
  lines = []
  for r in results:
    dom = r.task_id.split(".")[0]
    per[dom][0 if r.passed else 1] += 1
    if not r.passed:
      lines.append(f"  REJECTED {r.task_id}: {r.gate}: {(r.reason or '')[:300]}")
  head = [f"{d}: {a} accepted, {b} rejected" for d, (a, b) in sorted(per.items())]
  return "\n".join(head + lines)


def write_taxonomy(path: str = skill_lib.TAXONOMY_FILE) -> int:
  with open(path, "w") as f:
    json.dump(taxonomy_from_registry(), f, indent=1)
    f.write("\n")
  return len(load_all())
