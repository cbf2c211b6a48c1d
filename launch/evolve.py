"""Evolve the teacher's harness: evaluate variants with a teacher on a suite, propose, select.

  python -m launch.evolve --config=configs/evolve.py:scripted --workdir=workdirs/evolve
  python -m launch.evolve --config=configs/evolve.py:scripted,tiny --workdir=workdirs/evolve_tiny

Starts from config.harness (the seed variant), evaluates every proposed variant through the same
slot pool path as launch.eval (mage_jax.runs.suite_run.run_suite), and writes <workdir>/lineage.jsonl (one
record per variant: id, parent, diff, source, metrics, score), <workdir>/evolution.md (the
table), <workdir>/selected.json (the chosen variant: pass it to launch.eval / launch.collect as
--config.harness: the held-out pick among the finalists when evolve.heldout_share > 0, else the
search's best), <workdir>/variants/<id>/ (each variant's results, episodes, steps) and
<workdir>/heldout/<id>/ (the finalists' held-out runs).
"""
from __future__ import annotations

import json
import os

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/evolve.py:scripted", "Evolve config.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/evolve", "Output directory.")


def main(argv):
  del argv
  from mage_jax.runs import suite_run as suite
  from mage_jax.agent import evaluation
  from mage_jax.evolve.loop import evolve, failure_excerpts, table
  from mage_jax.evolve import heldout as H
  from mage_jax.evolve.search import AuthorNode, Score, SearchSpace, priced
  from mage_jax.forge import llm
  from mage_jax.llm.pricing import PriceTable
  c, workdir = _CONFIG.value, _WORKDIR.value
  suite.require_sandbox("launch.evolve")
  seed = suite.load_harness(c)
  if seed is None:
    raise app.UsageError("launch.evolve needs a seed variant: --config.harness=configs/harness.py:<arg>")
  score = Score.parse(c.evolve.score)
  tasks, held_tasks = H.split_tasks(suite.gated_tasks(c, suite.env_factory_for(c, seed)), c.evolve.heldout_share)
  policy_factory = suite.make_policy_factory(c.policy)
  prices = PriceTable(dict(c.policy.prices))

  def run(variant, which, task_list):
    out = os.path.join(workdir, which, variant.variant_id)
    results = suite.run_suite(c, out, task_list, variant, policy_factory)
    rows = evaluation.summarize(results)
    rows[-1] = priced(rows[-1], prices, c.policy.model)  # dollars: the endpoint's usage, else priced tokens
    evaluation.write_results(out, results, rows, {"harness": variant.to_dict()})
    return rows[-1], results

  def evaluate(variant):
    row, results = run(variant, "variants", tasks)
    return row, failure_excerpts(results)

  def evaluate_heldout(variant):
    row, results = run(variant, "heldout", held_tasks)
    return row, {r.episode_id: float(r.success) for r in results}

  ledger = llm.Ledger()
  author = None
  if c.author.base_url:
    author = AuthorNode(llm.client_from_config(c.author), ledger)
  e = c.evolve
  space = SearchSpace(extra_tools=list(e.extra_tools), libraries=dict(e.libraries),
                      system_prompts=list(e.system_prompts), max_output=list(e.max_output))
  log_path = os.path.join(workdir, "lineage.jsonl")
  if os.path.exists(log_path):
    os.remove(log_path)  # one run's lineage; each variant's results stay under variants/<id>
  res = evolve(seed, evaluate, score, space, generations=e.generations, max_children=e.max_children,
               author=author, log_path=log_path, finalists=e.finalists,
               heldout=evaluate_heldout if held_tasks else None,
               on_record=lambda r: print(f"[gen {r.generation}] {r.variant.name} {r.variant.variant_id} "
                                         f"({r.source} {json.dumps(r.diff)[:80]}): success "
                                         f"{r.row['success_rate']:.1%} steps {r.row['mean_steps']:.2f}",
                                         flush=True))
  text = table(res.records, score, res.best)
  chosen = res.best
  summary = {"search_best": res.best.variant.variant_id, "generations": res.generations,
             "search_tasks": len(tasks), "heldout_tasks": len(held_tasks),
             "llm_rejected": res.rejected, "llm": ledger.totals()}
  if res.heldout is not None:
    text += "\n\nFinalists on held-out tasks:\n\n" + H.table(res.heldout)
    chosen = res.heldout["selected_record"]
    summary["heldout"] = {k: v for k, v in res.heldout.items() if k != "selected_record"}
  summary["selected"] = chosen.variant.variant_id
  with open(os.path.join(workdir, "evolution.md"), "w") as f:
    f.write(text + "\n\n" + json.dumps(summary, indent=1) + "\n")
  with open(os.path.join(workdir, "selected.json"), "w") as f:
    json.dump(chosen.variant.to_dict(), f, indent=1)
  print(text)
  print(json.dumps(summary))


if __name__ == "__main__":
  app.run(main)
