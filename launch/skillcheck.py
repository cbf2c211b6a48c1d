"""Gate one sampled package per Forge skill in the sandbox, or rewrite taxonomy.json.

  python -m launch.skillcheck [--domains=shell,text] [--skills=ID,..] [--seed=0] [--workers=6]
  python -m launch.skillcheck --write_taxonomy     # mage_jax/forge/taxonomy.json from the registry

The logic is `mage_jax.forge.skillcheck`; this module is only its command line.
"""
from __future__ import annotations

import time

from absl import app, flags

from mage_jax.forge import skill as skill_lib
from mage_jax.forge.skillcheck import gate_skills, summary, write_taxonomy
from mage_jax.forge.skills import load_all

FLAGS = flags.FLAGS
flags.DEFINE_list("domains", [], "domains to gate (default: all)")
flags.DEFINE_list("skills", [], "skill ids to gate (default: all of --domains)")
flags.DEFINE_integer("seed", 0, "param seed")
flags.DEFINE_integer("workers", 6, "sandboxes at once")
flags.DEFINE_bool("write_taxonomy", False, "rewrite forge/taxonomy.json from the registry and exit")


def main(argv) -> None:
  del argv
  if FLAGS.write_taxonomy:
    print(f"wrote {skill_lib.TAXONOMY_FILE}: {write_taxonomy()} skills")
    return
  from mage_jax.agent.env import EnvConfig, LocalEnv
  reg = load_all()
  unknown = [i for i in FLAGS.skills if i not in reg]
  if unknown:
    raise app.UsageError(f"--skills: unknown skill ids {unknown}; see mage_jax/forge/taxonomy.json")
  ids = FLAGS.skills or [i for i in reg if not FLAGS.domains or reg[i].domain in FLAGS.domains]
  t0 = time.monotonic()
  # the Forge engine's screen (EnvConfig's 1280x800): the real-app skills click fixed pixels of it
  res = gate_skills(ids, lambda: LocalEnv(EnvConfig(command_timeout=30)), FLAGS.seed,
                    FLAGS.workers)
  print(summary(res))
  print(f"{sum(r.passed for r in res)}/{len(res)} accepted in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
  app.run(main)
