"""Collect teacher trajectories under a harness variant; optionally synthesize step reasoning.

  python -m launch.collect --config=configs/evolve.py:scripted,collect \
      --config.harness=workdirs/evolve/selected.json --workdir=workdirs/collect
  python -m launch.collect --config=configs/evolve.py:openai,collect --config.policy.base_url=http://host:8000/v1 \
      --config.synthesis.base_url=http://host:8000/v1 --workdir=workdirs/collect_llm

Runs every (task, repeat) job through the slot pool (mage_jax.runs.suite_run.run_suite, the
launch.eval path) with a progress bar of success so far; keeps checker-score-1 episodes in the
student's schema (mage_jax/harness/collect.py) in <workdir>/trajectories.jsonl and counts the
rest by reason in <workdir>/collect_report.json. Rerunning the same command resumes (finished
jobs are in <workdir>/collect_state.jsonl). With config.synthesis.base_url, every kept step
gets one synthesis call (mage_jax/data/synthesis.py): <workdir>/synthesized.jsonl, ready for
launch.pack, and the synthesis counts in the report.
"""
from __future__ import annotations

import json

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/evolve.py:scripted,collect", "Collect config.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/collect", "Output directory.")


def main(argv):
  del argv
  from mage_jax.runs.suite_run import require_sandbox
  require_sandbox("launch.collect")
  c = _CONFIG.value
  from mage_jax.runs.collect import run_collection
  print(json.dumps(run_collection(c, _WORKDIR.value, c.collect.progress), indent=1))


if __name__ == "__main__":
  app.run(main)
