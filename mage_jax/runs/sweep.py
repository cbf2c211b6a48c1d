"""Expand a config file's `sweep()` into training runs (the logic of launch.sweep).

Each point of `sweep(arg)` (a dict of dotted config fields -> values) becomes
`python -m launch.train --config=<file>:<arg> --workdir=<workdir>/<i>_<name>
--config.<field>=<value> ...`. Every point is checked against the config
first: an unknown field raises KeyError naming it.
"""
from __future__ import annotations

import os
import re
import shlex
import sys

import ml_collections

from mage_jax.runs.config_files import load_config_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _format(v) -> str:
  return repr(v) if isinstance(v, (tuple, list)) else str(v)


def apply_point(cfg: ml_collections.ConfigDict, point: dict) -> None:
  """Set each dotted field of `point` on `cfg`; an unknown field raises KeyError."""
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
  """[{name, workdir, point, argv}] for every sweep point of `file.py[:arg]` (validated)."""
  path, _, arg = config_spec.partition(":")
  mod = load_config_module(path)
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
  """An sbatch array script over `runs`, each task running launch/slurm/train.sbatch."""
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
