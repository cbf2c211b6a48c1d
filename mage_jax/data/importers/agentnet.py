"""AgentNet (OpenCUA) trajectories into native Episodes (docs/data.md, "AgentNet").

The record format (xlang-ai/OpenCUA data/cot-generate README, the released
agentnet_ubuntu_*.jsonl and agentnet_win_mac_*.jsonl files): {task_id, instruction,
[natural_language_task, actual_task], traj: [{index, image, value: {code, observation,
thought, action, reflection, last_step_correct, last_step_redundant}}], [task_completed,
alignment_score, efficiency_score, task_difficulty, reason]}. `image` is the screenshot file
seen before the step (resolved against the image folder); `code` is PyAutoGUI (plus the agent
functions `computer.terminate(status=...)`, `computer.wait()`, `computer.triple_click(x, y)`)
with coordinates relative to the screen (0..1).

Mapping onto our action space (actions/schema.py):
  click / leftClick (clicks=2: double_click; button right/middle) -> left/right/middle_click
  doubleClick / rightClick / middleClick -> double_click / right_click / middle_click
  moveTo -> mouse_move; dragTo (left button) -> left_click_drag (a drag starts where the pointer is)
  scroll(n[, x, y]) -> [mouse_move,] scroll n·50 pixels (+ up), 50 per wheel click as our desktops
  write / typewrite -> type; press(key or [keys], presses=n) -> one key step per press
  hotkey(*keys) -> key; computer.terminate -> terminate; computer.wait / pyautogui.sleep -> wait
Anything else (tripleClick, hscroll, keyDown/keyUp, a right-button drag, a key name we do not
know, code that is not a plain call) is unmappable, counted by kind (`unmappable:<kind>`): the
episode is skipped (on_unmappable="skip"), or cut before that step ("truncate", the dropped
steps counted in meta["import"]["dropped"]).

A step whose code holds several calls (moveTo then dragTo, write then press) becomes one step
per call; the later ones see the same screenshot. think = the previous step's `reflection`
(AgentNet's reflection at step t judges action t from the next screenshot, so it is known at
step t+1, as OpenCUA's generator uses it) followed by this step's `thought`; the Action line is
`action` (its first line). A missing one is filled by the template and marked in meta["filled"].
"""
from __future__ import annotations

import ast
from typing import Any, Iterator

from mage_jax.actions import keys as key_names
from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import fill, sources

UNMAPPABLE = "unmappable"          # skip kind prefix: unmappable:<what>
ON_UNMAPPABLE = ("skip", "truncate")
INSTRUCTION_FIELDS = ("instruction", "natural_language_task", "actual_task")
_WAIT_DEFAULT_S = 1.0              # computer.wait() without a duration


class Unmappable(Exception):
  def __init__(self, what: str, detail: str):
    super().__init__(detail)
    self.what, self.detail = what, detail


def _bad(reason: str, kind: str = tr.INVALID_FIELD) -> tr.EpisodeError:
  return tr.EpisodeError(kind, reason)


def _literal(node: ast.AST, code: str) -> Any:
  try:
    return ast.literal_eval(node)
  except ValueError:
    raise Unmappable("non_literal_argument", f"{ast.get_source_segment(code, node)!r} is not a literal") from None


# positional parameter names of the functions we map (PyAutoGUI's signatures)
_POSITIONAL = {
    "click": ("x", "y", "clicks", "interval", "button"), "leftClick": ("x", "y"),
    "doubleClick": ("x", "y"), "rightClick": ("x", "y"), "middleClick": ("x", "y"),
    "moveTo": ("x", "y"), "dragTo": ("x", "y", "duration", "tween", "button"),
    "scroll": ("clicks", "x", "y"), "write": ("message", "interval"), "typewrite": ("message", "interval"),
    "press": ("keys", "presses", "interval"), "terminate": ("status",), "wait": ("time",),
    "sleep": ("time",),
}


