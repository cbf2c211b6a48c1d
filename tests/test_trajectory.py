"""Native trajectory JSONL: round trip, validation, bad input skipped with file:line and reason."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tr


def _png(path, w=64, h=48, color=(10, 20, 30)):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.new("RGB", (w, h), color).save(path)


def _step(shot=None, text=None, name="computer_use", args=None, action="Click OK."):
  return {"observation": {"screenshot": shot, "text": text}, "think": "Look at the screen.",
          "action": action,
          "tool_call": {"name": name, "arguments": args or {"action": "left_click", "coordinate": [5, 9]}}}


def _ep(ep_id, steps, **kw):
  return {"id": ep_id, "instruction": "Do the task.", "steps": steps, **kw}


def test_round_trip(tmp_path):
  _png(str(tmp_path / "img" / "a.png"))
  ep = tr.episode_from_dict(_ep("e1", [_step("img/a.png"), _step(None, "out", "bash", {"command": "ls"})],
                                tools=["computer_use", "bash"], screen_size=[64, 48], source="s",
                                stage=2, outcome="success", reward=1.0), root=str(tmp_path))
  assert ep.tools == list(tools.TOOL_SCHEMAS)
  out = tmp_path / "sub" / "eps.jsonl"
  assert tr.write_episodes(str(out), [ep]) == 1
  line = json.loads(out.read_text())
  assert line["tools"] == ["computer_use", "bash"]  # canonical schemas written as names
  assert line["steps"][0]["observation"]["screenshot"] == "../img/a.png"
  [back] = list(tr.read_episodes(str(out)))
  assert isinstance(back, tr.Episode)
  assert back.steps[0].tool_call.arguments == {"action": "left_click", "coordinate": [5, 9]}
  assert os.path.samefile(back.image_path(back.steps[0].observation.screenshot), tmp_path / "img" / "a.png")
  assert (back.id, back.stage, back.outcome, back.reward, back.screen_size) == ("e1", 2, "success", 1.0, (64, 48))


def test_action_prefix_is_stripped():
  ep = tr.episode_from_dict(_ep("e", [_step(action="Action: Click OK.")]))
  assert ep.steps[0].action == "Click OK."


def write_mixed_file(tmp_path):
  """A JSONL mixing good episodes with every kind of bad item; returns (path, good ids, bad lines)."""
  _png(str(tmp_path / "ok.png"))
  (tmp_path / "garbage.png").write_bytes(b"this is not a png at all")
  lines = [
      json.dumps(_ep("good1", [_step("ok.png"), _step(None, "hi", "bash", {"command": "echo hi"})])),
      '{"id": "broken", "instruction": ',                                           # malformed JSON
      json.dumps(_ep("missing", [_step("nope.png")])),                               # missing image
      json.dumps(_ep("garbage", [_step("garbage.png")])),                            # unreadable image
      json.dumps(_ep("unknown", [_step(name="xdotool", args={"cmd": "x"})])),        # unknown tool
      json.dumps(_ep("badargs", [_step(args={"action": "left_click", "coordinate": [5, 1000]})])),
      json.dumps(_ep("empty", [])),                                                  # empty episode
      "",                                                                            # blank: ignored
      json.dumps(_ep("good2", [_step("ok.png", "t")], tools=["computer_use"])),
      json.dumps(_ep("bashonly", [_step(None, None)], tools=["bash"])),              # tool not offered
      json.dumps(_ep("noinstr", [_step()], instruction=5)),                          # bad field type
  ]
  path = tmp_path / "mixed.jsonl"
  path.write_text("\n".join(lines) + "\n")
  bad = {2: tr.MALFORMED_JSON, 3: tr.MISSING_IMAGE, 4: tr.UNREADABLE_IMAGE, 5: tr.UNKNOWN_TOOL,
         6: tr.INVALID_ARGUMENTS, 7: tr.EMPTY_EPISODE, 10: tr.UNKNOWN_TOOL, 11: tr.INVALID_FIELD}
  return str(path), ["good1", "good2"], bad


def test_bad_input_is_skipped_with_file_line_and_reason(tmp_path):
  path, good, bad = write_mixed_file(tmp_path)
  report = tr.ReadReport()
  eps = list(tr.read_all([path], report=report))
  assert [e.id for e in eps] == good
  assert report.episodes == len(good)
  got = {s.line: s.kind for s in report.skipped_items}
  assert got == bad
  assert sum(report.skipped.values()) == len(bad)
  for s in report.skipped_items:
    assert str(s).startswith(f"{path}:{s.line}")
  by_line = {s.line: s for s in report.skipped_items}
  assert "coordinate" in by_line[6].reason and "steps[0].tool_call.arguments" in by_line[6].reason
  assert "xdotool" in by_line[5].reason
  assert "nope.png" in by_line[3].reason
  assert by_line[6].episode_id == "badargs"


def test_image_check_modes(tmp_path):
  path, _, _ = write_mixed_file(tmp_path)
  kinds = lambda mode: sorted(s.kind for s in tr.read_episodes(path, mode) if isinstance(s, tr.SkippedItem))
  assert tr.UNREADABLE_IMAGE not in kinds("exists") and tr.MISSING_IMAGE in kinds("exists")
  assert tr.MISSING_IMAGE not in kinds("none")
  with pytest.raises(ValueError):
    list(tr.read_episodes(path, "sometimes"))


# ------------------------------------------------------------------------------ importers

from mage_jax.data import importers  # noqa: E402


def _messages_record():
  return {
      "id": "chat-1",
      "tools": json.dumps([tools.COMPUTER_USE_SCHEMA, tools.BASH_SCHEMA]),  # ms-swift stores a string
      "images": ["shots/0.png", "shots/1.png"],
      "messages": [
          {"role": "system", "content": "You are helpful."},
          {"role": "user", "content": "<image>Rename report.txt to final.txt."},
          {"role": "assistant", "reasoning_content": "A shell command is simplest.",
           "content": "Action: Rename the file with mv.",
           "tool_calls": [{"type": "function", "function": {
               "name": "bash", "arguments": "{\"command\": \"mv report.txt final.txt\"}"}}]},
          {"role": "tool", "content": "<image>(no output)"},
          {"role": "assistant",
           "content": "<think>\nThe file is renamed.\n</think>\n\nAction: Finish.\n<tool_call>\n"
                      "{\"name\": \"computer_use\", \"arguments\": {\"action\": \"terminate\", \"status\": \"success\"}}"
                      "\n</tool_call>"},
          {"role": "tool", "content": "done"},  # the observation after the last action: dropped
      ]}


def test_messages_import_round_trips_and_renders(tmp_path):
  for k in range(2):
    _png(str(tmp_path / "shots" / f"{k}.png"), 64 + 32 * k, 64)
  sharegpt = {"conversations": [
      {"from": "human", "value": "Open the menu.<image>"},
      {"from": "gpt", "value": "Action: Click the menu."},
      {"from": "function_call", "value": json.dumps(
          {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1, 2]}})}],
      "images": ["shots/1.png"]}
  bad = dict(_messages_record(), images=["shots/0.png"])  # 2 placeholders, 1 image
  two = _messages_record()
  two["messages"][2]["tool_calls"] *= 2
  src = tmp_path / "chat.jsonl"
  src.write_text("\n".join(json.dumps(r) for r in (_messages_record(), sharegpt, bad, two)) + "\n")
  items = list(importers.read_messages_file(str(src), source="chat", stage=3, parallel_calls="skip"))
  ep, ep2 = items[0], items[1]
  assert isinstance(ep, tr.Episode) and isinstance(ep2, tr.Episode)
  assert [(s.line, s.kind) for s in items[2:]] == [(3, tr.INVALID_FIELD), (4, "parallel_calls")]
  assert "placeholders" in items[2].reason and "2 tool calls in one turn" in items[3].reason
  # By default the two calls become two steps; the one result after them stays the observation
  # of the next turn, and the second call (no result of its own) sees an empty observation.
  split = importers.episode_from_messages(two, str(tmp_path))
  assert [s.tool_call.arguments for s in split.steps[:2]] == [{"command": "mv report.txt final.txt"}] * 2
  assert split.steps[1].observation.is_empty() and split.steps[2].observation.text == "(no output)"
  assert split.meta["import"] == {"split_turns": 1}
  assert split.meta["filled"] == [{"step": 2, "action": "template", "think": "template"}]
  assert ep.id == "chat-1" and ep.instruction == "Rename report.txt to final.txt."
  assert ep.source == "chat" and ep.stage == 3 and ep.meta == {"system": "You are helpful."}
  s1, s2 = ep.steps
  assert (s1.observation.screenshot, s1.observation.text) == ("shots/0.png", None)
  assert (s1.think, s1.action) == ("A shell command is simplest.", "Rename the file with mv.")
  assert s1.tool_call.arguments == {"command": "mv report.txt final.txt"}
  assert (s2.observation.screenshot, s2.observation.text) == ("shots/1.png", "(no output)")
  assert (s2.think, s2.action, s2.tool_call.name) == ("The file is renamed.", "Finish.", "computer_use")
  assert ep2.id == "chat-2" and ep2.steps[0].observation.screenshot == "shots/1.png"
  assert ep2.steps[0].tool_call.arguments["coordinate"] == [1, 2]
  # Native round trip, then render both steps.
  out = tmp_path / "native" / "eps.jsonl"
  tr.write_episodes(str(out), [ep])
  [back] = list(tr.read_episodes(str(out)))
  assert tr.episode_to_dict(back) == tr.episode_to_dict(ep, None) | {
      "steps": tr.episode_to_dict(back)["steps"]}
  assert back.steps[1].observation.screenshot == "../shots/1.png"
  from mage_jax.data import render
  samples = render.Renderer(render.RenderConfig(prompt_variants=False)).render_episode(back)
  assert [len(s.images) for s in samples] == [1, 2]
  assert samples[1].images[1].shape == (64, 96, 3)


def test_grounding_import_renders_one_click(tmp_path):
  _png(str(tmp_path / "g.png"), 1000, 500)
  recs = [{"image": "g.png", "instruction": "the Save button", "box": [100, 50, 300, 150]},
          {"image": "g.png", "instruction": "Click OK", "point": [0.5, 1.0], "coord_space": "relative",
           "click": "double_click", "think": "OK is at the bottom."},
          {"image": "none.png", "instruction": "x", "point": [1, 1]},
          {"image": "g.png", "instruction": "x", "box": [5, 5, 1, 1]}]
  src = tmp_path / "ground.jsonl"
  src.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
  items = list(importers.read_grounding_file(str(src)))
  ep, ep2 = items[0], items[1]
  assert [(s.line, s.kind) for s in items[2:]] == [(3, tr.MISSING_IMAGE), (4, tr.INVALID_FIELD)]
  [step] = ep.steps
  # centre (200, 100) px on a 1000x500 image: round(200*999/999), round(100*999/499)
  assert step.tool_call.arguments == {"action": "left_click", "coordinate": [200, 200]}
  assert step.action == "Left click the Save button."
  assert ep.stage == 1 and ep.source == "grounding" and ep.screen_size == (1000, 500)
  g = ep.meta["grounding"]
  assert g["box"] == [100, 50, 300, 150] and g["box_999"] == [100, 100, 300, 300]
  assert ep2.steps[0].tool_call.arguments == {"action": "double_click", "coordinate": [500, 999]}
  assert ep2.steps[0].action == "Click OK."
  from mage_jax.data import render
  [s] = render.Renderer(render.RenderConfig(mask_think_body=True)).render_episode(ep2)
  assert s.meta["grounding"]["coordinate"] == [500, 999] and len(s.images) == 1
  tok = render.Renderer().tok
  trained = tok.decode(s.tokens[s.loss_mask])
  assert trained.startswith("<think></think>\n\nAction: Click OK.\n<tool_call>\n")
  assert '"coordinate": [500, 999]' in trained and "bottom" not in trained
