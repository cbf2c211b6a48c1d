"""Synthetic trajectories: determinism, valid steps, real shell outputs, the GUI:terminal split."""
from __future__ import annotations

import collections
import hashlib
import json
import os

import numpy as np
import pytest
from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.data import synth, trajectory


def _digest(folder: str) -> str:
  h = hashlib.sha256()
  for dirpath, _, files in sorted(os.walk(folder)):
    for name in sorted(files):
      with open(os.path.join(dirpath, name), "rb") as f:
        h.update(name.encode() + f.read())
  return h.hexdigest()


@pytest.fixture(scope="module")
def synth_set(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("synth"))
  manifest = synth.generate(out, seed=11, episodes=20, grounding=4)
  return out, manifest


def _episodes(out: str, kind: str) -> list[trajectory.Episode]:
  items = list(trajectory.read_episodes(os.path.join(out, f"{kind}.jsonl")))
  bad = [str(i) for i in items if isinstance(i, trajectory.SkippedItem)]
  assert not bad, bad
  return items


def test_deterministic_by_seed(tmp_path, synth_set):
  out, _ = synth_set
  again = str(tmp_path / "again")
  synth.generate(again, seed=11, episodes=20, grounding=4)
  assert _digest(again) == _digest(out)
  other = str(tmp_path / "other")
  synth.generate(other, seed=12, episodes=20, grounding=4)
  assert _digest(other) != _digest(out)


def test_every_step_is_valid_with_think_action_and_call(synth_set):
  out, manifest = synth_set
  for kind in ("gui", "terminal", "hybrid", "grounding"):
    eps = _episodes(out, kind)
    assert len(eps) == manifest["episodes"][kind] and eps
    for ep in eps:
      assert ep.steps and ep.instruction
      for s in ep.steps:
        assert s.think.strip() and s.action.strip() and "\n" not in s.action
        assert tools.validate_call(s.tool_call.name, s.tool_call.arguments) is None
        assert not s.observation.is_empty()
        if s.observation.screenshot:
          with Image.open(ep.image_path(s.observation.screenshot)) as im:
            assert im.size == (640, 400)
      if kind in ("gui", "hybrid"):
        assert all(s.observation.screenshot for s in ep.steps)
      if kind == "terminal":
        assert any(s.tool_call.name == tools.BASH for s in ep.steps)


def test_terminal_observations_are_real_command_outputs(synth_set):
  out, _ = synth_set
  checked = 0
  for ep in _episodes(out, "terminal") + _episodes(out, "hybrid"):
    for prev, nxt in zip(ep.steps, ep.steps[1:]):
      if prev.tool_call.name != tools.BASH:
        continue
      cmd, text = prev.tool_call.arguments["command"], nxt.observation.text
      assert text is not None
      if cmd == "ls":
        assert text == "app.log\ndata.csv\nnotes.txt\n"
        checked += 1
      if cmd.startswith("mkdir -p archive"):
        assert text == "app.log\n"
        checked += 1
      if cmd.startswith("python3 -c") and ep.source == "synth_hybrid":
        # The total typed into the spreadsheet is the number the shell printed.
        typed = [s.tool_call.arguments["text"] for s in ep.steps
                 if s.tool_call.arguments.get("action") == "type"]
        assert typed == [text.strip() + "\n"] and text.strip().isdigit()
        checked += 1
  assert checked >= 2


def _split(out: str) -> collections.Counter:
  calls = collections.Counter()
  for kind in ("gui", "terminal", "hybrid"):
    for ep in _episodes(out, kind):
      calls.update(s.tool_call.name for s in ep.steps)
  return calls


@pytest.mark.parametrize("ratio", [0.68, 0.5])
def test_gui_terminal_split_is_realised_and_reported(tmp_path, synth_set, ratio):
  if ratio == 0.68:
    out, manifest = synth_set
  else:
    out = str(tmp_path / "r")
    manifest = synth.generate(out, seed=2, episodes=20, grounding=0, gui_terminal_ratio=ratio)
  calls = _split(out)  # recounted from the files, independently of the generator's counter
  realised = calls[tools.COMPUTER_USE] / sum(calls.values())
  assert manifest["tool_calls"] == dict(calls)
  assert manifest["realised_gui_terminal_ratio"] == pytest.approx(realised)
  assert abs(realised - ratio) < 0.04, (realised, dict(calls))
  with open(os.path.join(out, "manifest.json")) as f:
    assert json.load(f)["realised_gui_terminal_ratio"] == pytest.approx(realised)


def _clicked_box_pixels(ep) -> np.ndarray:
  """Asserts the grounding click lies in meta.target_box; returns the box's inner pixels
  (int RGB, a 3-pixel margin left out) from the step's screenshot."""
  x0, y0, x1, y1 = ep.meta["target_box"]
  x, y = ep.steps[0].tool_call.arguments["coordinate"]
  assert x0 <= x <= x1 and y0 <= y <= y1
  with Image.open(ep.image_path(ep.steps[0].observation.screenshot)) as im:
    box = [tools.to_pixel(v, im.width if i % 2 == 0 else im.height)
           for i, v in enumerate((x0, y0, x1, y1))]
    return np.asarray(im.convert("RGB")).astype(int)[box[1] + 3:box[3] - 3, box[0] + 3:box[2] - 3]


def test_grounding_click_hits_target_box(synth_set):
  out, _ = synth_set
  for ep in _episodes(out, "grounding"):
    assert ep.stage == 1 and len(ep.steps) == 1
    # The click hits the box, and the box is drawn: most of its pixels have the button colour.
    crop = _clicked_box_pixels(ep)
    assert np.all(crop == synth.BUTTON, axis=-1).mean() > 0.5


def test_small_screens_keep_valid_coordinates_and_targets(tmp_path):
  """Screens smaller than the widget layout are drawn larger and downscaled."""
  out = str(tmp_path / "small")
  synth.generate(out, seed=3, episodes=8, grounding=3, width=320, height=200)
  for kind in ("gui", "hybrid", "grounding"):
    for ep in _episodes(out, kind):
      assert tuple(ep.screen_size) == (320, 200)
      for step in ep.steps:
        assert tools.validate_call(step.tool_call.name, step.tool_call.arguments) is None
        if step.observation.screenshot:
          with Image.open(ep.image_path(step.observation.screenshot)) as im:
            assert im.size == (320, 200)
  for ep in _episodes(out, "grounding"):
    crop = _clicked_box_pixels(ep)
    # Bicubic downscaling blurs edges, so compare colours loosely.
    assert (np.abs(crop - np.array(synth.BUTTON)).sum(-1) < 40).mean() > 0.5
