"""Expand a config file's `sweep()` into training runs.

  python -m launch.sweep --config=configs/stage4_hybrid_sft.py:tiny --workdir=workdirs/sweep4            # print
  python -m launch.sweep --config=configs/stage4_hybrid_sft.py:tiny --workdir=workdirs/sweep4 --mode=local
  python -m launch.sweep --config=configs/stage4_hybrid_sft.py --workdir=workdirs/sweep4 --mode=slurm

Each point of `sweep(arg)` (a dict of dotted config fields -> values) becomes
`python -m launch.train --config=<file>:<arg> --workdir=<workdir>/<i>_<name>
--config.<field>=<value> ...`. `local` runs them one after another; `slurm`
writes <workdir>/sweep.sbatch, an array job over the points built on
launch/slurm/train.sbatch (submit with `sbatch <workdir>/sweep.sbatch`).
Every point is checked against the config (unknown fields error) first.
The logic is `mage_jax.runs.sweep`; this module is only its command line.
"""
from __future__ import annotations

import os
import shlex
import subprocess

from absl import app, flags

from mage_jax.runs import sweep

_CONFIG = flags.DEFINE_string("config", None, "Config file[:arg] with a sweep() function.",
                              required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Parent directory of the runs.", required=True)
_MODE = flags.DEFINE_enum("mode", "print", ["print", "local", "slurm"], "What to do with the runs.")


def main(argv):
  del argv
  runs = sweep.expand(_CONFIG.value, _WORKDIR.value)
  os.makedirs(_WORKDIR.value, exist_ok=True)
  if _MODE.value == "print":
    for r in runs:
      print(" ".join(shlex.quote(a) for a in r["argv"]))
  elif _MODE.value == "local":
    for r in runs:
      print(f"=== {r['name']}", flush=True)
      subprocess.run(r["argv"], cwd=sweep.ROOT, check=True)
  else:
    path = os.path.join(_WORKDIR.value, "sweep.sbatch")
    with open(path, "w") as f:
      f.write(sweep.slurm_script(runs, os.path.abspath(_WORKDIR.value)))
    print(f"wrote {path}: submit with `sbatch {path}` ({len(runs)} array tasks)")


if __name__ == "__main__":
  app.run(main)
