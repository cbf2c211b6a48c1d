"""Forge's rounds with a non-scripted student: an OpenAI-compatible endpoint on loopback (the
replay server answering like a model that solves tasks from the suite's references, except the
CSV sums over the 'qty' column, where it gives up). The round report must show per-skill success
over >= 8 episodes with 95% intervals, and the student's grouped failures must become a child
skill (the parameter region column=qty) whose packages pass the same sandbox gates next round."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _forge_skills  # noqa: E402,F401  registers the test skills
from _agent_helpers import needs_sandbox  # noqa: E402
from mage_jax.actions import schema as tools  # noqa: E402
from mage_jax.forge import engine, replay  # noqa: E402
from test_forge_engine import tiny_config  # noqa: E402


def endpoint_student(suite_dir):
  """A responder that plays the package whose instruction the conversation holds: its reference
  call number (assistant turns so far + 1), or a give-up when the task sums the 'qty' column."""
  def respond(messages):
    text = "\n".join(str(m.get("content")) for m in messages if m["role"] == "user")
    turn = sum(m["role"] == "assistant" for m in messages)
    for name in sorted(os.listdir(suite_dir)):
      with open(os.path.join(suite_dir, name, "task.json")) as f:
        pkg = json.load(f)
      if pkg["instruction"] in text:
        break
    else:
      raise AssertionError("the student was asked about a task not in the suite")
    calls = pkg["references"][0]["calls"]
    if "'qty'" in pkg["instruction"] or turn >= len(calls):
      call = {"name": "computer_use", "arguments": {"action": "terminate", "status": "failure"}}
    else:
      call = calls[turn]
    return tools.format_response(f"Step {turn + 1}.", "Act", call["name"], call["arguments"])
  return respond


@needs_sandbox
def test_endpoint_student_round_reports_intervals_and_grows_a_gated_child_skill(tmp_path):
  c = tiny_config(tmp_path / "w", skills=["test.text.upper", "test.csv.sum"], rounds=2, attempts_per_skill=3)
  suite = os.path.join(c["workdir"], "suite")
  with replay.ReplayServer(str(tmp_path / "t.jsonl"), responder=endpoint_student(suite)) as srv:
    c["student"] = dict(c["student"], kind="openai", base_url=srv.url, model="student", per_skill=8,
                        max_steps=4, timeout_s=60.0)
    c["children"] = dict(c["children"], enabled=True)
    m = engine.run_forge(c)
    assert srv.misses > 0  # every student turn went over HTTP
  r1, r2 = m["rounds"]
  assert r1["student_kind"] == "openai"
  per = r1["student_per_skill"]
  assert set(per) == {"test.text.upper", "test.csv.sum"}
  for s, v in per.items():
    assert v["episodes"] >= 8 and v["ci95"][0] <= v["success"] <= v["ci95"][1], (s, v)
  assert per["test.text.upper"]["success"] == 1.0 and per["test.text.upper"]["ci95"][0] > 0.6
  assert 0 < per["test.csv.sum"]["success"] < 1   # fails exactly where the column is qty
  # the failures, grouped, became one child skill: column=qty, reason wrong_result
  kids = [x for x in r1["children"] if x["accepted"]]
  assert [(x["parent"], x["fixed"], x["reason"]) for x in kids] == [("test.csv.sum", {"column": "qty"}, "wrong_result")]
  child = kids[0]["id"]
  assert re.fullmatch(r"test\.csv\.sum_column_qty", child) and kids[0]["region_failure_rate"] == 1.0
  # round 2 generated and gated it like any skill: accepted packages, all over the qty column
  assert r2["child_skills_accepted_tasks"].get(child, 0) >= 1, r2["rejections_by_skill"].get(child)
  from mage_jax.tasks.package import load_suite
  mine = [p for p in load_suite(m["suite"]) if p.skills[0] == child]
  assert mine and all("'qty'" in p.instruction for p in mine)
  assert r2["student_per_skill"][child]["success"] == 0.0   # the region the student cannot do


@dataclasses.dataclass
class _ClickTask:
  id: str
  references: list

  @property
  def reference(self):
    return self.references[0]["calls"]


def test_noisy_student_clicks_wrong_when_a_slip_hid_the_widget():
  from mage_jax.agent.episode import PolicyRequest
  from mage_jax.forge.student import NoisyScriptedPolicy

  def resolve(args):  # the env's '@app.widget' lookup after a missed scroll
    if str(args.get("coordinate", "")).startswith("@"):
      raise KeyError("widget 'item:x' of app 'picker' is not on screen")
    return args
  task = _ClickTask("t", [{"channel": "gui", "calls": [{"name": "computer_use", "arguments": {
      "action": "left_click", "coordinate": "@picker.item:x"}}]}])
  out = NoisyScriptedPolicy(0.0, "s").act(PolicyRequest(task, 1, None, None, [], resolve))
  assert '"coordinate": [0, 0]' in out.text and "left_click" in out.text
