"""Collect teacher trajectories under a harness variant; optionally synthesize step reasoning.

  python -m launch.collect --config=configs/evolve.py:scripted,collect \
      --config.harness=workdirs/evolve/selected.json --workdir=workdirs/collect
  python -m launch.collect --config=configs/evolve.py:openai,collect --config.policy.base_url=http://host:8000/v1 \
      --config.synthesis.base_url=http://host:8000/v1 --workdir=workdirs/collect_llm

Runs every (task, repeat) job through the slot pool (mage_jax.agent.suite_run.run_suite, the
launch.eval path) with a progress bar of success so far; keeps checker-score-1 episodes in the
student's schema (mage_jax/harness/collect.py) in <workdir>/trajectories.jsonl and counts the
rest by reason in <workdir>/collect_report.json. Rerunning the same command resumes (finished
jobs are in <workdir>/collect_state.jsonl). With config.synthesis.base_url, every kept step
gets one synthesis call (mage_jax/data/synthesis.py): <workdir>/synthesized.jsonl, ready for
launch.pack, and the synthesis counts in the report.
"""
from __future__ import annotations

import json
import os

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/evolve.py:scripted,collect", "Collect config.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/collect", "Output directory.")


def collect(c, workdir: str, progress: bool = True) -> dict:
  """The whole command as a function (the tests call it): returns the report it writes."""
  from tqdm import tqdm
  from mage_jax.agent import suite_run as suite
  from mage_jax.harness.collect import Collector
  variant = suite.load_harness(c)
  toolset = variant.toolset if variant is not None else c.episode.toolset
  tasks = suite.gated_tasks(c, suite.env_factory_for(c, variant))
  col = Collector(workdir, toolset)
  total = len(tasks) * c.repeats
  bar = tqdm(total=total, initial=len(col.done), disable=not progress, desc="collect", unit="ep")

  def on_result(res):
    col.add(res)
    bar.set_postfix(kept=col.report.kept, success=f"{col.report.acceptance:.0%}")
    bar.update(1)

  suite.run_suite(c, workdir, tasks, variant, suite.make_policy_factory(c.policy), on_result=on_result,
                  skip=col.done)
  bar.close()
  report = {"harness": variant.variant_id if variant is not None else "", "collection": col.report.to_dict()}
  s = c.synthesis
  if s.base_url:
    from mage_jax.harness import synthesis
    from mage_jax.forge import llm
    client = llm.ChatClient(s.base_url, s.model, max_tokens=s.max_tokens, temperature=s.temperature)
    cfg = synthesis.SynthesisConfig(full_responses=c.episode.full_responses, visual_turns=c.episode.visual_turns,
                                    context_len=c.episode.context_len, coord_tolerance=s.coord_tolerance,
                                    judge=s.judge, on_reject=s.on_reject, workers=s.workers)
    report["synthesis"] = synthesis.synthesize_file(col.traj_path, os.path.join(workdir, "synthesized.jsonl"),
                                                   client, cfg, llm.Ledger())
  with open(os.path.join(workdir, "collect_report.json"), "w") as f:
    json.dump(report, f, indent=1)
  return report


def main(argv):
  del argv
  from mage_jax.agent.suite_run import require_sandbox
  require_sandbox("launch.collect")
  c = _CONFIG.value
  print(json.dumps(collect(c, _WORKDIR.value, c.collect.progress), indent=1))


if __name__ == "__main__":
  app.run(main)