def parse_code(code: str) -> list[tuple[str, dict[str, Any]]]:
  """PyAutoGUI / computer.* code -> [(function name, {parameter: value})], without running it."""
  try:
    tree = ast.parse(code.strip())
  except SyntaxError as e:
    raise Unmappable("syntax_error", f"code does not parse: {e.msg}") from None
  out = []
  for stmt in tree.body:
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    func = getattr(call, "func", None)
    if not (isinstance(call, ast.Call) and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name) and func.value.id in ("pyautogui", "computer")):
      raise Unmappable("not_a_call", f"{ast.get_source_segment(code, stmt)!r:.80} is not a "
                       "pyautogui.* / computer.* call")
    name = func.attr
    args = [_literal(a, code) for a in call.args]
    if name == "hotkey":
      params = {"keys": args}
    else:
      names = _POSITIONAL.get(name, ())
      params = dict(zip(names, args))
      if len(args) > len(names):
        params["_extra"] = args[len(names):]
    for kw in call.keywords:
      if kw.arg is None:
        raise Unmappable("non_literal_argument", f"**kwargs in {name}")
      params[kw.arg] = _literal(kw.value, code)
    out.append((name, params))
  return out


def _coord(params: dict, space: str, size: tuple[int, int] | None, fn: str) -> list[int]:
  x, y = params.get("x"), params.get("y")
  if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y)):
    raise Unmappable(f"{fn}_without_position", f"{fn} needs x and y, got {params!r:.80}")
  if space == "relative":
    if not (0 <= x <= 1 and 0 <= y <= 1):
      raise Unmappable("coordinate_out_of_screen", f"{fn}({x}, {y}) is outside the screen (0..1)")
    return [int(round(x * tools.COORD_MAX)), int(round(y * tools.COORD_MAX))]
  w, h = size
  if not (0 <= x <= w - 1 and 0 <= y <= h - 1):
    raise Unmappable("coordinate_out_of_screen", f"{fn}({x}, {y}) is outside the {w}x{h} screen")
  return [tools.from_pixel(x, w), tools.from_pixel(y, h)]


def _keys(names: Any, fn: str) -> list[str]:
  names = [names] if isinstance(names, str) else names
  if not isinstance(names, list) or not names or not all(isinstance(k, str) and k for k in names):
    raise Unmappable(f"{fn}_without_keys", f"{fn}: expected key names, got {names!r:.60}")
  canonical, why = key_names.parse_keys(names)
  if why:
    raise Unmappable("unknown_key", f"{fn}: {why}")
  return canonical


