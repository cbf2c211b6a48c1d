"""Forge: generate gated task packages from the skill taxonomy (mage_jax/forge; docs/forge.md).

    python -m launch.forge --config=configs/forge.py --workdir=workdirs/forge
    python -m launch.forge --config=configs/forge.py:tiny --workdir=/tmp/forge_tiny
    python -m launch.forge --config=configs/forge.py --workdir=workdirs/forge --recheck   # re-gate a fresh copy

Writes <workdir>/suite (launch.eval --config.suite=, launch.rl --config.rl.suite=) and
<workdir>/manifest.json. A rerun resumes from <workdir>/cache.
"""
from __future__ import annotations

import json
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/forge.py:tiny", "Forge config.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/forge", "Output directory.")
_RECHECK = flags.DEFINE_bool("recheck", False, "Only re-gate <workdir>/suite from a fresh copy.")
_SAMPLE = flags.DEFINE_integer("recheck_sample", 0, "With --recheck: a seeded random subset of this many (0 = all).")


def main(argv):
  del argv
  import os
  from mage_jax.machine.sandbox import SandboxUnavailable, check_available
  from mage_jax.forge import engine
  from mage_jax.forge.llm import EndpointError
  from mage_jax.forge.run import ForgeError
  from mage_jax.forge.skill import TaxonomyError
  from mage_jax.forge.workflow import WorkflowError
  c = _CONFIG.value.to_dict()
  c["workdir"] = _WORKDIR.value
  try:
    check_available()
  except SandboxUnavailable as e:
    sys.exit(f"launch.forge: {e}")
  if _RECHECK.value:
    res = engine.recheck(c.get("suite_dir") or os.path.join(c["workdir"], "suite"), c["gate_workers"], c["env"],
                         _SAMPLE.value)
    print(json.dumps(res, indent=1))
    sys.exit(1 if res["failed"] else 0)
  try:
    m = engine.run_forge(c)
  except (TaxonomyError, WorkflowError, EndpointError, ForgeError) as e:
    sys.exit(f"launch.forge: {e}")
  counts = m["counts"]
  print(f"launch.forge: {counts['tasks']} tasks over {counts['skills_covered']}/{counts['skills']} skills "
        f"in {m['seconds']:.0f} s; rejections {m['rejections']}; cost ${m['cost']['dollars']:.4f}")
  print("wrote", os.path.join(c["workdir"], "manifest.json"))


if __name__ == "__main__":
  app.run(main)
