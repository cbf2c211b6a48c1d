"""PyAutoGUI code as computer_use calls: the one reader for every source that records actions
as PyAutoGUI (AgentNet trajectories in data/importers/agentnet.py, OSWorld's set-up and
post-config steps in tasks/osworld/pyautogui_steps.py).

The code is parsed with `ast`, never run: only plain calls `pyautogui.f(...)`,
`computer.f(...)` (OpenCUA's agent functions) and `time.sleep(...)` with literal arguments,
besides `import pyautogui` / `import time` and `pyautogui.FAILSAFE = ...`. Each call maps to
one or more computer_use argument dicts; the caller converts positions (`Position`), since
sources differ (AgentNet: 0..1 of the screen; OSWorld: pixels of a 1920x1080 screen).

  click / leftClick (button left|right|middle, clicks 1|2) -> left/right/middle/double click
  doubleClick / rightClick / middleClick -> double_click / right_click / middle_click
  moveTo -> mouse_move; dragTo (left button) -> left_click_drag (from where the pointer is)
  scroll(n[, x, y]) -> [mouse_move,] scroll n x SCROLL_PIXELS_PER_CLICK pixels (+ up)
  write / typewrite(text) -> type; typewrite([keys]) and press(key | [keys], presses=n) -> one
  key step per press; hotkey(*keys | [keys]) -> key; computer.terminate -> terminate;
  computer.wait / pyautogui.sleep / time.sleep -> wait (1 s without a duration)

Anything else raises `Unmappable` (a ValueError) whose `what` names it for counting:
tripleClick / computer.triple_click, hscroll, keyDown / keyUp, a right-button drag, an
unknown key name, a click without a position, a statement that is not a plain call.
"""
from __future__ import annotations

import ast
from typing import Any, Callable

from mage_jax.actions import keys as key_names
from mage_jax.actions import schema

# (x, y, function name) -> [x, y] on the 0..999 grid; raises Unmappable if off the screen
Position = Callable[[float, float, str], list[int]]
WAIT_DEFAULT_S = 1.0

# positional parameter names of the functions we map (PyAutoGUI's and OpenCUA's signatures)
_POSITIONAL = {
    "click": ("x", "y", "clicks", "interval", "button"), "leftClick": ("x", "y"),
    "doubleClick": ("x", "y"), "rightClick": ("x", "y"), "middleClick": ("x", "y"),
    "moveTo": ("x", "y"), "dragTo": ("x", "y", "duration", "tween", "button"),
    "scroll": ("clicks", "x", "y"), "write": ("message", "interval"), "typewrite": ("message", "interval"),
    "press": ("keys", "presses", "interval"), "terminate": ("status",), "wait": ("time",),
    "sleep": ("time",), "hotkey": (),
}
_MODULES = ("pyautogui", "computer", "time")


class Unmappable(ValueError):
  """Code with no counterpart in our action space; `what` is the kind, for counting."""

  def __init__(self, what: str, detail: str):
    super().__init__(detail)
    self.what, self.detail = what, detail


def _literal(node: ast.AST, code: str) -> Any:
  try:
    return ast.literal_eval(node)
  except ValueError:
    raise Unmappable("non_literal_argument",
                     f"{ast.get_source_segment(code, node)!r:.60} is not a literal") from None


def parse_code(code: str) -> list[tuple[str, dict[str, Any]]]:
  """Code -> [(function name, {parameter: value})] for its plain calls, in order."""
  try:
    tree = ast.parse(code.strip())
  except SyntaxError as e:
    raise Unmappable("syntax_error", f"code does not parse: {e.msg}") from None
  out = []
  for stmt in tree.body:
    if isinstance(stmt, ast.Import) and all(a.name in ("pyautogui", "time") for a in stmt.names):
      continue
    if isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == "pyautogui.FAILSAFE":
      continue
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    func = getattr(call, "func", None)
    if not (isinstance(call, ast.Call) and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name) and func.value.id in _MODULES
            and (func.value.id != "time" or func.attr == "sleep")):
      raise Unmappable("not_a_call", f"{ast.unparse(stmt)[:60]!r} is not a plain pyautogui call")
    name = func.attr
    args = [_literal(a, code) for a in call.args]
    names = _POSITIONAL.get(name, ())
    if name == "hotkey":
      params = {"keys": args[0] if len(args) == 1 and isinstance(args[0], list) else args}
    else:
      params = dict(zip(names, args))
      if len(args) > len(names):
        params["_extra"] = args[len(names):]
    for kw in call.keywords:
      if kw.arg is None:
        raise Unmappable("non_literal_argument", f"**kwargs in {name}")
      params[kw.arg] = _literal(kw.value, code)
    out.append((name, params))
  return out


def _xy(p: dict, position: Position, fn: str) -> list[int]:
  x, y = p.get("x"), p.get("y")
  if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y)):
    raise Unmappable(f"{fn}_without_position", f"{fn} without x and y (acts wherever the pointer is)")
  return position(x, y, fn)


