"""OSWorld's `python -c "import pyautogui; ..."` set-up/post-config steps as our computer_use calls.

OSWorld drives its VM's desktop with pyautogui code (Ctrl+S before a file is read, a click to focus
a window, typing a file name into a Save dialog). Plain sequences of key presses, typing, clicks,
scrolls and sleeps become computer_use calls (read by actions/pyautogui.py, the same reader as the
AgentNet importer) run on the episode's desktop through our own action path (Desktop.execute);
anything else (variables, loops, screen reads) is not a plain sequence and the task is refused.
Click coordinates are OSWorld's 1920x1080 screen, mapped to our [0, 999] coordinate space
(x = round(px·999/1919)), so a click lands at the same relative place on our screen.
"""
from __future__ import annotations

import shlex
import time
from typing import Any

from mage_jax.actions import pyautogui

OSWORLD_SCREEN = (1920, 1080)
# OSWorld's snippets target its Ubuntu VM, where a "command" key in a task's code means Ctrl.
_KEY_ALIASES = {"command": "ctrl", "cmd": "ctrl"}


def _aliased(names: Any) -> Any:
  if isinstance(names, str):
    return _KEY_ALIASES.get(names.lower(), names)
  if isinstance(names, list):
    return [_KEY_ALIASES.get(n.lower(), n) if isinstance(n, str) else n for n in names]
  return names


def parse(code: str) -> list[dict[str, Any]]:
  """computer_use calls for one pyautogui snippet (actions/pyautogui.py, positions on OSWorld's
  1920x1080 screen); ValueError (pyautogui.Unmappable) says what is not a plain sequence."""
  position = pyautogui.pixel_position(*OSWORLD_SCREEN)
  out: list[dict[str, Any]] = []
  for fn, params in pyautogui.parse_code(code):
    if "keys" in params:
      params = {**params, "keys": _aliased(params["keys"])}
    out += pyautogui.map_call(fn, params, position)
  return out


def code_of(params: dict) -> str | None:
  """The Python code of a `python -c CODE` step (list or string command), else None."""
  cmd = params.get("command")
  if isinstance(cmd, list) and "-c" in cmd[:-1] and str(cmd[0]).startswith("python"):
    return str(cmd[cmd.index("-c") + 1])
  if isinstance(cmd, str):
    try:
      argv = shlex.split(cmd)
    except ValueError:
      return None
    return code_of({"command": argv}) if argv else None
  return None


def run(desktop, calls: list[dict[str, Any]]) -> None:
  """Runs the calls on the episode's desktop (waits capped: the sandbox settles fast)."""
  for c in calls:
    if c["action"] == "wait":
      time.sleep(min(float(c["time"]), 2.0))
    else:
      desktop.execute(c)
