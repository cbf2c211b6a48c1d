"""The proof's vision stage data (issue 36, item 2): click screens for the GUI midtraining that
comes before agent SFT, so the ViT and merger learn to find a coloured button and say where it is.

Train screens are the family's buttons app with 1-3 buttons of distinct colours on distinct slots
of click_colour's 4 x 3 grid (proof_family.slot_xy), every (colour, slot) a *train* pair of the
family's split, and the instruction "Click the <colour> button". No train screen shows a held-out
(colour, slot) pair, so the held-out click_colour screens stay unseen in every stage. The
held-out screens are click_colour's held-out instances themselves (proof_family, split "heldout"):
the stage's click accuracy on them (train/evaluation.py, `eval.click_jsonl`) measures how far the
grounding carries to unseen (colour, slot) pairs.

Extra colours (EXTRA_COLOURS: brown, pink, teal, grey, navy, lime; config data.vision.extra_colours)
sit on *every* slot of train screens and are targets too; they are never the family's colours, so
no held-out pair appears. Without them the model mostly learns which slots a family colour sits on
(held-out pairs 15.5% in the issue-36 diagnostic, `--heldout_pairs`); colours seen on every slot
make it read the place (33.5%, `--extra_colours 6`). Their words are in the base's corpus
(data/copy_corpus.COLOURS) and compact vocabulary (runs/proof_base.family_texts); other names
than the defaults need a base built with them, or the compact SFT refuses their tokens.

Why the grid and not free places (the first design): on the proof's 4 x 128 / 2 x 64 model, a
button at a random pixel place was never located (one answer for every screen after 1,600 steps,
even for a 3 x 3 cell), while the same model on the grid's slots locates it (the issue-36
diagnostic, experiments/grounding_learning.py --target slot; docs/results.md).

The scripted teacher plays each screen through the real harness (sandbox, Xvfb, the Tk app), so
the pixels are those of the evaluation; only the click step is kept (one sample per screen: the
terminate step teaches nothing about the screen), with `meta.target_box`, the target button's
rectangle in the 0..999 units the model clicks in.

  pg.screens("train", 3000, seed=0, family=None)        # TaskPackages proof_ground_train_<i>
  pg.screens("train", 10, extra_colours=())             # the family's train pairs only
  proof_teacher.collect_grounding(out_dir, tasks, workers=6)  # runs/: <out_dir>/episodes.jsonl + grounding.json
"""
from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from mage_jax.tasks import proof_family as pf
from mage_jax.tasks.package import TaskPackage, package_from_dict

BUTTON_H = 30          # tkapps.ROW_H - 6: a button's height in the buttons app
MIN_BUTTONS, MAX_BUTTONS = 1, 3
# name -> Tk colour (the diagnostic's RGB values; "teal" and "lime" are not X11 names)
EXTRA_COLOURS: dict[str, str] = {"brown": "#784619", "pink": "#fa82c8", "teal": "#14aaaa",
                                 "grey": "#6e6e6e", "navy": "#141e64", "lime": "#aae63c"}
DEFAULT_EXTRA = tuple(EXTRA_COLOURS)


def _extra_pairs(extra_colours, family_colours) -> tuple[list[tuple[str, int]], dict[str, str]]:
  """(colour, slot) for every extra colour at every slot, and {name: Tk colour} of the extras."""
  names = [c.strip() for c in (extra_colours.split(",") if isinstance(extra_colours, str) else extra_colours)]
  names = [c for c in names if c]
  bad = [c for c in names if not c.isalpha() or not c.islower()]
  if bad:
    raise ValueError(f"data.vision.extra_colours: {bad} are not lower-case colour words")
  clash = sorted(set(names) & set(family_colours))
  if clash:
    raise ValueError(f"data.vision.extra_colours: {clash} are the family's colours (pools.colours); an extra "
                     "colour goes on every slot, so it must not be one whose slots are split")
  slots = range(pf.SLOT_COLS * pf.SLOT_ROWS)
  return [(c, s) for c in names for s in slots], {c: EXTRA_COLOURS.get(c, c) for c in names}


def _rect(xy: tuple[int, int]) -> tuple[int, int, int, int]:
  x, y = xy
  return x, y, x + pf.BUTTON_W, y + BUTTON_H