def _keys(names: Any, fn: str) -> list[str]:
  names = [names] if isinstance(names, str) else names
  if not isinstance(names, list) or not names or not all(isinstance(k, str) and k for k in names):
    raise Unmappable(f"{fn}_without_keys", f"{fn}: expected key names, got {names!r:.60}")
  canonical, why = key_names.parse_keys(names)
  if why:
    raise Unmappable("unknown_key", f"{fn}: {why}")
  return canonical


def map_call(fn: str, p: dict[str, Any], position: Position) -> list[dict[str, Any]]:
  """One parsed call -> computer_use argument dicts (one per step); raises Unmappable."""
  if fn not in _POSITIONAL:
    raise Unmappable(fn, f"{fn} has no counterpart in our action space")
  if "_extra" in p:
    raise Unmappable(f"{fn}_arguments", f"{fn}: more positional arguments than it takes")
  if fn in ("click", "leftClick"):
    clicks, button = p.get("clicks", 1), p.get("button", "left")
    action = {("left", 1): "left_click", ("left", 2): "double_click", ("right", 1): "right_click",
              ("middle", 1): "middle_click", ("primary", 1): "left_click", ("primary", 2): "double_click",
              ("secondary", 1): "right_click"}.get((button, clicks))
    if action is None:
      raise Unmappable("tripleClick" if clicks == 3 else f"click(button={button}, clicks={clicks})",
                       f"click with button={button!r}, clicks={clicks!r}")
    return [{"action": action, "coordinate": _xy(p, position, fn)}]
  if fn in ("doubleClick", "rightClick", "middleClick", "moveTo"):
    action = {"doubleClick": "double_click", "rightClick": "right_click", "middleClick": "middle_click",
              "moveTo": "mouse_move"}[fn]
    return [{"action": action, "coordinate": _xy(p, position, fn)}]
  if fn == "dragTo":
    if p.get("button", "left") not in ("left", "primary"):
      raise Unmappable(f"dragTo(button={p['button']})", "only left-button drags exist in our action space")
    return [{"action": "left_click_drag", "coordinate": _xy(p, position, fn)}]
  if fn == "scroll":
    clicks = p.get("clicks")
    if not isinstance(clicks, (int, float)) or isinstance(clicks, bool) or clicks == 0:
      raise Unmappable("scroll_without_amount", f"scroll: expected a non-zero amount, got {clicks!r}")
    pixels = int(round(clicks * schema.SCROLL_PIXELS_PER_CLICK))
    move = [{"action": "mouse_move", "coordinate": _xy(p, position, fn)}] if "x" in p else []
    return move + [{"action": "scroll",
                    "pixels": max(-schema.MAX_SCROLL_PIXELS, min(schema.MAX_SCROLL_PIXELS, pixels))}]
  if fn in ("write", "typewrite"):
    text = p.get("message")
    if isinstance(text, list):  # typewrite(['a', 'enter']) presses named keys
      return [{"action": "key", "keys": _keys([k], fn)} for k in text]
    if not isinstance(text, str) or not text:
      raise Unmappable("write_without_text", f"{fn}: expected a non-empty message")
    return [{"action": "type", "text": text}]
  if fn == "press":
    names = _keys(p.get("keys"), fn)
    presses = p.get("presses", 1)
    if not isinstance(presses, int) or isinstance(presses, bool) or not 1 <= presses <= 50:
      raise Unmappable("press_count", f"press: presses={presses!r}")
    return [{"action": "key", "keys": [k]} for k in names for _ in range(presses)]
  if fn == "hotkey":
    return [{"action": "key", "keys": _keys(p.get("keys"), fn)}]
  if fn == "terminate":
    status = p.get("status", "success")
    if status not in schema.TERMINATE_STATUSES:
      raise Unmappable("terminate_status", f"terminate: status={status!r}")
    return [{"action": "terminate", "status": status}]
  t = p.get("time", p.get("seconds", WAIT_DEFAULT_S))  # wait / sleep
  if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t <= 60:
    raise Unmappable("wait_time", f"{fn}: time={t!r}")
  return [{"action": "wait", "time": t}]


def to_calls(code: str, position: Position) -> list[dict[str, Any]]:
  """All computer_use argument dicts of a snippet, in order; raises Unmappable."""
  return [a for fn, p in parse_code(code) for a in map_call(fn, p, position)]


def pixel_position(width: int, height: int) -> Position:
  """Positions in pixels of a width x height screen -> 0..999 (x = round(px·999/(W−1)))."""
  def position(x: float, y: float, fn: str) -> list[int]:
    if not (0 <= x <= width - 1 and 0 <= y <= height - 1):
      raise Unmappable("coordinate_out_of_screen", f"{fn}({x}, {y}) is outside the {width}x{height} screen")
    return [schema.from_pixel(x, width), schema.from_pixel(y, height)]
  return position


def relative_position(x: float, y: float, fn: str) -> list[int]:
  """Positions as fractions of the screen (0..1) -> 0..999."""
  if not (0 <= x <= 1 and 0 <= y <= 1):
    raise Unmappable("coordinate_out_of_screen", f"{fn}({x}, {y}) is outside the screen (0..1)")
  return [int(round(x * schema.COORD_MAX)), int(round(y * schema.COORD_MAX))]
