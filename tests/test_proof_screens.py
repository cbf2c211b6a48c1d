"""Click screens composed from played ones (runs/proof_screens.py): a composed screen and its click
step must be what the harness itself gives for that layout, pixel for pixel; a screen the atlas
cannot rebuild stops the stage; a pair never played is skipped and counted."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from mage_jax.data import trajectory as tr
from mage_jax.runs import proof_screens as ps
from mage_jax.runs import proof_teacher
from mage_jax.tasks import proof_family as pf
from mage_jax.tasks import proof_grounding as pg


def _cover(tasks, limit=4):
  """(played, target): a few screens of `tasks` that together show every button of another one."""
  for j, target in enumerate(tasks):
    need = set(ps.placed(target))
    played = []
    for i, t in enumerate(tasks):
      if i != j and need & set(ps.placed(t)) - {b for p in played for b in ps.placed(p)}:
        played.append(t)
    if need <= {b for p in played for b in ps.placed(p)} and len(played) <= limit and len(need) >= 2:
      return played, target
  raise AssertionError("no layout is covered by a few others")


def test_a_composed_screen_is_the_one_the_harness_draws(tmp_path):
  played, target = _cover(pg.screens("train", 60, seed=3))
  atlas_dir, real_dir = str(tmp_path / "atlas"), str(tmp_path / "real")
  proof_teacher.collect_grounding(atlas_dir, played, workers=2)
  counts = ps.compose_grounding(atlas_dir, played, [target])
  assert counts["composed"] == 1 and counts["played_rebuilt_exactly"] == len(played)
  # the same layout played through the harness (sandbox, Xvfb, the Tk app)
  proof_teacher.collect_grounding(real_dir, [target], workers=1)
  (real,) = list(tr.read_episodes(os.path.join(real_dir, "episodes.jsonl")))
  composed = [e for e in tr.read_episodes(os.path.join(atlas_dir, "episodes.jsonl")) if e.meta.get("composed")]
  assert len(composed) == 1
  c = composed[0]
  a = np.asarray(Image.open(os.path.join(real.root, real.steps[0].observation.screenshot)).convert("RGB"))
  b = np.asarray(Image.open(os.path.join(c.root, c.steps[0].observation.screenshot)).convert("RGB"))
  assert a.shape == b.shape == (pf.SCREEN[1], pf.SCREEN[0], 3)
  assert (a != b).any(-1).sum() == 0
  for field in ("think", "action"):
    assert getattr(c.steps[0], field) == getattr(real.steps[0], field)
  assert c.steps[0].tool_call == real.steps[0].tool_call   # the coordinate the harness resolved
  assert (c.instruction, c.meta["target_box"]) == (real.instruction, real.meta["target_box"])
  report = json.load(open(os.path.join(atlas_dir, "grounding.json")))
  assert report["composed"] == 1 and report["episodes"] == len(played)


# ---- without the harness: synthetic screens that follow the app's rule (a button's pixels depend on
# its (colour, place) alone) or break it
def _paint(buttons, background=(217, 217, 217)):
  w, h = pf.SCREEN
  img = np.empty((h, w, 3), np.uint8)
  img[:] = background
  for colour, (x, y) in buttons:
    rgb = np.frombuffer(colour.encode()[:3].ljust(3, b"\0"), np.uint8)
    img[y:y + pg.BUTTON_H, x:x + pf.BUTTON_W] = rgb
    img[y + 10, x + (x % 7)] = (0, 0, 0)   # a mark that depends on the place
  return img


def _played_dir(root, tasks, corrupt=None):
  os.makedirs(os.path.join(root, "shots"), exist_ok=True)
  eps = []
  for i, t in enumerate(tasks):
    img = _paint(ps.placed(t))
    if i == corrupt:
      img[399, 639] = (1, 2, 3)   # outside every button
    shot = f"shots/{t.id}.png"
    Image.fromarray(img).save(os.path.join(root, shot))
    ep = ps._click_episode(t, shot, root)
    ep.id, ep.meta = f"{t.id}-r0", {k: v for k, v in ep.meta.items() if k != "composed"}
    eps.append(ep)
  tr.write_episodes(os.path.join(root, "episodes.jsonl"), eps)


def test_composes_new_layouts_and_counts_unseen_pairs(tmp_path):
  tasks = pg.screens("train", 100, seed=5)
  played, new = tasks[:40], tasks[40:]
  root = str(tmp_path / "g")
  _played_dir(root, played)
  seen = {b for t in played for b in ps.placed(t)}
  composable = [t for t in new if set(ps.placed(t)) <= seen]
  assert 0 < len(composable) < len(new)   # both branches are exercised
  counts = ps.compose_grounding(root, played, new, progress_every=0)
  assert counts["composed"] == len(composable)
  assert counts["composed_skipped_unseen_pair"] == len(new) - len(composable)
  eps = list(tr.read_episodes(os.path.join(root, "episodes.jsonl")))
  assert len(eps) == len(played) + len(composable)
  for ep, task in zip(eps[len(played):], composable):
    img = np.asarray(Image.open(os.path.join(root, ep.steps[0].observation.screenshot)))
    np.testing.assert_array_equal(img, _paint(ps.placed(task)))
    x, y = ep.steps[0].tool_call.arguments["coordinate"]
    x0, y0, x1, y1 = ep.meta["target_box"]
    assert x0 <= x <= x1 and y0 <= y <= y1


def test_a_screen_the_atlas_cannot_rebuild_stops_it(tmp_path):
  tasks = pg.screens("train", 20, seed=6)
  root = str(tmp_path / "g")
  _played_dir(root, tasks, corrupt=7)
  with pytest.raises(ValueError, match=rf"{tasks[7].id}-r0.*differs from the played one in 1 pixels"):
    ps.compose_grounding(root, tasks, pg.screens("train", 25, seed=6)[20:])


def test_the_data_stage_plays_then_composes(tmp_path):
  from configs import proof
  from mage_jax.runs import proof_steps
  cfg = proof.get_config("data,smoke")
  cfg.vision.update(dict(train_screens=6, heldout_screens=1, composed_screens=40))
  counts = proof_steps.vision_screens(cfg, str(tmp_path))
  report = json.load(open(tmp_path / "grounding" / "grounding.json"))
  assert report["screens"] == 6 and report["played_rebuilt_exactly"] == report["episodes"]
  assert report["composed"] + report["composed_skipped_unseen_pair"] == 40 and report["composed"] > 0
  assert counts == {"train": report["episodes"] + report["composed"], "heldout": 1}
  ids = [e.meta["task_id"] for e in tr.read_episodes(str(tmp_path / "grounding" / "episodes.jsonl"))]
  assert len(set(ids)) == len(ids)   # composed layouts continue the played ones' draw
