"""The vision stage's click screens (tasks/proof_grounding.py): grid layouts, the held-out rule, and
the target box against the real harness's click."""
from __future__ import annotations

import collections

import pytest

from mage_jax.runs import proof_teacher
from mage_jax.tasks import proof_family as pf
from mage_jax.tasks import proof_grounding as pg
from mage_jax.data import trajectory as tr


def _places(task):
  return next(s["config"]["places"] for s in task.setup if s["type"] == "app")


def test_train_screens_are_grid_layouts_of_train_pairs_only():
  tasks = pg.screens("train", 1000, seed=3, extra_colours=())
  assert len({t.id for t in tasks}) == 1000
  pools = pf.value_pools()["colour_slots"]        # the split, read here from the pools
  train, heldout = ({tuple(p) for p in pools[s]} for s in ("train", "heldout"))
  slot_of = {pf.slot_xy(s): s for s in range(pf.SLOT_COLS * pf.SLOT_ROWS)}
  counts, targets = collections.Counter(), set()
  for t in tasks:
    places = _places(t)
    colour = t.instruction.split()[2]
    assert t.instruction == f"Click the {colour} button" and colour in places
    counts[len(places)] += 1
    pairs = {(c, slot_of[tuple(xy)]) for c, xy in places.items()}   # KeyError: off the grid
    assert len({s for _, s in pairs}) == len(pairs)                 # distinct slots
    assert pairs <= train and not pairs & heldout, (t.id, pairs)
    targets.add((colour, slot_of[tuple(places[colour])]))
  assert set(counts) == set(range(pg.MIN_BUTTONS, pg.MAX_BUTTONS + 1))
  assert targets == train            # 1,000 screens cover every train pair as a target
  # deterministic by seed
  assert [t.to_dict() for t in pg.screens("train", 5, seed=3, extra_colours=())] == [t.to_dict() for t in tasks[:5]]
  assert pg.screens("train", 5, seed=4, extra_colours=())[0].to_dict() != tasks[0].to_dict()


def test_extra_colours_sit_on_every_slot_and_never_hold_a_family_pair():
  tasks = pg.screens("train", 2000, seed=5)        # the default extras
  pools = pf.value_pools()["colour_slots"]
  train, heldout = ({tuple(p) for p in pools[s]} for s in ("train", "heldout"))
  family_colours = {c for c, _ in train | heldout}
  extra = set(pg.DEFAULT_EXTRA)
  assert len(extra) == 6 and not extra & family_colours
  slot_of = {pf.slot_xy(s): s for s in range(pf.SLOT_COLS * pf.SLOT_ROWS)}
  targets, seen = set(), set()
  for t in tasks:
    places = _places(t)
    app = next(s["config"] for s in t.setup if s["type"] == "app")
    pairs = {(c, slot_of[tuple(xy)]) for c, xy in places.items()}
    assert not pairs & heldout, (t.id, pairs)
    assert all(c in extra or (c, s) in train for c, s in pairs)
    seen |= pairs
    colour = t.instruction.split()[2]
    targets.add((colour, slot_of[tuple(places[colour])]))
    for c in places:                              # extras are painted with their table colour
      assert app["colors"][c] == pg.EXTRA_COLOURS.get(c, c)
  every_extra_pair = {(c, s) for c in extra for s in range(12)}
  assert every_extra_pair <= targets and train <= targets   # both kinds are targets, on every slot
  share = sum(t.instruction.split()[2] in extra for t in tasks) / len(tasks)
  assert 0.45 < share < 0.7, share                 # 72 extra pairs beside 54 train pairs
  with pytest.raises(ValueError, match="family's colours"):
    pg.screens("train", 1, extra_colours="red,teal")
  with pytest.raises(ValueError, match="lower-case"):
    pg.screens("train", 1, extra_colours=["Teal"])
  assert pg.screens("train", 3, extra_colours="teal, navy")[0].instruction.split()[2] in (
      "teal", "navy", *family_colours)