def map_call(fn: str, p: dict[str, Any], space: str, size: tuple[int, int] | None) -> list[dict[str, Any]]:
  """One parsed call -> computer_use argument dicts (one per step); raises Unmappable."""
  if fn not in _POSITIONAL and fn != "hotkey":
    raise Unmappable(fn, f"{fn} has no counterpart in our action space")
  if "_extra" in p:
    raise Unmappable(f"{fn}_arguments", f"{fn}: more positional arguments than we read")
  cu = lambda **a: a  # noqa: E731 - the arguments of one computer_use call
  if fn in ("click", "leftClick"):
    clicks, button = p.get("clicks", 1), p.get("button", "left")
    action = {("left", 1): "left_click", ("left", 2): "double_click", ("right", 1): "right_click",
              ("middle", 1): "middle_click", ("primary", 1): "left_click", ("primary", 2): "double_click",
              ("secondary", 1): "right_click"}.get((button, clicks))
    if action is None:
      raise Unmappable("tripleClick" if clicks == 3 else f"click(button={button}, clicks={clicks})",
                       f"click with button={button!r}, clicks={clicks!r}")
    return [cu(action=action, coordinate=_coord(p, space, size, fn))]
  if fn in ("doubleClick", "rightClick", "middleClick", "moveTo"):
    action = {"doubleClick": "double_click", "rightClick": "right_click", "middleClick": "middle_click",
              "moveTo": "mouse_move"}[fn]
    return [cu(action=action, coordinate=_coord(p, space, size, fn))]
  if fn == "dragTo":
    if p.get("button", "left") not in ("left", "primary"):
      raise Unmappable(f"dragTo(button={p['button']})", "only left-button drags exist in our action space")
    return [cu(action="left_click_drag", coordinate=_coord(p, space, size, fn))]
  if fn == "scroll":
    clicks = p.get("clicks")
    if not isinstance(clicks, (int, float)) or isinstance(clicks, bool) or clicks == 0:
      raise Unmappable("scroll_without_amount", f"scroll: expected a non-zero amount, got {clicks!r}")
    pixels = int(round(clicks * tools.SCROLL_PIXELS_PER_CLICK))
    move = [cu(action="mouse_move", coordinate=_coord(p, space, size, fn))] if "x" in p else []
    return move + [cu(action="scroll", pixels=max(-tools.MAX_SCROLL_PIXELS, min(tools.MAX_SCROLL_PIXELS, pixels)))]
  if fn in ("write", "typewrite"):
    text = p.get("message")
    if isinstance(text, list):  # typewrite(['a', 'enter']) presses keys
      raise Unmappable("typewrite_key_list", "typewrite with a key list")
    if not isinstance(text, str) or not text:
      raise Unmappable("write_without_text", f"{fn}: expected a non-empty message")
    return [cu(action="type", text=text)]
  if fn == "press":
    names = _keys(p.get("keys"), fn)
    presses = p.get("presses", 1)
    if not isinstance(presses, int) or isinstance(presses, bool) or not 1 <= presses <= 50:
      raise Unmappable("press_count", f"press: presses={presses!r}")
    return [cu(action="key", keys=[k]) for _ in range(presses) for k in names]
  if fn == "hotkey":
    return [cu(action="key", keys=_keys(p.get("keys"), fn))]
  if fn == "terminate":
    status = p.get("status", "success")
    if status not in tools.TERMINATE_STATUSES:
      raise Unmappable("terminate_status", f"terminate: status={status!r}")
    return [cu(action="terminate", status=status)]
  if fn in ("wait", "sleep"):
    t = p.get("time", p.get("seconds", _WAIT_DEFAULT_S))
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t <= 60:
      raise Unmappable("wait_time", f"{fn}: time={t!r}")
    return [cu(action="wait", time=t)]
  raise AssertionError(f"{fn} is listed in _POSITIONAL but not mapped")


def _text(value: dict, field: str, where: str) -> str:
  v = value.get(field)
  if v is None:
    return ""
  if not isinstance(v, str):
    raise _bad(f"{where}.value.{field}: expected a string")
  return v.strip()


def _coord_space(traj: list[dict]) -> str:
  """relative when every x/y in the record's code is within 0..1 (AgentNet's), else pixel."""
  for entry in traj:
    code = entry.get("value", {}).get("code") if isinstance(entry, dict) else None
    try:
      calls = parse_code(code) if isinstance(code, str) else []
    except Unmappable:
      continue
    for _, p in calls:
      for k in ("x", "y"):
        v = p.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1:
          return "pixel"
  return "relative"


