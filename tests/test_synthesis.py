"""Step-level reasoning synthesis over HTTP: verification keeps equal calls and rejects different
ones, a kept sample trains exactly a hand-written three-part turn, and the acceptance rate on a
replayed realistic response set (tests/data/synthesis_replay.jsonl, served by forge/replay.py)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mage_jax.tasks.builtin import builtin_packages
from mage_jax.data import render as render_lib
from mage_jax.data import trajectory as tr
from mage_jax.forge import llm
from mage_jax.forge.replay import ReplayServer
from mage_jax.harness.synthesis import SynthesisConfig, Synthesizer, call_difference

REPLAY = os.path.join(os.path.dirname(__file__), "data", "synthesis_replay.jsonl")
# '@app.widget' references of the replayed tasks, resolved as a 640x400 desktop would
WIDGETS = {"@buttons.button:Red": [113, 158], "@form.field:Word": [300, 200], "@form.save": [300, 300],
           "@editor.text": [500, 400]}


def reference_episode(task) -> tr.Episode:
  steps = []
  for i, call in enumerate(task.reference):
    args = dict(call["arguments"])
    if isinstance(args.get("coordinate"), str):
      args["coordinate"] = WIDGETS[args["coordinate"]]
    obs = tr.Observation(None, "ok" if i else None)
    steps.append(tr.Step(obs, "teacher think", call["action"], tr.ToolCall(call["name"], args)))
  return tr.Episode(id=task.id, instruction=task.instruction, steps=steps, source="teacher")


def replay_responder(episodes, records):
  """Finds (task, step) from the request: the instruction opens the first user turn, and the
  assistant turns before the instruction message count the steps already taken."""
  by_instruction = {ep.instruction: ep.id for ep in episodes}

  def respond(messages):
    first_user = next(m["content"] for m in messages if m["role"] == "user")
    text = first_user if isinstance(first_user, str) else first_user[0]["text"]
    task = next(tid for ins, tid in by_instruction.items() if text.startswith(ins))
    step = 1 + sum(m["role"] == "assistant" for m in messages)
    return records[(task, step)]
  return respond


def test_call_difference_normalises():
  ex = tr.ToolCall("computer_use", {"action": "left_click", "coordinate": [100, 200]})
  assert call_difference(ex, "computer_use", {"coordinate": [104, 196], "action": "left_click"}, 5) is None
  assert "coordinate" in call_difference(ex, "computer_use", {"action": "left_click", "coordinate": [106, 200]}, 5)
  assert "tool" in call_difference(ex, "bash", {"command": "x"}, 5)
  sh = tr.ToolCall("bash", {"command": "ls  -la   /tmp"})
  assert call_difference(sh, "bash", {"command": " ls -la /tmp\n"}, 0) is None
  assert call_difference(sh, "bash", {"command": "ls -l /tmp"}, 0) is not None
  ty = tr.ToolCall("computer_use", {"action": "type", "text": "a  b"})
  assert call_difference(ty, "computer_use", {"action": "type", "text": "a b"}, 0) is not None  # typed spaces count
  wait = tr.ToolCall("computer_use", {"action": "wait", "time": 1})
  assert call_difference(wait, "computer_use", {"action": "wait", "time": 1.0}, 0) is None


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
  """The replayed response set run through the synthesizer once (shared by the tests below)."""
  tasks = {t.id: t for t in builtin_packages()}
  with open(REPLAY) as f:
    recs = [json.loads(line) for line in f]
  records = {(r["task"], r["step"]): r["content"] for r in recs}
  episodes = [reference_episode(tasks[tid]) for tid in dict.fromkeys(r["task"] for r in recs)]
  traces = str(tmp_path_factory.mktemp("replay") / "traces.jsonl")
  ledger = llm.Ledger()
  with ReplayServer(traces, responder=replay_responder(episodes, records)) as server:
    syn = Synthesizer(llm.ChatClient(server.url, "teacher"), SynthesisConfig(workers=2), ledger)
    out = syn.run(episodes)
  return syn, out, ledger, recs


def test_replayed_realistic_set_acceptance(replayed):
  syn, out, ledger, recs = replayed
  report = syn.report.to_dict(ledger)
  print("replayed set:", json.dumps(report))
  expected_kept = sum(r["note"].startswith("kept") for r in recs)
  assert report["steps"] == len(recs) == 20 and report["steps_kept"] == expected_kept == 14
  assert report["rejected"] == {"call_mismatch": 2, "empty_action": 1, "parse:text_after_call": 1,
                                "empty_think": 1, "parse:multiple_tool_calls": 1}
  assert sorted(ep.id for ep in out) == ["gui_click_red", "term_hello_file", "term_multiply"]
  assert report["llm"]["calls"] == 20 and report["llm"]["completion_tokens"] > 0 and report["llm"]["dollars"] > 0


def test_kept_sample_renders_like_a_hand_written_turn(replayed, tmp_path):
  syn, out, _, _ = replayed
  ep = next(e for e in out if e.id == "term_multiply")
  # the executed call is kept even though the reply's command had extra spaces
  assert ep.steps[0].tool_call.arguments == {"command": "echo $((37 * 43))"}
  renderer = render_lib.Renderer(render_lib.RenderConfig(prompt_variants=False))
  sample = renderer.render_step(ep, 1)
  target = sample.tokens[sample.loss_mask]
  hand = ("<think>\nI need 37 * 43 printed as the last command's output. Shell arithmetic expansion does "
          "it: $((37 * 43)).\n</think>\n\nAction: Print the product of 37 and 43\n<tool_call>\n"
          '{"name": "bash", "arguments": {"command": "echo $((37 * 43))"}}\n</tool_call><|im_end|>')
  np.testing.assert_array_equal(target, np.asarray(renderer.tok.encode(hand), np.int32))
  # and the written file reads back for launch.pack
  path = str(tmp_path / "synthesized.jsonl")
  tr.write_episodes(path, out)
  assert [e.id for e in tr.read_all([path])] == [e.id for e in out]


def test_judge_rejects_a_contradicting_think(tmp_path):
  task = next(t for t in builtin_packages() if t.id == "gui_click_red")
  ep = reference_episode(task)
  turn = ("<think>\nThe Green button is what I need.\n</think>\n\nAction: Click Green\n<tool_call>\n"
          '{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [113, 158]}}\n</tool_call>')

  def respond(messages):
    if "Executed call" in messages[-1]["content"]:  # the judge node
      return json.dumps({"contradicts": "Green" in messages[-1]["content"], "reason": "names Green, clicks Red"})
    return turn if sum(m["role"] == "assistant" for m in messages) == 0 else (
        "<think>\nDone.\n</think>\n\nAction: Finish\n<tool_call>\n"
        '{"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}\n</tool_call>')

  with ReplayServer(str(tmp_path / "t.jsonl"), responder=respond) as server:
    syn = Synthesizer(llm.ChatClient(server.url, "teacher"), SynthesisConfig(judge=True, on_reject="keep_original"))
    out = syn.run([ep])
  assert syn.report.rejected == {"judge_contradiction": 1} and syn.report.steps_kept == 1
  assert out[0].steps[0].think == "teacher think" and out[0].steps[1].think == "Done."  # original kept
