"""Run the Mage-VL-Cowork curriculum: SFT stages 1-4, then online RL (stage 5), in order.

  python -m launch.curriculum --config=configs/mage_vl_cowork.py:tiny --workdir=workdirs/demo

Each stage trains in <workdir>/<stage> with its own config file
(`configs.stages.<name>.config`, same arg as this one), starting from the
previous stage's final params (`init.from_dir`); stage 1 starts from
`config.init_from` (an HF dir) or fresh. Completed stages are skipped, an
interrupted one resumes from its checkpoint. Synthetic data (tiny) is made
once in <workdir>/synth and shared; stages of the same shapes share a
persistent compilation cache in <workdir>/jax_cache. Every stage's config is checked before
the first stage trains (a bad field is a usage error naming it). At the end: a per-stage
table (steps, trained tokens, first/final loss, held-out loss, FLOPs 6·N·D and
all, wall time; for RL: updates, policy tokens, mean reward first -> last), <workdir>/curriculum.json and PNG plots in <workdir>/plots.
The logic is `mage_jax.runs.curriculum`; this module is only its command line.
"""
from __future__ import annotations

import json
import os
import time

from absl import app, flags, logging
from ml_collections import config_flags

from launch import shell

_CONFIG = config_flags.DEFINE_config_file("config", None, "Curriculum config file[:arg].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Curriculum directory (resumes).", required=True)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # Orbax logs every write at INFO
  from mage_jax.runs import curriculum
  from mage_jax.train import plots, run_setup
  start = time.perf_counter()
  workdir = _WORKDIR.value
  rows = shell.run_job(curriculum.run, _CONFIG.value, workdir, run_setup.ConfigError)
  print(curriculum.format_table(rows))
  with open(os.path.join(workdir, "curriculum.json"), "w") as f:
    json.dump(rows, f, indent=1)
  for p in (plots.plot(workdir) if plots.runs(workdir) else []):   # data/eval-only runs log no metrics
    print(f"wrote {p}")
  print(f"curriculum wall time {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
  app.run(main, flags_parser=shell.parse_flags)
