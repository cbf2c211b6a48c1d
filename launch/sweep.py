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
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys

from absl import app, flags

_CONFIG = flags.DEFINE_string("config", None, "Config file[:arg] with a sweep() function.",
                              required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Parent directory of the runs.", required=True)
_MODE = flags.DEFINE_enum("mode", "print", ["print", "local", "slurm"], "What to do with the runs.")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_module(path: str):
  full = path if os.path.isabs(path) else os.path.join(ROOT, path)
  if not os.path.exists(full):
    raise FileNotFoundError(f"config file {path} does not exist")
  spec = importlib.util.spec_from_file_location(os.path.basename(full)[:-3], full)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _format(v) -> str:
  return repr(v) if isinstance(v, (tuple, list)) else str(v)


def apply_point(cfg, point: dict) -> None:
  for key, value in point.items():
    node = cfg
    parts = key.split(".")
    for p in parts[:-1]:
      if p not in node:
        raise KeyError(f"sweep field {key!r}: config has no {p!r}")
      node = node[p]
    if parts[-1] not in node:
      raise KeyError(f"sweep field {key!r}: config has no field {parts[-1]!r}")
    node[parts[-1]] = value


def expand(config_spec: str, workdir: str) -> list[dict]:
  """[{name, workdir, point, argv}] for every sweep point (validated)."""
  path, _, arg = config_spec.partition(":")
  mod = load_module(path)
  if not hasattr(mod, "sweep"):
    raise AttributeError(f"{path} has no sweep() function")
  runs = []
  for i, point in enumerate(mod.sweep(arg or None)):
    apply_point(mod.get_config(arg or None), point)  # raises on unknown fields
    tag = "_".join(f"{k.split('.')[-1]}={_format(v)}" for k, v in point.items()) or "base"
    name = f"{i:03d}_" + re.sub(r"[^A-Za-z0-9_.=-]+", "-", tag)
    run_dir = os.path.join(workdir, name)
    argv = [sys.executable, "-m", "launch.train", f"--config={config_spec}", f"--workdir={run_dir}"]
    argv += [f"--config.{k}={_format(v)}" for k, v in point.items()]
    runs.append(dict(name=name, workdir=run_dir, point=point, argv=argv))
  return runs


def slurm_script(runs: list[dict], workdir: str) -> str:
  template = os.path.join(ROOT, "launch", "slurm", "train.sbatch")
  cmds = "\n".join("  " + shlex.quote(" ".join(shlex.quote(a) for a in r["argv"][1:])) for r in runs)
  return f"""#!/bin/bash
#SBATCH --job-name=mage-sweep
#SBATCH --array=0-{len(runs) - 1}
#SBATCH --output={workdir}/slurm-%A_%a.out
# One array task per sweep point; each task runs the multi-node template
# {template} with TRAIN_ARGS set to that point's arguments.
RUNS=(
{cmds}
)
export TRAIN_ARGS="${{RUNS[$SLURM_ARRAY_TASK_ID]}}"
srun bash {template}
"""


def main(argv):
  del argv
  runs = expand(_CONFIG.value, _WORKDIR.value)
  os.makedirs(_WORKDIR.value, exist_ok=True)
  if _MODE.value == "print":
    for r in runs:
      print(" ".join(shlex.quote(a) for a in r["argv"]))
  elif _MODE.value == "local":
    for r in runs:
      print(f"=== {r['name']}", flush=True)
      subprocess.run(r["argv"], cwd=ROOT, check=True)
  else:
    path = os.path.join(_WORKDIR.value, "sweep.sbatch")
    with open(path, "w") as f:
      f.write(slurm_script(runs, os.path.abspath(_WORKDIR.value)))
    print(f"wrote {path}: submit with `sbatch {path}` ({len(runs)} array tasks)")


if __name__ == "__main__":
  app.run(main)
