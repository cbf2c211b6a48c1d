"""Synthetic trajectories for tests and the demo, deterministic by seed.

- GUI episodes: PIL-rendered screens (a form with text fields and a button, a
  spreadsheet grid, a file browser) and `computer_use` calls whose coordinates
  point at the drawn widgets.
- Terminal episodes: `bash` calls whose observations are the REAL outputs of
  the commands, run with subprocess in a temporary working directory seeded
  with files (only deterministic commands: no timestamps, no temp paths).
- Hybrid episodes: shell work whose result is entered in a GUI spreadsheet.
- Stage-1 grounding samples: a screenshot, an instruction and a target box,
  as one-step episodes whose call clicks the box centre (meta.target_box).

Episode kinds are chosen greedily so that the realised GUI:terminal split of
tool calls (`computer_use` vs `bash`, over trajectory episodes) tracks the
requested ratio; the manifest reports the realised split.
"""
from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import tempfile
from typing import Any, Callable

from PIL import Image, ImageDraw, ImageFont

from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tj

BG, WINDOW, TITLE, BORDER, TEXT = (236, 239, 244), (255, 255, 255), (52, 92, 160), (120, 124, 130), (20, 20, 20)
BUTTON, FOCUS, GRID = (70, 130, 210), (255, 246, 200), (200, 204, 210)
FIRST_NAMES = ["Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Edsger", "Margaret", "Dennis"]
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "lambda"]


def _font(size: int = 14) -> ImageFont.ImageFont:
  return ImageFont.load_default(size)


class Canvas:
  """A screen with one window; helpers return the boxes they draw (pixels)."""

  def __init__(self, width: int, height: int, title: str):
    self.w, self.h = width, height
    self.im = Image.new("RGB", (width, height), BG)
    self.d = ImageDraw.Draw(self.im)
    self.d.rectangle([8, 8, width - 9, height - 9], fill=WINDOW, outline=BORDER)
    self.d.rectangle([8, 8, width - 9, 34], fill=TITLE)
    self.d.text((18, 13), title, fill=(255, 255, 255), font=_font(14))

  def text(self, xy: tuple[int, int], s: str, size: int = 14, fill=TEXT) -> None:
    self.d.text(xy, s, fill=fill, font=_font(size))

  def field(self, box: tuple[int, int, int, int], value: str, focused: bool) -> None:
    self.d.rectangle(box, fill=FOCUS if focused else WINDOW, outline=TITLE if focused else BORDER,
                     width=2 if focused else 1)
    self.text((box[0] + 6, box[1] + 6), value)

  def button(self, box: tuple[int, int, int, int], label: str) -> None:
    self.d.rounded_rectangle(box, radius=5, fill=BUTTON)
    self.text((box[0] + 12, box[1] + 8), label, fill=(255, 255, 255))


