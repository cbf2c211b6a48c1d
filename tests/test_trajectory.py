"""Native trajectory JSONL: round trip, validation, bad input skipped with file:line and reason."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from mage_jax.agent import tools
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
