"""More click screens for the vision stage, composed from the harness's own pixels (issue 36).

Why: the vision stage memorised a fixed pool. On 2,000 screens x 8 passes its train loss fell to
0.016-0.025 while its held-out picks stayed at chance; in the diagnostic (experiments/
grounding_learning.py) the same model binds the named colour when every screen is fresh (0.51-0.59
of button hits on the named one, against 1/3) and not from a fixed pool of 2,000 (0.35)
(docs/results.md, "Issue 36, session 35"). Playing one screen through the harness (a sandbox, Xvfb,
the Tk app started per episode) takes seconds; composing one takes milliseconds (14,000 in 50 s).

How: a train screen of the buttons app (tasks/proof_grounding.py) is the app's empty window plus
1-3 button rectangles, each drawn by Tk from its (colour, slot) alone. So the screens the teacher
played give an atlas: the window's background and, per (colour, place), the button's pixels.
Every played screen is then rebuilt from the atlas and must equal its screenshot pixel for pixel
(else a ValueError names the screen and the count of differing pixels); only then are new layouts
composed. A layout whose pairs the played screens never showed is skipped and counted.

  proof_screens.compose_grounding(out_dir, played_tasks, new_tasks)   # after proof_teacher.collect_grounding
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tr
from mage_jax.tasks import proof_family as pf
from mage_jax.tasks import proof_grounding as pg
from mage_jax.tasks.package import TaskPackage

Place = tuple[str, tuple[int, int]]   # (colour, window xy of the button's top-left corner)


def placed(task: TaskPackage) -> list[Place]:
  """The buttons of a grounding screen, as (colour, xy)."""
  places = next(s["config"]["places"] for s in task.setup if s["type"] == "app")
  return [(c, (int(xy[0]), int(xy[1]))) for c, xy in places.items()]


def _rect(xy: tuple[int, int]) -> tuple[slice, slice]:
  x, y = xy
  return slice(y, y + pg.BUTTON_H), slice(x, x + pf.BUTTON_W)


def _load(path: str) -> np.ndarray:
  with Image.open(path) as im:
    return np.asarray(im.convert("RGB"))


class Atlas:
  """The window's background and each (colour, xy) button's pixels, taken from played screens."""

  def __init__(self, size: tuple[int, int]):
    w, h = size
    self.background = np.zeros((h, w, 3), np.uint8)
    self.known = np.zeros((h, w), bool)       # background pixels seen outside every button
    self.buttons: dict[Place, np.ndarray] = {}

  def add(self, screen: np.ndarray, buttons: list[Place]) -> None:
    if screen.shape != self.background.shape:
      raise ValueError(f"screen of shape {screen.shape}, expected {self.background.shape}")
    outside = np.ones(self.known.shape, bool)
    for colour_xy in buttons:
      outside[_rect(colour_xy[1])] = False
      self.buttons.setdefault(colour_xy, screen[_rect(colour_xy[1])].copy())
    new = outside & ~self.known
    self.background[new] = screen[new]
    self.known |= outside

  def can_compose(self, buttons: list[Place]) -> bool:
    return all(b in self.buttons for b in buttons)

  def compose(self, buttons: list[Place]) -> np.ndarray:
    missing = [b for b in buttons if b not in self.buttons]
    if missing:
      raise KeyError(f"no played screen showed {missing}")
    if not self.known.all():
      # pixels under a button in every played screen: a composed screen may leave them uncovered
      uncovered = np.ones(self.known.shape, bool)
      for _, xy in buttons:
        uncovered[_rect(xy)] = False
      if (uncovered & ~self.known).any():
        raise KeyError("the played screens never showed the background under a button this layout leaves bare")
    out = self.background.copy()
    for colour_xy in buttons:
      out[_rect(colour_xy[1])] = self.buttons[colour_xy]
    return out


def _click_episode(task: TaskPackage, shot: str, root: str) -> tr.Episode:
  """The teacher's click step on a composed screen: its reference click at the target's centre,
  the coordinate the harness resolves for '@buttons.button:<colour>' (agent/env.py)."""
  click = task.reference[0]
  colour = task.instruction.rsplit(" ", 2)[-2]   # "Click the <colour> button"
  x, y = dict(placed(task))[colour]
  w, h = pf.SCREEN
  coordinate = [tools.from_pixel(min(w - 1, round(x + pf.BUTTON_W / 2)), w),
                tools.from_pixel(min(h - 1, round(y + pg.BUTTON_H / 2)), h)]
  step = tr.Step(observation=tr.Observation(screenshot=shot), think=click["think"], action=click["action"],
                 tool_call=tr.ToolCall("computer_use", {"action": "left_click", "coordinate": coordinate}))
  return tr.Episode(id=f"{task.id}-c0", instruction=task.instruction, steps=[step],
                    tools=tr.resolve_tools(["computer_use", "bash"]), screen_size=pf.SCREEN,
                    source="composed", outcome="success", reward=1.0, root=root,
                    meta={"task_id": task.id, "kind": "gui", "skills": list(task.skills), "composed": True,
                          "target_box": pg.target_box(task), "button_boxes": pg.button_boxes(task)})


def compose_grounding(out_dir: str, played: list[TaskPackage], new: list[TaskPackage],
                      progress_every: int = 2000) -> dict[str, Any]:
  """Builds the atlas from <out_dir>/episodes.jsonl (the played screens of `played`), checks that it
  rebuilds every played screen exactly, composes `new`'s screens under <out_dir>/composed/ and
  appends their click episodes to episodes.jsonl. Updates <out_dir>/grounding.json; returns the
  counts."""
  path = os.path.join(out_dir, "episodes.jsonl")
  episodes = [e for e in tr.read_episodes(path, image_check="exists") if isinstance(e, tr.Episode)]
  tasks = {t.id: t for t in played}
  atlas = Atlas(pf.SCREEN)
  shots = []
  for ep in episodes:
    task = tasks.get(ep.meta.get("task_id"))
    if task is None or ep.meta.get("composed"):
      continue
    screen = _load(os.path.join(ep.root, ep.steps[0].observation.screenshot))
    atlas.add(screen, placed(task))
    shots.append((ep.id, screen, placed(task)))
  if not shots:
    raise ValueError(f"{path}: no played grounding screen to take an atlas from")
  for ep_id, screen, buttons in shots:   # the atlas must rebuild what the harness drew
    diff = int((atlas.compose(buttons) != screen).any(-1).sum())
    if diff:
      raise ValueError(f"{path}: episode {ep_id}: the screen rebuilt from the atlas differs from the played one "
                       f"in {diff} pixels; the buttons app does not draw a button from its (colour, place) alone")
  kept, skipped = [], 0
  os.makedirs(os.path.join(out_dir, "composed"), exist_ok=True)
  for i, task in enumerate(new):
    buttons = placed(task)
    if not atlas.can_compose(buttons):
      skipped += 1
      continue
    shot = os.path.join("composed", f"{task.id}.png")
    Image.fromarray(atlas.compose(buttons)).save(os.path.join(out_dir, shot), compress_level=1)
    kept.append(_click_episode(task, shot, out_dir))
    if progress_every and (i + 1) % progress_every == 0:
      print(f"grounding: composed {i + 1}/{len(new)} screens", flush=True)
  tr.write_episodes(path, episodes + kept)
  report_path = os.path.join(out_dir, "grounding.json")
  report = json.load(open(report_path)) if os.path.exists(report_path) else {}
  counts = {"played_rebuilt_exactly": len(shots), "atlas_buttons": len(atlas.buttons),
            "composed": len(kept), "composed_skipped_unseen_pair": skipped}
  report.update(counts)
  with open(report_path, "w") as f:
    json.dump(report, f, indent=1)
  print(f"grounding: {len(kept)}/{len(new)} screens composed from {len(atlas.buttons)} played buttons "
        f"({len(shots)} played screens rebuilt exactly; {skipped} skipped: a pair never played)", flush=True)
  return counts
