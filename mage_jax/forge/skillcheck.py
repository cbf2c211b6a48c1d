"""The skill library's own checks: gate one sampled package per skill, or rewrite taxonomy.json.

  python -m mage_jax.forge.skillcheck [--domains=shell,text] [--skills=ID,..] [--seed=0] [--workers=6]
  python -m mage_jax.forge.skillcheck --write_taxonomy     # taxonomy.json from the registry

Every skill's package (one param set from `sample(Random(seed ^ hash(id)))`) runs the full gates
(schema, setup, initial 0, every reference 1, near-miss < 1, blind exploits) in a fresh sandbox.
The default test (tests/test_forge_skills.py) gates a hashed subset; this gates them all.
"""
from __future__ import annotations

import collections
import json
import random
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

from absl import app, flags

from mage_jax.agent.tasks import gates
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


FLAGS = flags.FLAGS
flags.DEFINE_list("domains", [], "domains to gate (default: all)")
flags.DEFINE_list("skills", [], "skill ids to gate (default: all of --domains)")
flags.DEFINE_integer("seed", 0, "param seed")
flags.DEFINE_integer("workers", 6, "sandboxes at once")
flags.DEFINE_bool("write_taxonomy", False, "rewrite forge/taxonomy.json from the registry and exit")


def write_taxonomy(path: str = skill_lib.TAXONOMY_FILE) -> int:
  with open(path, "w") as f:
    json.dump(taxonomy_from_registry(), f, indent=1)
    f.write("\n")
  return len(load_all())


def main(argv) -> None:
  del argv
  if FLAGS.write_taxonomy:
    print(f"wrote {skill_lib.TAXONOMY_FILE}: {write_taxonomy()} skills")
    return
  from mage_jax.agent.env import EnvConfig, LocalEnv
  reg = load_all()
  ids = FLAGS.skills or [i for i in reg if not FLAGS.domains or reg[i].domain in FLAGS.domains]
  t0 = time.monotonic()
  res = gate_skills(ids, lambda: LocalEnv(EnvConfig(width=800, height=600, command_timeout=30)), FLAGS.seed,
                    FLAGS.workers)
  print(summary(res))
  print(f"{sum(r.passed for r in res)}/{len(res)} accepted in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
  app.run(main)
