"""OSWorld's `python -c "import pyautogui; ..."` set-up/post-config steps as our computer_use calls.

OSWorld drives its VM's desktop with pyautogui code (Ctrl+S before a file is read, a click to focus
a window, typing a file name into a Save dialog). Plain sequences of key presses, typing, clicks,
scrolls and sleeps become computer_use calls run on the episode's desktop through our own action
path (Desktop.execute); anything else (variables, loops, screen reads) is not a plain sequence and
the task is refused. Click coordinates are OSWorld's 1920x1080 screen, scaled to our [0, 999]
coordinate space, so a click lands at the same relative place on our screen.
"""
from __future__ import annotations

import ast
from typing import Any

from mage_jax.actions import keys

OSWORLD_SCREEN = (1920, 1080)
_KEY_ALIASES = {"command": "ctrl", "win": "super", "option": "alt", "escape": "esc", "return": "enter"}


def _literal(node: ast.AST) -> Any:
  return ast.literal_eval(node)   # raises ValueError on anything but a literal


def _coordinate(x: Any, y: Any) -> list[int]:
  return [min(999, max(0, round(float(x) / OSWORLD_SCREEN[0] * 1000))),
          min(999, max(0, round(float(y) / OSWORLD_SCREEN[1] * 1000)))]


def _keys(names: list[Any]) -> list[str]:
  out = [_KEY_ALIASES.get(str(n).lower(), str(n).lower()) for n in names]
  _, reason = keys.parse_keys(out)
  if reason:
    raise ValueError(reason)
  return out


def _call(call: ast.Call) -> list[dict[str, Any]]:
  f = call.func
  if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
    raise ValueError("not a module function call")
  mod, name = f.value.id, f.attr
  args = [_literal(a) for a in call.args]
  kw = {k.arg: _literal(k.value) for k in call.keywords}
  if mod == "time" and name == "sleep":
    return [{"action": "wait", "time": float(args[0])}]
  if mod != "pyautogui":
    raise ValueError(f"{mod}.{name} is not a pyautogui call")
  if name == "FAILSAFE":
    return []
  if name == "hotkey":
    names = args[0] if len(args) == 1 and isinstance(args[0], list) else args
    return [{"action": "key", "keys": _keys(names)}]
  if name == "press":
    names = args[0] if isinstance(args[0], list) else [args[0]]
    return [{"action": "key", "keys": _keys([n])} for n in names for _ in range(int(kw.get("presses", 1)))]
  if name in ("write", "typewrite", "type"):
    text = args[0] if args else kw["message"]
    if isinstance(text, list):   # typewrite(['a', 'enter']) presses named keys
      return [{"action": "key", "keys": _keys([t])} for t in text]
    return [{"action": "type", "text": str(text)}]
  if name in ("click", "doubleClick", "rightClick", "moveTo"):
    x, y = (args + [kw.get("x"), kw.get("y")])[:2] if len(args) < 2 else args[:2]
    if x is None or y is None:
      raise ValueError(f"pyautogui.{name} without coordinates (clicks wherever the pointer is)")
    action = {"click": "left_click", "doubleClick": "double_click", "rightClick": "right_click",
              "moveTo": "mouse_move"}[name]
    if name == "click" and int(kw.get("clicks", 1)) == 2:
      action = "double_click"
    if name == "click" and kw.get("button") == "right":
      action = "right_click"
    return [{"action": action, "coordinate": _coordinate(x, y)}]
  if name == "scroll":
    return [{"action": "scroll", "pixels": int(args[0])}]
  raise ValueError(f"pyautogui.{name} is not a plain key/click/type step")


def parse(code: str) -> list[dict[str, Any]]:
  """computer_use calls for one pyautogui snippet; ValueError says what is not a plain sequence."""
  try:
    tree = ast.parse(code)
  except SyntaxError as e:
    raise ValueError(f"not Python: {e.msg}") from e
  out: list[dict[str, Any]] = []
  for stmt in tree.body:
    if isinstance(stmt, ast.Import) and all(a.name in ("pyautogui", "time") for a in stmt.names):
      continue
    if isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == "pyautogui.FAILSAFE":
      continue
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
      raise ValueError(f"statement {ast.unparse(stmt)[:60]!r} is not a plain call")
    try:
      out += _call(stmt.value)
    except (ValueError, IndexError, KeyError, TypeError, SyntaxError) as e:
      raise ValueError(f"{ast.unparse(stmt)[:60]!r}: {e}") from e
  return out


def code_of(params: dict) -> str | None:
  """The Python code of a `python -c CODE` step (list or string command), else None."""
  cmd = params.get("command")
  if isinstance(cmd, list) and "-c" in cmd[:-1] and str(cmd[0]).startswith("python"):
    return str(cmd[cmd.index("-c") + 1])
  if isinstance(cmd, str):
    import shlex
    try:
      argv = shlex.split(cmd)
    except ValueError:
      return None
    return code_of({"command": argv}) if argv else None
  return None


def run(desktop, calls: list[dict[str, Any]]) -> None:
  """Runs the calls on the episode's desktop (waits capped: the sandbox settles fast)."""
  import time
  for c in calls:
    if c["action"] == "wait":
      time.sleep(min(float(c["time"]), 2.0))
    else:
      desktop.execute(c)
