"""The one definition of the agent's tools: `computer_use` and `bash`.

The renderer, the synthetic data, the parser and the environments all import
this module; nothing else spells the schemas out. Schemas are OpenAI/Qwen3
function-calling JSON, which is what the Qwen3 chat template renders in the
system turn.
"""
from __future__ import annotations

import json
import reprlib
from typing import Any

from mage_jax.actions import keys

COMPUTER_USE = "computer_use"
BASH = "bash"
COORD_MAX = 999  # coordinates are integers in [0, 999] on both axes

# action -> {argument: JSON type}; every listed argument is required.
ACTION_ARGS: dict[str, dict[str, str]] = {
    "key": {"keys": "array"},
    "type": {"text": "string"},
    "mouse_move": {"coordinate": "array"},
    "left_click": {"coordinate": "array"},
    "right_click": {"coordinate": "array"},
    "middle_click": {"coordinate": "array"},
    "double_click": {"coordinate": "array"},
    "left_click_drag": {"coordinate": "array"},
    "scroll": {"pixels": "integer"},
    "wait": {"time": "number"},
    "terminate": {"status": "string"},
}
ACTIONS = tuple(ACTION_ARGS)
TERMINATE_STATUSES = ("success", "failure")
SCROLL_PIXELS_PER_CLICK = 50  # one mouse-wheel click, on every desktop and importer
MAX_SCROLL_PIXELS = 100_000  # 2,000 wheel clicks; the desktops cap a scroll at 50 clicks anyway

_BRIEF = reprlib.Repr()  # error messages quote the model's arguments, bounded in depth and length
_BRIEF.maxlevel, _BRIEF.maxlist, _BRIEF.maxstring, _BRIEF.maxother = 3, 4, 40, 40

COMPUTER_USE_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": COMPUTER_USE,
        "description": (
            "Use a mouse and keyboard to interact with the computer's screen. "
            "Coordinates are integers in [0, 999] on both axes: (0, 0) is the top-left "
            "pixel and (999, 999) the bottom-right pixel of the screenshot."),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {
                    "type": "string", "enum": list(ACTIONS),
                    "description": (
                        "key: press keys in order, release in reverse. type: type text. "
                        "mouse_move/left_click/right_click/middle_click/double_click: at "
                        "coordinate. left_click_drag: drag from the pointer to coordinate. "
                        "scroll: scroll by pixels (+ up, - down) at the pointer. wait: "
                        "sleep time seconds. terminate: end the task with status."),
                },
                "keys": {"type": "array", "items": {"type": "string"},
                         "description": "Key names, e.g. [\"ctrl\", \"s\"]."},
                "text": {"type": "string", "description": "Text to type."},
                "coordinate": {"type": "array", "items": {"type": "integer"},
                               "description": "[x, y] in [0, 999]."},
                "pixels": {"type": "integer", "description": "Scroll amount; + up, - down."},
                "time": {"type": "number", "description": "Seconds to wait."},
                "status": {"type": "string", "enum": list(TERMINATE_STATUSES)},
            },
            "required": ["action"],
        },
    },
}

BASH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": BASH,
        "description": (
            "Run a command in the episode's persistent bash shell (state such as the "
            "working directory, variables and files survives across calls). Python and "
            "python-pptx, openpyxl, pandas, pypdf and pillow are available."),
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command."}},
            "required": ["command"],
        },
    },
}

TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (COMPUTER_USE_SCHEMA, BASH_SCHEMA)
TOOL_NAMES = (COMPUTER_USE, BASH)

# The harness's tool-set switch: which tools an episode offers (and declares in its system turn).
# "hybrid" is the trained policy's schema; "gui" is the GUI-only agent of the channel ablation.
TOOLSETS: dict[str, tuple[str, ...]] = {"hybrid": (COMPUTER_USE, BASH), "gui": (COMPUTER_USE,)}


def toolset_schemas(toolset: str) -> list[dict[str, Any]]:
  """The schemas of a tool set, in TOOL_SCHEMAS order; an unknown name is a ValueError."""
  if toolset not in TOOLSETS:
    raise ValueError(f"unknown tool set {toolset!r}; expected one of {sorted(TOOLSETS)}")
  return [dict(s) for s in TOOL_SCHEMAS if s["function"]["name"] in TOOLSETS[toolset]]


def to_pixel(coord: int, size: int) -> int:
  """[0, 999] -> pixel index; 0 and 999 map to the first and last pixel."""
  return int(round(coord * (size - 1) / COORD_MAX))


