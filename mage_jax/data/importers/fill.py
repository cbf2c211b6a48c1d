"""Template fill for the parts of a step a source does not have: the `<think>` text and the
one-line `Action:` summary (docs/data.md, "Filled fields").

Every policy turn we train has three parts (DESIGN.md), but most agent transcripts people hold
have only the tool call. The template writes both missing parts from the call alone, so an
import never loses a step for lack of them; `launch.import_data --synthesis_base_url` then asks
the synthesis LLM (harness/synthesis.py) to rewrite the filled parts from the screenshot.

Which parts were filled is recorded in the episode's meta, so training can filter or weight
them: `meta["filled"] = [{"step": t, "think": "template", "action": "template"}, ...]` (t is
1-based; a part that came from the source is absent from its step's entry; steps with nothing
filled have no entry). The LLM pass changes "template" to "llm" for each part it replaced.
"""
from __future__ import annotations

from typing import Any

from mage_jax.actions import schema as tools

TEMPLATE, LLM = "template", "llm"
FILLED_KEY = "filled"
_MAX_QUOTE = 60


def _quote(text: str) -> str:
  one_line = " ".join(text.split())
  return one_line if len(one_line) <= _MAX_QUOTE else one_line[:_MAX_QUOTE - 3] + "..."


def summary(name: str, arguments: dict[str, Any]) -> str:
  """The `Action:` line for a tool call: imperative, one line, no coordinates beyond the call's."""
  if name == tools.BASH:
    return f"Run `{_quote(arguments['command'])}` in the shell"
  action = arguments["action"]
  if action in ("left_click", "right_click", "middle_click", "double_click", "mouse_move"):
    verb = {"left_click": "Click", "right_click": "Right-click", "middle_click": "Middle-click",
            "double_click": "Double-click", "mouse_move": "Move the pointer to"}[action]
    x, y = arguments["coordinate"]
    return f"{verb} the point ({x}, {y})"
  if action == "left_click_drag":
    x, y = arguments["coordinate"]
    return f"Drag from the pointer to ({x}, {y})"
  if action == "type":
    return f"Type \"{_quote(arguments['text'])}\""
  if action == "key":
    return "Press " + "+".join(arguments["keys"])
  if action == "scroll":
    return "Scroll " + ("up" if arguments["pixels"] > 0 else "down")
  if action == "wait":
    return f"Wait {arguments['time']} seconds"
  return "Finish the task" if arguments["status"] == "success" else "Stop: the task cannot be done"


def think(instruction: str, step: int, action: str) -> str:
  """A neutral think text that states the goal and the step; it claims nothing about the screen."""
  return f"Task: {_quote(instruction)} Step {step}: {action[0].lower() + action[1:].rstrip('.')}."


def fill_step(step: dict[str, Any], instruction: str, t: int) -> dict[str, str]:
  """Fills a native step dict's empty think / action in place; returns {part: TEMPLATE}."""
  filled = {}
  call = step["tool_call"]
  if not (step.get("action") or "").strip():
    step["action"] = summary(call["name"], call["arguments"])
    filled["action"] = TEMPLATE
  if not (step.get("think") or "").strip():
    step["think"] = think(instruction, t, step["action"])
    filled["think"] = TEMPLATE
  return filled


def fill_steps(steps: list[dict[str, Any]], instruction: str) -> list[dict[str, Any]]:
  """Fills every step (validating each call first, so the template sees valid arguments);
  returns the `meta["filled"]` list."""
  marks = []
  for t, step in enumerate(steps, start=1):
    call = step["tool_call"]
    if tools.validate_call(call["name"], call["arguments"]) is not None:
      continue  # episode_from_dict rejects it with the reason; nothing to fill
    parts = fill_step(step, instruction, t)
    if parts:
      marks.append({"step": t, **parts})
  return marks
