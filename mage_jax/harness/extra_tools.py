"""Extra teacher tools a harness variant may offer besides `computer_use` and `bash`.

They exist for the *teacher* during harness evolution and collection only: the
student's schema is always schema.TOOL_SCHEMAS, and a collected trajectory with a
step that used one of these is rejected (launch.collect counts it). Each extra
tool overlaps a base tool, which is why evolution may find it wasteful:

  xdotool   runs `xdotool <command>` in the episode's shell (the X display is the
            screen computer_use acts on): the same clicks and keys as computer_use.
  ax_tree   dumps the on-screen apps' widget layouts (name -> [x, y, w, h] in pixels,
            the accessibility-tree stand-in of the built-in Tk apps), capped at
            `MAX_AX_CHARS`; the screenshot shows the same widgets.

A tool is executed by turning its call into one `bash` command run through the
environment's ordinary `step`, so it needs nothing from an environment beyond the
base tools, and its output goes through the same terminal output cap.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

MAX_AX_CHARS = 4000


@dataclasses.dataclass(frozen=True)
class ExtraTool:
  schema: dict[str, Any]
  validate: Callable[[Any], str | None]   # arguments -> None or a one-line reason
  to_bash: Callable[[dict[str, Any]], str]

  @property
  def name(self) -> str:
    return self.schema["function"]["name"]


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
  return {"type": "function", "function": {"name": name, "description": description, "parameters": {
      "type": "object", "properties": properties, "required": required}}}


def _validate_xdotool(args: Any) -> str | None:
  if not isinstance(args, dict) or set(args) != {"command"}:
    return "xdotool: arguments must be exactly {\"command\": <string>}"
  if not isinstance(args["command"], str) or not args["command"].strip():
    return "xdotool: 'command' must be a non-empty string"
  return None


def _validate_ax_tree(args: Any) -> str | None:
  if not isinstance(args, dict) or args:
    return "ax_tree: takes no arguments ({})"
  return None


_AX_SCRIPT = ("for f in /tmp/.mage_layout/*.json; do [ -e \"$f\" ] || { echo '(no app window on screen)'; break; }; "
              "echo \"== $(basename \"$f\" .json)\"; cat \"$f\"; echo; done | head -c " + str(MAX_AX_CHARS))

EXTRA_TOOLS: dict[str, ExtraTool] = {t.name: t for t in (
    ExtraTool(_function("xdotool", "Run an xdotool command on the screen's X display, e.g. "
                        "'mousemove 400 300 click 1' (pixel coordinates) or 'key ctrl+s'.",
                        {"command": {"type": "string", "description": "xdotool arguments."}}, ["command"]),
              _validate_xdotool, lambda a: "xdotool " + a["command"]),
    ExtraTool(_function("ax_tree", "Dump the accessibility tree of the apps on screen: every widget's "
                        "name and [x, y, width, height] in pixels.", {}, []),
              _validate_ax_tree, lambda a: _AX_SCRIPT),
)}


def check_names(names, where: str) -> None:
  unknown = [n for n in names if n not in EXTRA_TOOLS]
  if unknown:
    raise ValueError(f"{where}: unknown extra tools {unknown}; known: {sorted(EXTRA_TOOLS)}")