def from_pixel(px: int, size: int) -> int:
  """Pixel index -> [0, 999] (inverse of `to_pixel` up to rounding)."""
  return int(round(px * COORD_MAX / (size - 1)))


def tool_call_json(name: str, arguments: dict[str, Any]) -> str:
  """The JSON line inside <tool_call>, byte-identical to the Qwen3 chat template.

  The template writes `{"name": "<name>", "arguments": <arguments|tojson>}` and
  transformers' `tojson` is `json.dumps(x, ensure_ascii=False)`.
  """
  return '{"name": "' + name + '", "arguments": ' + json.dumps(arguments, ensure_ascii=False) + "}"


def validate_call(name: str, arguments: Any) -> str | None:
  """Returns None if the call is valid, else a one-line reason."""
  if name not in TOOL_NAMES:
    return f"unknown tool {_BRIEF.repr(name)}; expected one of {list(TOOL_NAMES)}"
  if not isinstance(arguments, dict):
    return f"arguments must be a JSON object, got {type(arguments).__name__}"
  if name == BASH:
    extra = set(arguments) - {"command"}
    if extra:
      return f"bash: unexpected arguments {sorted(extra)}"
    if not isinstance(arguments.get("command"), str) or not arguments["command"].strip():
      return "bash: 'command' must be a non-empty string"
    return _unencodable("bash: command", arguments["command"])
  action = arguments.get("action")
  if not isinstance(action, str) or action not in ACTION_ARGS:
    return f"computer_use: unknown action {_BRIEF.repr(action)}; expected one of {list(ACTIONS)}"
  wanted = ACTION_ARGS[action]
  extra = set(arguments) - {"action"} - set(wanted)
  if extra:
    return f"computer_use.{action}: unexpected arguments {sorted(extra)}"
  for arg in wanted:
    if arg not in arguments:
      return f"computer_use.{action}: missing argument {arg!r}"
  value = next(iter(arguments[a] for a in wanted)) if wanted else None
  if "coordinate" in wanted:
    c = arguments["coordinate"]
    if (not isinstance(c, list) or len(c) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in c)):
      return f"computer_use.{action}: coordinate must be [x, y] integers, got {_BRIEF.repr(c)}"
    if not all(0 <= v <= COORD_MAX for v in c):
      return f"computer_use.{action}: coordinate {c} out of range [0, {COORD_MAX}]"
  elif action == "key":
    if not isinstance(value, list) or not value or not all(isinstance(k, str) and k for k in value):
      return "computer_use.key: keys must be a non-empty list of key names"
    _, reason = keys.parse_keys(value)
    if reason:
      return f"computer_use.key: {reason}"
  elif action == "type":
    if not isinstance(value, str) or not value:
      return "computer_use.type: text must be a non-empty string"
    return _unencodable("computer_use.type: text", value)
  elif action == "scroll":
    if not isinstance(value, int) or isinstance(value, bool) or value == 0:
      return "computer_use.scroll: pixels must be a non-zero integer"
    if abs(value) > MAX_SCROLL_PIXELS:
      return f"computer_use.scroll: pixels must be within ±{MAX_SCROLL_PIXELS}"
  elif action == "wait":
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 60:
      return "computer_use.wait: time must be a number of seconds in [0, 60]"
  elif action == "terminate":
    if value not in TERMINATE_STATUSES:
      return f"computer_use.terminate: status must be one of {list(TERMINATE_STATUSES)}"
  return None


def _unencodable(what: str, text: str) -> str | None:
  """A reason if `text` can't be encoded as UTF-8 (a lone surrogate, e.g. JSON "\\ud800")."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    return f"{what} holds a lone UTF-16 surrogate at char {e.start}; text must be valid Unicode"
  return None


def format_response(think: str, action: str, name: str, arguments: dict[str, Any]) -> str:
  """One policy turn's assistant text (between `<|im_start|>assistant\\n` and `<|im_end|>`).

  The three parts, laid out exactly as the Qwen3 chat template renders an
  assistant message with `reasoning_content=think`, `content="Action: ..."` and
  one tool call. `actions.parsing` is the inverse.
  """
  return ("<think>\n" + think.strip("\n") + "\n</think>\n\n" + "Action: " + action.strip()
          + "\n<tool_call>\n" + tool_call_json(name, arguments) + "\n</tool_call>")