def _screen(rng: random.Random, train_pairs: list[tuple[str, int]]) -> list[tuple[str, tuple[int, int]]]:
  """1-3 train (colour, slot) pairs with distinct colours and slots, as (colour, window xy); the
  first is the target. Fewer buttons when a small pool rarely allows that many."""
  n = min(rng.randint(MIN_BUTTONS, MAX_BUTTONS), len(train_pairs))
  while True:
    for _ in range(200):
      pairs = rng.sample(train_pairs, n)
      if len({c for c, _ in pairs}) == n and len({s for _, s in pairs}) == n:
        return [(c, pf.slot_xy(s)) for c, s in pairs]
    n -= 1


def _package(placed: list[tuple[str, tuple[int, int]]], id: str, instruction_colour: str,
             paint: Mapping[str, str]) -> TaskPackage:
  app = {"type": "app", "config": {
      "kind": "buttons", "name": "buttons", "out": f"{pf.H}/clicked.json", "width": pf.SCREEN[0],
      "height": pf.SCREEN[1], "buttons": [c for c, _ in sorted(placed, key=lambda b: b[1][::-1])],
      "colors": {c: paint.get(c, c) for c, _ in placed}, "places": {c: list(xy) for c, xy in placed}}}
  colour = instruction_colour
  d = dict(id=id, kind="gui", max_steps=6, channels=["gui"], apps=["tk"], skills=["proof", "proof:grounding"],
           instruction=f"Click the {colour} button", setup=[app],
           checker={"type": "app_state", "path": "clicked.json", "expected": {"clicked": colour}},
           reference=[pf.click_step(colour, f"I find the {colour} button on the screen and click it."),
                      pf.done_step(f"I clicked the {colour} button, so the task is done.")])
  return package_from_dict(d, source=f"proof_grounding:{id}")


def screens(split: str, n: int, seed: int = 0, family: Mapping[str, Any] | None = None,
            extra_colours: Sequence[str] | str = DEFAULT_EXTRA) -> list[TaskPackage]:
  """`n` click screens. train: grid layouts of train pairs and of the extra colours on any slot
  (module doc), ids proof_ground_train_<i>; heldout: the first `n` held-out click_colour instances
  of the family (their own ids; extra_colours plays no part)."""
  if split == "heldout":
    tasks = [t for t in pf.instances("heldout", seed, None, family) if pf.template_of(t.id) == "click_colour"]
    if n > len(tasks):
      raise ValueError(f"asked for {n} held-out click screens; the family has {len(tasks)}")
    return tasks[:n]
  if split != "train":
    raise ValueError(f"split={split!r}: expected 'train' or 'heldout'")
  pools = pf.value_pools(family)["colour_slots"]
  family_colours = {c for split in ("train", "heldout") for c, _ in pools[split]}
  extra_pairs, paint = _extra_pairs(extra_colours, family_colours)
  train_pairs = [tuple(p) for p in pools["train"]] + extra_pairs
  rng = random.Random(f"proof_grounding:{seed}")
  out = []
  for i in range(n):
    placed = _screen(rng, train_pairs)
    out.append(_package(placed, f"proof_ground_train_{i:05d}", placed[0][0], paint))
  return out


def texts(extra_colours: Sequence[str] | str = DEFAULT_EXTRA) -> list[str]:
  """Every text a train screen of the extra colours holds (instruction, think and Action lines), for
  the base's vocabulary (the family's own colours are in proof_family.all_texts)."""
  out = []
  for c, _ in _extra_pairs(extra_colours, ())[0][::pf.SLOT_COLS * pf.SLOT_ROWS]:
    click, done = _package([(c, pf.slot_xy(0))], "texts", c, {}).reference
    out += [f"Click the {c} button", click["think"], click["action"], done["think"], done["action"]]
  return out


def _box(xy) -> list[int]:
  x0, y0, x1, y1 = _rect(tuple(xy))
  w, h = pf.SCREEN
  return [int(x0 * 1000 / w), int(y0 * 1000 / h), min(999, int((x1 - 1) * 1000 / w)),
          min(999, int((y1 - 1) * 1000 / h))]


def target_box(task: TaskPackage) -> list[int]:
  """[x0, y0, x1, y1] of the instruction's button, in the model's 0..999 units (inclusive)."""
  colour = task.instruction.rsplit(" ", 2)[-2]
  places = next(s["config"]["places"] for s in task.setup if s["type"] == "app")
  return _box(places[colour])


def button_boxes(task: TaskPackage) -> list[list[int]]:
  """The boxes of every button on the screen (target_box's units), target included: a click in one
  that is not the target's picked the wrong button (train/evaluation.py: click_on_button)."""
  places = next(s["config"]["places"] for s in task.setup if s["type"] == "app")
  return [_box(xy) for xy in places.values()]