def agentnet_episode(record: Any, root: str = "", *, episode_id: str = "", source: str = "agentnet",
                     stage: int = 2, instruction_field: str = "instruction",
                     on_unmappable: str = "skip") -> tr.Episode:
  """One AgentNet record -> Episode; raises EpisodeError (kind `unmappable:<what>` for an action
  we cannot express, unless on_unmappable="truncate" cuts the episode before it)."""
  if on_unmappable not in ON_UNMAPPABLE:
    raise ValueError(f"on_unmappable={on_unmappable!r}: expected one of {ON_UNMAPPABLE}")
  if instruction_field not in INSTRUCTION_FIELDS:
    raise ValueError(f"instruction_field={instruction_field!r}: expected one of {INSTRUCTION_FIELDS}")
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  instruction = record.get(instruction_field) or record.get("instruction")
  if not isinstance(instruction, str) or not instruction.strip():
    raise _bad(f"{instruction_field}: expected a non-empty string")
  traj = record.get("traj")
  if not isinstance(traj, list) or not traj:
    raise _bad("traj: expected a non-empty list of steps", tr.EMPTY_EPISODE if traj == [] else tr.INVALID_FIELD)
  space = _coord_space(traj)
  steps: list[dict] = []
  split_turns, dropped, incorrect, redundant = 0, {}, [], []
  prev_reflection = ""
  size: tuple[int, int] | None = None
  for t, entry in enumerate(traj):
    where = f"traj[{t}]"
    value = entry.get("value") if isinstance(entry, dict) else None
    if not isinstance(value, dict):
      raise _bad(f"{where}.value: expected an object")
    image = entry.get("image")
    if not isinstance(image, str) or not image:
      raise _bad(f"{where}.image: expected a screenshot file name")
    code = value.get("code")
    if not isinstance(code, str) or not code.strip():
      raise _bad(f"{where}.value.code: expected PyAutoGUI code")
    if space == "pixel" and size is None:
      size = sources.image_size(image, root, f"{where}.image")
    try:
      calls = [a for fn, p in parse_code(code) for a in map_call(fn, p, space, size)]
    except Unmappable as u:
      if on_unmappable == "skip" or not steps:
        raise _bad(f"{where}.value.code: {u.detail} ({code.strip()[:80]!r})", f"{UNMAPPABLE}:{u.what}") from None
      dropped[f"{UNMAPPABLE}:{u.what}"] = len(traj) - t
      break
    thought = _text(value, "thought", where)
    think = "\n\n".join(p for p in (prev_reflection, thought) if p)
    action = _text(value, "action", where).split("\n")[0].strip()
    if action.startswith("Action:"):
      action = action[len("Action:"):].strip()
    for k, args in enumerate(calls):
      steps.append({"observation": {"screenshot": image, "text": None}, "think": think if k == 0 else "",
                    "action": action if k == 0 else "",
                    "tool_call": {"name": tools.COMPUTER_USE, "arguments": args}})
    split_turns += len(calls) > 1
    if value.get("last_step_correct") is False:
      incorrect.append(len(steps))
    if value.get("last_step_redundant") is True:
      redundant.append(len(steps))
    prev_reflection = _text(value, "reflection", where)
  meta: dict[str, Any] = {"agentnet": {
      k: record[k] for k in ("task_id", "natural_language_task", "actual_task", "task_completed",
                             "alignment_score", "efficiency_score", "task_difficulty", "reason")
      if k in record}}
  meta["agentnet"].update(coord_space=space, incorrect_steps=incorrect, redundant_steps=redundant)
  filled = fill.fill_steps(steps, instruction.strip())
  if filled:
    meta[fill.FILLED_KEY] = filled
  imported = {k: v for k, v in (("split_turns", split_turns), ("dropped", dropped)) if v}
  if imported:
    meta["import"] = imported
  completed = record.get("task_completed")
  outcome = None if dropped or not isinstance(completed, bool) else ("success" if completed else "failure")
  d = {"id": str(record.get("task_id") or episode_id), "instruction": instruction.strip(),
       "steps": steps, "tools": [tools.COMPUTER_USE], "source": source, "stage": stage,
       "outcome": outcome, "screen_size": list(size) if size else None, "meta": meta}
  return tr.episode_from_dict(d, root)


def read_agentnet_file(path: str, image_root: str | None = None, *, source: str | None = None,
                       stage: int | None = None, instruction_field: str = "instruction",
                       on_unmappable: str = "skip") -> Iterator[tr.Episode | tr.SkippedItem]:
  """AgentNet JSONL; screenshots resolve against `image_root` (the unzipped images folder;
  default: the file's folder)."""
  return sources.read_records(path, agentnet_episode, image_root, source=source or "agentnet",
                              stage=2 if stage is None else stage, instruction_field=instruction_field,
                              on_unmappable=on_unmappable)