def _center(box: tuple[int, int, int, int], w: int, h: int) -> list[int]:
  """Pixel box centre -> [0, 999] coordinates."""
  return [tools.from_pixel((box[0] + box[2]) // 2, w), tools.from_pixel((box[1] + box[3]) // 2, h)]


def _to_unit_box(box: tuple[int, int, int, int], w: int, h: int) -> list[int]:
  return [tools.from_pixel(box[0], w), tools.from_pixel(box[1], h),
          tools.from_pixel(box[2], w), tools.from_pixel(box[3], h)]


# A scenario step before it is written: screenshot (or None), text observation, response.
StepSpec = tuple[Image.Image | None, str | None, str, str, str, dict[str, Any]]


class _Spreadsheet:
  """A grid A..F x 1..10 with some numbers; `render` shows the current state."""

  COLS = "ABCDEF"

  def __init__(self, rng: random.Random, w: int, h: int, name: str):
    self.w, self.h, self.name = w, h, name
    self.cell_w, self.cell_h = (w - 90) // 6, max(18, (h - 110) // 11)
    self.values = {(c, r): str(rng.randint(1, 99)) for c in range(3) for r in range(1, 6)}
    self.selected: tuple[int, int] | None = None
    self.saved = True  # unsaved ('*') only after an edit

  def box(self, col: int, row: int) -> tuple[int, int, int, int]:
    x0, y0 = 60 + col * self.cell_w, 70 + row * self.cell_h
    return (x0, y0, x0 + self.cell_w, y0 + self.cell_h)

  def render(self) -> Image.Image:
    cv = Canvas(self.w, self.h, f"{self.name}{'' if self.saved else ' *'} - Sheets")
    for c in range(6):
      cv.text((self.box(c, 0)[0] + self.cell_w // 2 - 4, 50), self.COLS[c])
    for r in range(1, 11):
      cv.text((24, self.box(0, r)[1] + 3), str(r))
      for c in range(6):
        b = self.box(c, r)
        sel = self.selected == (c, r)
        cv.d.rectangle(b, fill=FOCUS if sel else WINDOW, outline=TITLE if sel else GRID,
                       width=2 if sel else 1)
        if (c, r) in self.values:
          cv.text((b[0] + 4, b[1] + 3), self.values[(c, r)], size=12)
    return cv.im


def _gui_spreadsheet(rng: random.Random, w: int, h: int) -> tuple[str, list[StepSpec]]:
  sheet = _Spreadsheet(rng, w, h, rng.choice(["budget.xlsx", "sales.xlsx", "grades.xlsx"]))
  col, row = rng.randint(3, 5), rng.randint(2, 9)
  value = str(rng.randint(100, 999))
  cell = f"{sheet.COLS[col]}{row}"
  instruction = f"In {sheet.name}, enter {value} in cell {cell} and save the file."
  steps: list[StepSpec] = []
  click = rng.choice(["left_click", "double_click"])
  steps.append((sheet.render(), None,
                f"The spreadsheet {sheet.name} is open. Cell {cell} is empty, so I select it first.",
                f"{'Double-click' if click == 'double_click' else 'Click'} cell {cell}",
                tools.COMPUTER_USE, {"action": click, "coordinate": _center(sheet.box(col, row), w, h)}))
  sheet.selected = (col, row)
  steps.append((sheet.render(), None, f"Cell {cell} is selected. I type the value {value}.",
                f"Type {value}", tools.COMPUTER_USE, {"action": "type", "text": value}))
  sheet.values[(col, row)], sheet.saved = value, False
  steps.append((sheet.render(), None, "The value is in the cell; pressing Enter commits it.",
                "Press Enter", tools.COMPUTER_USE, {"action": "key", "keys": ["enter"]}))
  sheet.selected = (col, row + 1) if row < 10 else None
  steps.append((sheet.render(), None, "The edit is committed. The title shows unsaved changes; save with Ctrl+S.",
                "Press Ctrl+S", tools.COMPUTER_USE, {"action": "key", "keys": ["ctrl", "s"]}))
  sheet.saved = True
  steps.append((sheet.render(), None, f"The title no longer shows '*', so {sheet.name} is saved with {value} in {cell}.",
                "Finish the task", tools.COMPUTER_USE, {"action": "terminate", "status": "success"}))
  return instruction, steps


def _gui_form(rng: random.Random, w: int, h: int) -> tuple[str, list[StepSpec]]:
  name = rng.choice(FIRST_NAMES)
  labels = ["Name", "Email", "City"][: rng.randint(2, 3)]
  wanted = {"Name": name, "Email": f"{name.lower()}@example.com",
            "City": rng.choice(["Lisbon", "Oslo", "Kyoto", "Quito"])}
  values = {k: "" for k in labels}
  boxes = {k: (170, 60 + i * 46, min(w - 40, 470), 60 + i * 46 + 28) for i, k in enumerate(labels)}
  submit = (170, 60 + len(labels) * 46 + 10, 270, 60 + len(labels) * 46 + 42)
  state = {"focus": None, "done": False}

  def render() -> Image.Image:
    cv = Canvas(w, h, "Registration")
    for k in labels:
      cv.text((40, boxes[k][1] + 6), k + ":")
      cv.field(boxes[k], values[k], state["focus"] == k)
    cv.button(submit, "Submit")
    if state["done"]:
      cv.text((170, submit[3] + 14), "Thank you! Form submitted.", fill=(20, 130, 60))
    return cv.im

  instruction = "Fill in the registration form with " + ", ".join(
      f"{k.lower()} '{wanted[k]}'" for k in labels) + " and submit it."
  steps: list[StepSpec] = []
  for k in labels:
    steps.append((render(), None, f"The {k} field is empty. I click it to focus it.", f"Click the {k} field",
                  tools.COMPUTER_USE, {"action": "left_click", "coordinate": _center(boxes[k], w, h)}))
    state["focus"] = k
    steps.append((render(), None, f"The {k} field is focused; I type {wanted[k]}.", f"Type {wanted[k]}",
                  tools.COMPUTER_USE, {"action": "type", "text": wanted[k]}))
    values[k] = wanted[k]
  steps.append((render(), None, "All fields are filled in correctly. Now I submit the form.",
                "Click Submit", tools.COMPUTER_USE,
                {"action": "left_click", "coordinate": _center(submit, w, h)}))
  state["done"], state["focus"] = True, None
  steps.append((render(), None, "The confirmation message is shown, so the form was submitted.",
                "Finish the task", tools.COMPUTER_USE, {"action": "terminate", "status": "success"}))
  return instruction, steps


def _gui_files(rng: random.Random, w: int, h: int) -> tuple[str, list[StepSpec]]:
  files = sorted(f"{rng.choice(WORDS)}_{i}.txt" for i in range(14))
  target = rng.randrange(len(files))
  row_h, visible = 24, max(4, (h - 80) // 24)
  state = {"top": 0, "open": False}

  def row_box(i: int) -> tuple[int, int, int, int]:
    y = 50 + (i - state["top"]) * row_h
    return (30, y, w - 40, y + row_h - 2)

  def render() -> Image.Image:
    cv = Canvas(w, h, "Files - /home/user/notes")
    if state["open"]:
      cv.text((30, 50), f"{files[target]}", size=16)
      cv.text((30, 80), f"Contents of {files[target]}: {rng_text}")
      return cv.im
    for i in range(state["top"], min(len(files), state["top"] + visible)):
      cv.d.rectangle(row_box(i), outline=GRID)
      cv.text((40, row_box(i)[1] + 4), files[i])
    return cv.im

  rng_text = " ".join(rng.choice(WORDS) for _ in range(6))
  instruction = f"Open the file {files[target]} in the file browser."
  steps: list[StepSpec] = []
  if target >= visible:
    steps.append((render(), None, f"{files[target]} is not visible in the list; I scroll down.",
                  "Scroll down the file list", tools.COMPUTER_USE, {"action": "scroll", "pixels": -row_h * visible}))
    state["top"] = min(target, len(files) - visible)
  steps.append((render(), None, f"{files[target]} is in the list. Double-clicking opens it.",
                f"Double-click {files[target]}", tools.COMPUTER_USE,
                {"action": "double_click", "coordinate": _center(row_box(target), w, h)}))
  state["open"] = True
  steps.append((render(), None, f"The viewer shows {files[target]}; the task is done.",
                "Finish the task", tools.COMPUTER_USE, {"action": "terminate", "status": "success"}))
  return instruction, steps


class Shell:
  """Runs commands for real in a temp working directory (the episode's persistent shell)."""

  def __init__(self, files: dict[str, str]):
    self._tmp = tempfile.TemporaryDirectory(prefix="mage_synth_")
    self.cwd = self._tmp.name
    for name, text in files.items():
      with open(os.path.join(self.cwd, name), "w", encoding="utf-8") as f:
        f.write(text)

  def run(self, command: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": self.cwd}
    p = subprocess.run(["bash", "-c", command], cwd=self.cwd, env=env, capture_output=True,
                       text=True, timeout=30)
    out = (p.stdout + p.stderr).replace(self.cwd, "/workspace")
    return out + (f"[exit code {p.returncode}]\n" if p.returncode else "")

  def close(self) -> None:
    self._tmp.cleanup()


def _terminal_files(rng: random.Random) -> dict[str, str]:
  rows = [f"{rng.choice(WORDS)},{rng.randint(1, 500)}" for _ in range(rng.randint(5, 12))]
  log = [f"{'ERROR' if rng.random() < 0.3 else 'INFO'} request {i} {rng.choice(WORDS)}"
         for i in range(rng.randint(8, 20))]
  notes = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))) for _ in range(rng.randint(3, 15))]
  return {"data.csv": "item,amount\n" + "\n".join(rows) + "\n", "app.log": "\n".join(log) + "\n",
          "notes.txt": "\n".join(notes) + "\n"}


_SUM_CSV = ("python3 -c \"import csv; print(sum(int(r['amount']) "
            "for r in csv.DictReader(open('data.csv'))))\"")
TERMINAL_TASKS: list[tuple[str, list[tuple[str, str, str]]]] = [
    ("How many lines does notes.txt have? Write the number to count.txt.", [
        ("I should first see which files are in the working directory.", "List the files", "ls"),
        ("notes.txt is there; wc -l counts its lines.", "Count lines in notes.txt", "wc -l < notes.txt"),
        ("I write the count to count.txt and print it back to check.", "Save the count",
         "wc -l < notes.txt > count.txt && cat count.txt"),
    ]),
    ("Compute the total of the amount column in data.csv and save it to total.txt.", [
        ("Let me look at the header and first rows of data.csv.", "Show the head of data.csv", "head -3 data.csv"),
        ("The amount column holds integers; Python's csv module can sum it.", "Sum the amount column", _SUM_CSV),
        ("I store the total in total.txt and verify it.", "Write the total to total.txt",
         _SUM_CSV + " > total.txt && cat total.txt"),
    ]),
    ("Count the ERROR lines in app.log and move the log into an archive folder.", [
        ("grep -c counts matching lines.", "Count ERROR lines", "grep -c ERROR app.log || true"),
        ("Now I create archive/ and move the log there, then list it.", "Archive the log",
         "mkdir -p archive && mv app.log archive/ && ls archive"),
    ]),
    ("Print the distinct items in data.csv, sorted.", [
        ("The first column is the item; cut, sort and uniq give the distinct values.",
         "List distinct items", "tail -n +2 data.csv | cut -d, -f1 | sort | uniq"),
        ("Let me count them as well.", "Count distinct items", "tail -n +2 data.csv | cut -d, -f1 | sort -u | wc -l"),
    ]),
]


def _terminal(rng: random.Random) -> tuple[str, list[StepSpec]]:
  instruction, plan = TERMINAL_TASKS[rng.randrange(len(TERMINAL_TASKS))]
  shell = Shell(_terminal_files(rng))
  try:
    steps: list[StepSpec] = []
    obs = "Shell ready. Working directory: /workspace"
    for think, action, command in plan:
      steps.append((None, obs, think, action, tools.BASH, {"command": command}))
      obs = shell.run(command) or "(no output)"
    steps.append((None, obs, "The output confirms the result, so the task is complete.",
                  "Finish the task", tools.COMPUTER_USE, {"action": "terminate", "status": "success"}))
  finally:
    shell.close()
  return instruction, steps


def _hybrid(rng: random.Random, w: int, h: int) -> tuple[str, list[StepSpec]]:
  shell = Shell(_terminal_files(rng))
  sheet = _Spreadsheet(rng, w, h, "report.xlsx")
  try:
    col, row = 4, rng.randint(2, 9)
    cell = f"{sheet.COLS[col]}{row}"
    instruction = f"Compute the total amount in ~/data.csv and enter it in cell {cell} of report.xlsx, then save."
    steps: list[StepSpec] = []
    steps.append((sheet.render(), "Shell ready. Working directory: /workspace",
                  "The total is easiest to get from the shell, so I sum data.csv there.",
                  "Sum the amount column in the shell", tools.BASH, {"command": _SUM_CSV}))
    total = shell.run(_SUM_CSV).strip()
    steps.append((sheet.render(), total, f"The total is {total}. I select cell {cell} in the spreadsheet.",
                  f"Click cell {cell}", tools.COMPUTER_USE,
                  {"action": "left_click", "coordinate": _center(sheet.box(col, row), w, h)}))
    sheet.selected = (col, row)
    steps.append((sheet.render(), None, f"Cell {cell} is selected; I type {total}.", f"Type {total}",
                  tools.COMPUTER_USE, {"action": "type", "text": total + "\n"}))
    sheet.values[(col, row)], sheet.selected, sheet.saved = total, None, False
    steps.append((sheet.render(), None, "The value is entered; I save with Ctrl+S.", "Press Ctrl+S",
                  tools.COMPUTER_USE, {"action": "key", "keys": ["ctrl", "s"]}))
    sheet.saved = True
    steps.append((sheet.render(), None, "Saved. I double-check the CSV row count from the shell.",
                  "Count the data rows", tools.BASH, {"command": "tail -n +2 data.csv | wc -l"}))
    out = shell.run("tail -n +2 data.csv | wc -l")
    steps.append((sheet.render(), out, "Everything matches; the task is complete.", "Finish the task",
                  tools.COMPUTER_USE, {"action": "terminate", "status": "success"}))
  finally:
    shell.close()
  return instruction, steps


def _grounding(rng: random.Random, w: int, h: int) -> tuple[Image.Image, str, tuple[int, int, int, int]]:
  labels = rng.sample(["Save", "Open", "Cancel", "Print", "Export", "Help", "Delete", "Share"], 4)
  cv = Canvas(w, h, rng.choice(["Editor", "Settings", "Viewer"]))
  boxes = {}
  for i, label in enumerate(labels):
    x0 = 30 + (i % 2) * (w // 2 - 20) + rng.randint(0, 40)
    y0 = 60 + (i // 2) * (h // 3) + rng.randint(0, 30)
    boxes[label] = (x0, y0, x0 + 96, y0 + 32)
    cv.button(boxes[label], label)
  target = rng.choice(labels)
  return cv.im, f"Click the '{target}' button.", boxes[target]


MIN_LAYOUT = (640, 400)


def _episode(ep_id: str, instruction: str, specs: list[StepSpec], images_dir: str, rel_dir: str,
             w: int, h: int, source: str, stage: int, meta: dict | None = None) -> tj.Episode:
  os.makedirs(os.path.join(images_dir, ep_id), exist_ok=True)
  steps = []
  for t, (im, text, think, action, name, args) in enumerate(specs):
    why = tools.validate_call(name, args)
    if why is not None:  # a bug in this generator, not bad data
      raise AssertionError(f"synth produced an invalid call in {ep_id} step {t}: {why}")
    shot = None
    if im is not None:
      shot = f"{rel_dir}/{ep_id}/step_{t:02d}.png"
      if im.size != (w, h):  # drawn on a larger layout canvas; [0, 999] coordinates still hold
        im = im.resize((w, h), Image.BICUBIC)
      im.save(os.path.join(images_dir, ep_id, f"step_{t:02d}.png"), optimize=False)
    steps.append(tj.Step(tj.Observation(shot, text), think, action, tj.ToolCall(name, args)))
  return tj.Episode(id=ep_id, instruction=instruction, steps=steps, screen_size=(w, h),
                    source=source, stage=stage, outcome="success", reward=1.0, meta=meta or {},
                    root=os.path.dirname(images_dir))


def generate(out_dir: str, seed: int = 0, episodes: int = 24, grounding: int = 8,
             gui_terminal_ratio: float = 0.68, width: int = 640, height: int = 400,
             hybrid_every: int = 4, stage: int = 4) -> dict[str, Any]:
  """Writes {gui,terminal,hybrid,grounding}.jsonl, images/ and manifest.json; returns the manifest."""
  if not 0.0 < gui_terminal_ratio < 1.0:
    raise ValueError(f"gui_terminal_ratio must be in (0, 1), got {gui_terminal_ratio}")
  rng = random.Random(seed)
  # Widgets have fixed pixel sizes, so small screens are drawn on a layout canvas of
  # at least MIN_LAYOUT and downscaled; calls use relative [0, 999] coordinates.
  lw, lh = max(width, MIN_LAYOUT[0]), max(height, MIN_LAYOUT[1])
  images_dir = os.path.join(out_dir, "images")
  by_kind: dict[str, list[tj.Episode]] = collections.defaultdict(list)
  calls: collections.Counter[str] = collections.Counter()
  gui_makers: list[Callable] = [_gui_spreadsheet, _gui_form, _gui_files]
  for i in range(episodes):
    gui_frac = calls[tools.COMPUTER_USE] / max(1, sum(calls.values()))
    if hybrid_every and i % hybrid_every == hybrid_every - 1:
      kind, (instr, specs) = "hybrid", _hybrid(rng, lw, lh)
    elif gui_frac < gui_terminal_ratio or not calls:
      kind, (instr, specs) = "gui", rng.choice(gui_makers)(rng, lw, lh)
    else:
      kind, (instr, specs) = "terminal", _terminal(rng)
    ep = _episode(f"synth-{seed}-{i:04d}", instr, specs, images_dir, "images", width, height,
                  source=f"synth_{kind}", stage=stage)
    calls.update(s.tool_call.name for s in ep.steps)
    by_kind[kind].append(ep)
  for j in range(grounding):
    im, instr, box = _grounding(rng, lw, lh)
    spec = [(im, None, f"The instruction asks for a button; it is drawn at {list(box)} in pixels.",
             instr.rstrip("."), tools.COMPUTER_USE,
             {"action": "left_click", "coordinate": _center(box, lw, lh)})]
    by_kind["grounding"].append(_episode(
        f"synth-{seed}-g{j:04d}", instr, spec, images_dir, "images", width, height,
        source="synth_grounding", stage=1, meta={"target_box": _to_unit_box(box, lw, lh)}))
  files = {}
  for kind in ("gui", "terminal", "hybrid", "grounding"):
    path = os.path.join(out_dir, f"{kind}.jsonl")
    files[kind] = tj.write_episodes(path, by_kind.get(kind, []))
  total = sum(calls.values())
  manifest = dict(
      seed=seed, screen_size=[width, height], requested_gui_terminal_ratio=gui_terminal_ratio,
      episodes=files, steps={k: sum(len(e.steps) for e in v) for k, v in by_kind.items()},
      tool_calls=dict(calls),
      realised_gui_terminal_ratio=calls[tools.COMPUTER_USE] / max(1, total))
  with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=2, sort_keys=True)
  return manifest
