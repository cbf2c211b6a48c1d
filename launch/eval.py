"""Evaluate a policy on a task suite; prints a table and writes JSON + episodes.

    python -m launch.eval --config=configs/eval.py:scripted --workdir=workdirs/eval_scripted

Writes <workdir>/results.json (summary rows + per-episode counters),
<workdir>/episodes.jsonl (trajectory format, screenshots under <workdir>/shots)
<workdir>/steps.jsonl (per-step token ids / log-probs, the response text), <workdir>/tasks.json
(each task's checker spec) and, unless --config.report=False, the episode viewer
<workdir>/report/index.html (launch.report).

`--config.osworld.runs=2` runs an imported OSWorld suite the OSWorld way (2 runs, 50 steps) and
writes <workdir>/osworld_table.json: the success rate per OSWorld domain and overall, mean of the runs.

`--config.harness=configs/harness.py:<arg>` (or a .json) evaluates the policy under a teacher
harness variant (mage_jax/harness): its prompt, tools, scaffold and terminal replace
config.episode's and env.max_output; its id goes into every result and trajectory.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/eval.py:scripted", "Eval config.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/eval", "Output directory.")


def main(argv):
  del argv
  from mage_jax.agent import evaluation
  from mage_jax.runs.suite_run import (env_factory_for, gated_tasks, load_harness, make_policy_factory,
                                        require_sandbox, run_suite)
  c = _CONFIG.value
  if c.osworld.runs > 0:   # OSWorld's protocol: N runs of the suite, a 50-step budget
    c.repeats, c.episode.max_steps = c.osworld.runs, c.osworld.max_steps
  require_sandbox("launch.eval")
  variant = load_harness(c)
  if variant is not None:
    print(f"harness {variant.name} id={variant.variant_id}")
  tasks = gated_tasks(c, env_factory_for(c, variant))
  results = run_suite(c, _WORKDIR.value, tasks, variant, make_policy_factory(c.policy),
                      on_result=lambda r: print(f"{r.task_id}: {r.status} score={r.score:.2f} "
                                                f"steps={r.steps} {r.wall_time:.1f}s", flush=True))
  rows = evaluation.summarize(results)
  print(evaluation.format_table(rows))
  paths = evaluation.write_results(_WORKDIR.value, results, rows, c.to_dict())
  paths["tasks"] = write_task_specs(_WORKDIR.value, tasks)
  if c.osworld.runs > 0:
    paths["osworld"] = write_osworld_table(_WORKDIR.value, results)
  print("wrote", ", ".join(paths.values()))
  if c.report:
    from mage_jax.report.build import build_report
    print("report:", build_report(_WORKDIR.value)["index"])


def write_osworld_table(workdir: str, results) -> str:
  """Prints OSWorld's per-domain table (mean of the runs) and writes <workdir>/osworld_table.json."""
  from mage_jax.tasks.osworld import leaderboard
  t = leaderboard.table(results)
  print(leaderboard.format_table(t))
  path = os.path.join(workdir, "osworld_table.json")
  with open(path, "w") as f:
    json.dump(t, f, indent=1)
  return path


def write_task_specs(workdir: str, tasks) -> str:
  """<workdir>/tasks.json: each task's instruction and checker spec (what the report shows as
  "what it checked"), so a report needs no access to the suite the run used."""
  path = os.path.join(workdir, "tasks.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump({t.id: {"kind": t.kind, "instruction": t.instruction, "checker": t.checker} for t in tasks},
              f, indent=1, ensure_ascii=False)
  return path


if __name__ == "__main__":
  app.run(main)