def test_extra_colour_texts_are_in_the_bases_vocabulary():
  from mage_jax.data import copy_corpus
  from mage_jax.runs import proof_base
  assert set(pg.DEFAULT_EXTRA) <= set(copy_corpus.COLOURS)   # the base is taught to say them
  texts = proof_base.family_texts()
  for c in pg.DEFAULT_EXTRA:
    assert f"Click the {c} button" in texts
    assert any(c in t and "find" in t for t in texts)


def test_heldout_screens_are_the_families_heldout_click_colour_instances():
  h = pg.screens("heldout", 4)
  fam = [t for t in pf.instances("heldout") if pf.template_of(t.id) == "click_colour"][:4]
  assert [t.id for t in h] == [t.id for t in fam]
  with pytest.raises(ValueError, match="held-out click screens"):
    pg.screens("heldout", 10_000)
  with pytest.raises(ValueError, match="split="):
    pg.screens("test", 1)


def test_target_box_units():
  t = pg.screens("heldout", 1)[0]
  colour = t.instruction.split()[2]
  x, y = _places(t)[colour]
  x0, y0, x1, y1 = pg.target_box(t)
  # 0..999 units of the 640x400 screen, as the model clicks (the click's centre lies inside)
  cx, cy = (x + pf.BUTTON_W / 2) * 1000 / 640, (y + pg.BUTTON_H / 2) * 1000 / 400
  assert x0 <= cx <= x1 and y0 <= cy <= y1
  assert x1 - x0 == pytest.approx(pf.BUTTON_W * 1000 / 640, abs=3)
  assert y1 - y0 == pytest.approx(pg.BUTTON_H * 1000 / 400, abs=3)


def test_collect_through_the_harness_keeps_the_click_in_its_box(tmp_path):
  tasks = pg.screens("train", 3, seed=1) + pg.screens("heldout", 1)
  path = proof_teacher.collect_grounding(str(tmp_path / "g"), tasks, workers=2)
  eps = list(tr.read_episodes(path))
  assert len(eps) == 4
  for ep in eps:
    assert len(ep.steps) == 1 and ep.steps[0].observation.screenshot
    call = ep.steps[0].tool_call
    assert call.name == "computer_use" and call.arguments["action"] == "left_click"
    x, y = call.arguments["coordinate"]   # the harness resolved the button's real place
    x0, y0, x1, y1 = ep.meta["target_box"]
    assert x0 <= x <= x1 and y0 <= y <= y1, (ep.id, (x, y), ep.meta["target_box"])
    assert ep.meta["target_box"] in ep.meta["button_boxes"]
    assert len(ep.meta["button_boxes"]) == len(_places(next(t for t in tasks if t.id == ep.meta["task_id"])))


def test_button_boxes_and_the_on_button_figure():
  from mage_jax.train import evaluation
  task = next(t for t in pg.screens("train", 50, seed=2) if len(_places(t)) == 3)
  boxes = pg.button_boxes(task)
  assert len(boxes) == 3 and pg.target_box(task) in boxes
  ep = tr.Episode(id="e", instruction=task.instruction, steps=[], meta={
      "target_box": pg.target_box(task), "button_boxes": boxes})

  def reply(x, y):
    return ('<think>t</think>\nAction: a\n<tool_call>\n{"name": "computer_use", "arguments": '
            f'{{"action": "left_click", "coordinate": [{x}, {y}]}}}}\n</tool_call>')
  other = next(b for b in boxes if b != pg.target_box(task))
  centre = lambda b: ((b[0] + b[2]) // 2, (b[1] + b[3]) // 2)
  tx, ty = centre(pg.target_box(task))
  assert evaluation.click_hit(ep, reply(tx, ty)) == (True, True)
  assert evaluation.click_on_button(ep, reply(tx, ty)) is True
  assert evaluation.click_hit(ep, reply(*centre(other))) == (True, False)
  assert evaluation.click_on_button(ep, reply(*centre(other))) is True      # a button, not the named one
  free = next((x, y) for x in range(0, 1000, 7) for y in range(0, 1000, 7)
              if not any(b[0] <= x <= b[2] and b[1] <= y <= b[3] for b in boxes))
  assert evaluation.click_on_button(ep, reply(*free)) is False
  assert evaluation.click_on_button(ep, "no call") is False
  ep.meta.pop("button_boxes")
  assert evaluation.click_on_button(ep, reply(tx, ty)) is None
