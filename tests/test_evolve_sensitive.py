"""Harness evolution that can find what helps: with a teacher whose slips depend on the harness
(harness/teacher.HarnessSensitiveTeacher), the search adds the helpful library / tool and prunes
the distracting tool, in both role assignments (so the outcome follows the teacher, not the
search's construction); with an insensitive teacher it changes nothing. Fitness carries prompt +
completion tokens and dollars (priced from an endpoint's usage when the policy reports it, a
real HTTP server here), and the finalists are compared on held-out tasks with paired intervals."""
from __future__ import annotations

import json

import pytest

from mage_jax.agent import evaluation
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.slots import LocalSlotPool
from mage_jax.tasks.package import TaskPackage
from mage_jax.evolve.loop import evolve, failure_excerpts
from mage_jax.evolve.search import Score, SearchSpace, priced
from mage_jax.harness.teacher import HarnessSensitiveTeacher
from mage_jax.harness.variant import HarnessVariant
from mage_jax.llm.pricing import PriceTable
from test_evolve import CheckedStubEnv  # scores 1 when every reference command ran, then success


def _task(name, n=3):
  cmds = [f"step{k} {name}" for k in range(n)]
  return TaskPackage(id=name, instruction=f"run {' then '.join(cmds)}", kind="terminal",
                     checker={"type": "file_exists", "path": "x"},
                     references=[{"channel": "terminal", "calls": [
                         *({"name": "bash", "arguments": {"command": c}} for c in cmds),
                         {"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}]}])


SEARCH = [_task(f"s{i}") for i in range(4)]
HELDOUT = [_task(f"h{i}") for i in range(4)]


PRICES = PriceTable({"default": {"prompt": 0.6, "completion": 2.4}})


def _run(tmp_path, variant, tasks, teacher, repeats):
  cfg = variant.episode_config(EpisodeConfig(out_dir=str(tmp_path / "shots"), score_settle=0.0))
  pool = LocalSlotPool(CheckedStubEnv, cfg, 2)
  return evaluation.evaluate(tasks, lambda t: HarnessSensitiveTeacher(**teacher), pool, repeats=repeats)


def _evaluators(tmp_path, teacher, repeats=6):
  def evaluate(variant):
    results = _run(tmp_path, variant, SEARCH, teacher, repeats)
    return priced(evaluation.summarize(results)[-1], PRICES, "teacher"), failure_excerpts(results)

  def heldout(variant):
    results = _run(tmp_path, variant, HELDOUT, teacher, repeats)
    row = priced(evaluation.summarize(results)[-1], PRICES, "teacher")
    return row, {r.episode_id: float(r.success) for r in results}
  return evaluate, heldout


SCORE = Score.parse("success_rate:max:0.03,dollars_per_task:min")
PROFILES = {  # (teacher profile, seed variant, what a correct search must end with)
    "library helps, xdotool distracts": (
        dict(p_slip=0.2, helps={"library:pptxlib": 0.9}, distractors={"xdotool": 0.7}, derail=0.7, seed=3),
        HarnessVariant(name="seed", extra_tools=("xdotool",), max_steps=10),
        dict(library="pptxlib", tools=())),
    "xdotool helps, ax_tree distracts": (
        dict(p_slip=0.2, helps={"tool:xdotool": 0.9}, distractors={"ax_tree": 0.7}, derail=0.7, seed=3),
        HarnessVariant(name="seed", extra_tools=("ax_tree",), max_steps=10),
        dict(library=None, tools=("xdotool",))),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_search_keeps_what_helps_and_prunes_the_distractor(tmp_path, profile):
  teacher, seed, want = PROFILES[profile]
  lib = tmp_path / "pptxlib"
  lib.mkdir()
  space = SearchSpace(extra_tools=("xdotool", "ax_tree"), libraries={"pptxlib": str(lib)},
                      system_prompts=("Work carefully.",))
  evaluate, heldout = _evaluators(tmp_path, teacher)
  res = evolve(seed, evaluate, SCORE, space, generations=4, heldout=heldout, finalists=2)
  best, seed_rec = res.best, res.records[0]
  assert best.variant.extra_tools == want["tools"], [(r.variant.name, r.diff, r.row["success_rate"])
                                                     for r in res.records]
  assert (dict(best.variant.libraries).get("pptxlib") is not None) == (want["library"] is not None)
  assert best.row["success_rate"] >= seed_rec.row["success_rate"] + 0.2
  # fitness: prompt + completion tokens and dollars (no endpoint: the counted tokens, priced)
  assert all(r.row["dollars_source"] == "price_table" and r.row["dollars_per_task"] > 0
             and r.row["tokens_per_task"] > r.row["output_tokens_per_task"] > 0 for r in res.records)
  # held-out: the finalists and the seed on tasks the search never saw, paired with the seed
  held = res.heldout
  ids = [f["id"] for f in held["finalists"]]
  assert best.variant.variant_id in ids and seed.variant_id in ids
  row = next(f for f in held["finalists"] if f["id"] == best.variant.variant_id)
  assert row["episodes"] == len(HELDOUT) * 6 and row["vs_seed"]["lo"] > 0, row
  assert row["success_ci95"][0] < row["success"] <= row["success_ci95"][1]
  assert held["selected"] == best.variant.variant_id


def test_an_insensitive_teacher_changes_nothing_and_a_tool_costs_prompt_tokens(tmp_path):
  teacher = dict(p_slip=0.2, seed=3)
  seed = HarnessVariant(name="seed", max_steps=10)
  lib = tmp_path / "pptxlib"
  lib.mkdir()
  space = SearchSpace(extra_tools=("xdotool", "ax_tree"), libraries={"pptxlib": str(lib)})
  evaluate, _ = _evaluators(tmp_path, teacher, repeats=3)
  res = evolve(seed, evaluate, SCORE, space, generations=2)
  assert res.best is res.records[0] and len(res.records) == 4
  by_diff = {json.dumps(r.diff): r.row for r in res.records[1:]}
  tool_row = by_diff[json.dumps({"extra_tools": ["xdotool"]})]
  seed_row = res.records[0].row
  assert tool_row["success_rate"] == seed_row["success_rate"]   # the same draws: nothing changed but the prompt
  assert tool_row["prompt_tokens_per_task"] > seed_row["prompt_tokens_per_task"]
  assert tool_row["dollars_per_task"] > seed_row["dollars_per_task"]


def test_endpoint_usage_prices_the_fitness(tmp_path):
  from mage_jax.actions import schema as tools
  from mage_jax.agent.policies import OpenAIChatPolicy
  from mage_jax.forge.replay import ReplayServer
  from mage_jax.llm.client import ChatClient
  done = tools.format_response("Done.", "Finish", "computer_use", {"action": "terminate", "status": "success"})
  with ReplayServer(str(tmp_path / "t.jsonl"), responder=lambda messages: done) as srv:
    client = ChatClient(srv.url, "teacher", prices={"default": {"prompt": 1.0, "completion": 2.0}})
    cfg = HarnessVariant(name="v").episode_config(EpisodeConfig(out_dir=str(tmp_path / "shots"), score_settle=0.0))
    pool = LocalSlotPool(CheckedStubEnv, cfg, 1)
    results = evaluation.evaluate(SEARCH[:2], lambda t: OpenAIChatPolicy(srv.url, "teacher", client=client), pool)
  row = priced(evaluation.summarize(results)[-1], PRICES, "teacher")
  assert row["dollars_source"] == "usage" and row["priced_calls"] == 2
  per_call = [r.dollars for r in results]
  # the server's usage, priced by the client's table (1 $/M prompt, 2 $/M completion), not PRICES
  assert row["dollars_per_task"] == pytest.approx(sum(per_call) / 2) and min(per_call) > 0
  assert all(r.prompt_tokens > 0 for r in results)
  assert row["dollars_per_task"] == pytest.approx(
      (row["prompt_tokens_per_task"] * 1.0 + row["output_tokens_per_task"] * 2.0) / 1e6)
