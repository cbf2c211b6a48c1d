"""Harness evolution: the rule-based proposer finds the step-wasting tool it was not told about,
the score decides the pick, and an invalid LLM-authored diff is rejected (a real HTTP server)."""
from __future__ import annotations

import json

import pytest

from _agent_helpers import StubEnv
from mage_jax.agent import evaluation
from mage_jax.agent.env import Observation
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.slots import LocalSlotPool
from mage_jax.tasks.package import TaskPackage
from mage_jax.evolve.loop import evolve, failure_excerpts
from mage_jax.evolve.search import AuthorNode, Score, SearchSpace
from mage_jax.forge import llm
from mage_jax.forge.replay import ReplayServer
from mage_jax.harness.teacher import NoisyScriptedTeacher
from mage_jax.harness.variant import HarnessVariant, VariantError

COMMANDS = ["echo a > a.txt", "sort b.txt > c.txt", "wc -l d.txt"]
TASKS = [TaskPackage(id=f"t{i}", instruction=f"run {c}", kind="terminal", checker={"type": "file_exists",
                                                                                     "path": "x"},
                     references=[{"channel": "terminal", "calls": [
                         {"name": "bash", "arguments": {"command": c}},
                         {"name": "bash", "arguments": {"command": "ls"}},
                         {"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}]}])
         for i, c in enumerate(COMMANDS)]


class CheckedStubEnv(StubEnv):
  """Scores 1 when the task's reference commands all ran and the episode terminated with success."""

  def reset(self, task):
    self.task, self.ran, self.status = task, [], None
    return Observation(text=None)

  def step(self, name, arguments):
    if name == "bash":
      self.ran.append(arguments["command"])
      return Observation(text="ok")
    self.status = arguments.get("status")
    return Observation(done=True, status=self.status)

  def score(self):
    want = [c["arguments"]["command"] for c in self.task.reference if c["name"] == "bash"]
    return float(self.status == "success" and all(w in self.ran for w in want))


def make_evaluate(tmp_path):
  def evaluate(variant):
    cfg = variant.episode_config(EpisodeConfig(out_dir=str(tmp_path / "shots"), score_settle=0.0))
    pool = LocalSlotPool(CheckedStubEnv, cfg, 2)
    results = evaluation.evaluate(TASKS, lambda t: NoisyScriptedTeacher(p_extra=0.6, p_invalid=0.05, seed=1),
                                  pool, repeats=4)
    assert {r.harness for r in results} == {variant.variant_id}
    return evaluation.summarize(results)[-1], failure_excerpts(results)
  return evaluate


SEED = HarnessVariant(name="seed", extra_tools=("ax_tree",), max_steps=6)
SPACE = SearchSpace(extra_tools=("xdotool",), system_prompts=("Solve the task with as few steps as you can.",))


def test_rule_based_search_prunes_the_wasteful_tool_and_score_changes_the_pick(tmp_path):
  log = tmp_path / "lineage.jsonl"
  res = evolve(SEED, make_evaluate(tmp_path), Score.parse("success_rate:max,mean_steps:min"), SPACE,
               generations=3, log_path=str(log))
  seed_rec = res.records[0]
  assert seed_rec.row["extra_share"] > 0.2        # the teacher does waste steps on the tool
  assert res.best.variant.extra_tools == ()       # found without being told which tool
  assert res.best.diff == {"extra_tools": []} and res.best.parent == SEED.variant_id
  assert res.best.row["mean_steps"] < seed_rec.row["mean_steps"]
  assert res.best.row["success_rate"] >= seed_rec.row["success_rate"]
  lines = [json.loads(x) for x in log.read_text().splitlines()]
  assert [x["id"] for x in lines] == [r.variant.variant_id for r in res.records]
  assert lines[0]["parent"] is None and all(x["parent"] for x in lines[1:])
  assert {x["source"] for x in lines[1:]} == {"rule"}
  # the same lineage under another score picks another variant
  other = evolve(SEED, make_evaluate(tmp_path), Score.parse("mean_steps:max"), SPACE, generations=3)
  assert other.best.variant.variant_id != res.best.variant.variant_id
  assert other.best.variant.extra_tools  # the step-hungriest keeps an extra tool


def _author(url):
  return AuthorNode(llm.ChatClient(url, "author"), llm.Ledger())


def test_llm_author_diff_is_validated(tmp_path):
  replies = iter([json.dumps({"diff": {"extra_tools": ["teleport"]}, "rationale": "more tools"}),
                  json.dumps({"diff": {"max_steps": 0}}),
                  json.dumps({"diff": {"extra_tools": []}, "rationale": "ax_tree wastes steps"})])
  with ReplayServer(str(tmp_path / "traces.jsonl"), responder=lambda messages: next(replies)) as server:
    author = _author(server.url)
    rejected: dict[str, int] = {}
    assert author.propose(SEED, "table", ["task t0: budget"], rejected) is None
    assert author.propose(SEED, "table", [], rejected) is None
    assert rejected == {"invalid_diff diff.extra_tools": 1, "invalid_diff diff.max_steps": 1}
    good = author.propose(SEED, "table after two rejections", [], rejected)
  assert good is not None and good.variant.extra_tools == () and good.source == "llm"
  totals = author.ledger.totals()
  assert totals["calls"] == 3 and totals["completion_tokens"] > 0 and totals["dollars"] > 0


def test_evolve_counts_an_invalid_llm_diff_and_evaluates_a_valid_one(tmp_path):
  replies = iter([json.dumps({"diff": {"extra_tools": ["ax_tree", "ax_tree"]}}),   # duplicate: invalid
                  json.dumps({"diff": {"max_output": 2000}, "rationale": "shorter observations"})])
  with ReplayServer(str(tmp_path / "t.jsonl"), responder=lambda messages: next(replies)) as server:
    res = evolve(SEED, make_evaluate(tmp_path), Score.parse("success_rate:max,mean_steps:min"),
                 SearchSpace(), generations=2, author=_author(server.url))
  assert res.rejected == {"invalid_diff diff.extra_tools": 1}
  llm_recs = [r for r in res.records if r.source == "llm"]
  assert len(llm_recs) == 1 and llm_recs[0].diff == {"max_output": 2000} and llm_recs[0].variant.max_output == 2000


def test_variant_schema_and_identity():
  v = HarnessVariant.from_dict({"extra_tools": ["xdotool"], "max_output": 2000})
  assert v.variant_id == HarnessVariant.from_dict({"max_output": 2000, "extra_tools": ["xdotool"],
                                                   "name": "other"}).variant_id
  assert v.variant_id != HarnessVariant().variant_id
  assert [s["function"]["name"] for s in v.schemas()] == ["computer_use", "bash", "xdotool"]
  with pytest.raises(VariantError, match="unknown fields"):
    v.apply_diff({"tools": []})
  with pytest.raises(VariantError, match="changes nothing"):
    v.apply_diff({"max_output": 2000})
  with pytest.raises(VariantError, match="tool_descriptions"):
    v.apply_diff({"tool_descriptions": {"ax_tree": "x"}})
  r = v.parse('<think>\nx\n</think>\n\nAction: a\n<tool_call>\n{"name": "xdotool", "arguments": '
              '{"command": "key ctrl+s"}}\n</tool_call>')
  assert r.ok and v.channel_of(r.name) == "extra"
  assert HarnessVariant().parse(r.think and '<tool_call>\n{"name": "xdotool", "arguments": {"command": "k"}}'
                                '\n</tool_call>').error_kind == "invalid_call"


def test_score_tolerance_selects_within_the_bound_of_the_best():
  rows = [{"success_rate": 0.976, "mean_steps": 7.2}, {"success_rate": 0.952, "mean_steps": 5.3},
          {"success_rate": 0.93, "mean_steps": 3.0}]
  assert Score.parse("success_rate:max,mean_steps:min").select(rows) == 0
  assert Score.parse("success_rate:max:0.03,mean_steps:min").select(rows) == 1  # 0.93 is 0.046 below the best
  assert Score.parse("success_rate:max:0.05,mean_steps:min").select(rows) == 2
  assert Score.parse("mean_steps:min").select(rows) == 2 and Score.parse("mean_steps").select(rows) == 0
  for bad in ("success_rate:up", "speed:max", "success_rate:max:-1", "success_rate:max:x"):
    with pytest.raises(ValueError, match="evolve.score"):
      Score.parse(bad)
