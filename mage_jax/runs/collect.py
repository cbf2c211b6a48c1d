"""launch.collect as a function: a suite through a harness variant, each episode kept or rejected
by harness/collect.py's Collector, then (with synthesis.base_url) reasoning synthesis over the kept
trajectories. Reads configs/evolve.py's config."""
from __future__ import annotations

import json
import os
from typing import Any

from tqdm import tqdm

from mage_jax.forge import llm
from mage_jax.harness import collect as collect_lib
from mage_jax.harness import synthesis
from mage_jax.runs import suite_run as suite


def run_collection(c, workdir: str, progress: bool = True) -> dict[str, Any]:
  """launch.collect as a function (configs/evolve.py's config): returns the report it writes."""
  variant = suite.load_harness(c)
  toolset = variant.toolset if variant is not None else c.episode.toolset
  tasks = suite.gated_tasks(c, suite.env_factory_for(c, variant))
  col = collect_lib.Collector(workdir, toolset)
  total = len(tasks) * c.repeats
  bar = tqdm(total=total, initial=len(col.done), disable=not progress, desc="collect", unit="ep")

  def on_result(res):
    col.add(res)
    r = col.report
    bar.set_postfix(success=f"{r.successes / max(1, r.episodes):.0%}", kept=r.kept)
    bar.update(1)

  suite.run_suite(c, workdir, tasks, variant, suite.make_policy_factory(c.policy), on_result=on_result,
                  skip=col.done)
  bar.close()
  report = {"harness": variant.variant_id if variant is not None else "", "collection": col.report.to_dict()}
  s = c.synthesis
  if s.base_url:
    client = llm.client_from_config(s)
    cfg = synthesis.SynthesisConfig(full_responses=c.episode.full_responses, visual_turns=c.episode.visual_turns,
                                    context_len=c.episode.context_len, coord_tolerance=s.coord_tolerance,
                                    judge=s.judge, on_reject=s.on_reject, workers=s.workers)
    report["synthesis"] = synthesis.synthesize_file(col.traj_path, os.path.join(workdir, "synthesized.jsonl"),
                                                   client, cfg, llm.Ledger())
  with open(os.path.join(workdir, "collect_report.json"), "w") as f:
    json.dump(report, f, indent=1)
  return report
