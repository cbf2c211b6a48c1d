"""The proof's vision stage data (issue 36, item 2): click screens for the GUI midtraining that
comes before agent SFT, so the ViT and merger learn to find a coloured button and say where it is.

Train screens are the family's buttons app with 2-5 buttons of distinct colours at random pixel
positions anywhere in the 640x400 window (not the 4 x 3 grid of click_colour), and the instruction
"Click the <colour> button". No train screen shows a held-out (colour, slot) layout: a button of
colour c never overlaps the rectangle of a slot held out for c (proof_pools), so the held-out
click_colour screens stay unseen in every stage. The held-out screens are click_colour's
held-out instances themselves (proof_family, split "heldout"): the stage's click accuracy on them
(train/evaluation.py, `eval.click_jsonl`) measures how far the grounding carries to the proof.

The scripted teacher plays each screen through the real harness (sandbox, Xvfb, the Tk app), so
the pixels are those of the evaluation; only the click step is kept (one sample per screen: the
terminate step teaches nothing about the screen), with `meta.target_box`, the target button's
rectangle in the 0..999 units the model clicks in.

  pg.screens("train", 3000, seed=0, family=None)        # TaskPackages proof_ground_train_<i>
  proof_teacher.collect_grounding(out_dir, tasks, workers=6)  # runs/: <out_dir>/episodes.jsonl + grounding.json
"""
from __future__ import annotations

import collections
import random
from typing import Any, Mapping

from mage_jax.tasks import proof_family as pf
from mage_jax.tasks.package import TaskPackage, package_from_dict

BUTTON_H = 30          # tkapps.ROW_H - 6: a button's height in the buttons app
MIN_BUTTONS, MAX_BUTTONS = 2, 5
MARGIN = 4             # pixels between buttons


def _rect(xy: tuple[int, int]) -> tuple[int, int, int, int]:
  x, y = xy
  return x, y, x + pf.BUTTON_W, y + BUTTON_H


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int], margin: int = 0) -> bool:
  return a[0] < b[2] + margin and b[0] < a[2] + margin and a[1] < b[3] + margin and b[1] < a[3] + margin


def held_out_rects(family: Mapping[str, Any] | None = None) -> dict[str, list[tuple[int, int, int, int]]]:
  """colour -> the rectangles of the slots held out for it (no train screen puts it there)."""
  out: dict[str, list] = collections.defaultdict(list)
  for colour, slot in pf.value_pools(family)["colour_slots"]["heldout"]:
    out[colour].append(_rect(pf.slot_xy(slot)))
  return dict(out)


def _screen(rng: random.Random, colours: list[str], banned: dict[str, list]) -> list[tuple[str, tuple[int, int]]]:
  """2-5 buttons of distinct colours at random free positions; none on a held-out rectangle of its
  colour. The first is the target."""
  n = rng.randint(MIN_BUTTONS, min(MAX_BUTTONS, len(colours)))
  chosen = rng.sample(colours, n)
  placed: list[tuple[str, tuple[int, int]]] = []
  for colour in chosen:
    for _ in range(200):
      xy = (rng.randrange(0, pf.SCREEN[0] - pf.BUTTON_W + 1), rng.randrange(0, pf.SCREEN[1] - BUTTON_H + 1))
      r = _rect(xy)
      if any(_overlap(r, _rect(p), MARGIN) for _, p in placed):
        continue
      if any(_overlap(r, b) for b in banned.get(colour, ())):
        continue
      placed.append((colour, xy))
      break
    else:
      raise RuntimeError(f"no free place for a {colour} button after 200 tries")
  return placed


def _package(placed: list[tuple[str, tuple[int, int]]], id: str, instruction_colour: str) -> TaskPackage:
  app = {"type": "app", "config": {
      "kind": "buttons", "name": "buttons", "out": f"{pf.H}/clicked.json", "width": pf.SCREEN[0],
      "height": pf.SCREEN[1], "buttons": [c for c, _ in sorted(placed, key=lambda b: b[1][::-1])],
      "colors": {c: c for c, _ in placed}, "places": {c: list(xy) for c, xy in placed}}}
  colour = instruction_colour
  d = dict(id=id, kind="gui", max_steps=6, channels=["gui"], apps=["tk"], skills=["proof", "proof:grounding"],
           instruction=f"Click the {colour} button", setup=[app],
           checker={"type": "app_state", "path": "clicked.json", "expected": {"clicked": colour}},
           reference=[pf.click_step(colour, f"I find the {colour} button on the screen and click it."),
                      pf.done_step(f"I clicked the {colour} button, so the task is done.")])
  return package_from_dict(d, source=f"proof_grounding:{id}")


def screens(split: str, n: int, seed: int = 0, family: Mapping[str, Any] | None = None) -> list[TaskPackage]:
  """`n` click screens. train: random layouts (module doc), ids proof_ground_train_<i>; heldout:
  the first `n` held-out click_colour instances of the family (their own ids)."""
  if split == "heldout":
    tasks = [t for t in pf.instances("heldout", seed, None, family) if pf.template_of(t.id) == "click_colour"]
    if n > len(tasks):
      raise ValueError(f"asked for {n} held-out click screens; the family has {len(tasks)}")
    return tasks[:n]
  if split != "train":
    raise ValueError(f"split={split!r}: expected 'train' or 'heldout'")
  pools = pf.value_pools(family)
  colours = list(dict.fromkeys(c for s in pf.SPLITS for c, _ in pools["colour_slots"][s]))
  banned = held_out_rects(family)
  rng = random.Random(f"proof_grounding:{seed}")
  out = []
  for i in range(n):
    placed = _screen(rng, colours, banned)
    out.append(_package(placed, f"proof_ground_train_{i:05d}", placed[0][0]))
  return out


def target_box(task: TaskPackage) -> list[int]:
  """[x0, y0, x1, y1] of the instruction's button, in the model's 0..999 units (inclusive)."""
  colour = task.instruction.rsplit(" ", 2)[-2]
  places = next(s["config"]["places"] for s in task.setup if s["type"] == "app")
  x0, y0, x1, y1 = _rect(tuple(places[colour]))
  w, h = pf.SCREEN
  return [int(x0 * 1000 / w), int(y0 * 1000 / h), min(999, int((x1 - 1) * 1000 / w)),
          min(999, int((y1 - 1) * 1000 / h))]
