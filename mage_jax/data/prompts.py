"""Prompt text of a rendered sample: system-prompt phrasings (prompt decoupling), the
tools block in the Qwen3 chat template's exact layout, and the first user turn's
folded history.

Prompt decoupling (stage 1 in the paper; our reading, docs/data.md): every
sample draws its system prompt from a set of equivalent phrasings with a seeded
RNG, so the policy's ability does not hinge on one wording. The tool schemas
and the template's tools block never change.
"""
from __future__ import annotations

import json
import random
from typing import Any, Sequence

# Equivalent phrasings of the system prompt. Each states the same contract: a
# computer-use agent with GUI and shell tools, one three-part turn per step,
# coordinates in [0, 999]. The first one is the default when decoupling is off.
SYSTEM_PROMPTS: tuple[str, ...] = (
    "You are a computer-use agent. You operate a desktop computer through two tools: "
    "computer_use for mouse and keyboard actions on the screen, and bash for a persistent "
    "shell. At every step, reason inside <think></think>, then write one line starting with "
    "\"Action:\" that summarizes what you will do, then make exactly one tool call. "
    "Screen coordinates are integers from 0 to 999 on both axes.",

    "You control a computer to complete the user's task. Use the computer_use tool to click, "
    "type, scroll and press keys on the screenshot you see, or the bash tool to run commands "
    "in a shell that keeps its state. Each reply has three parts: your reasoning in "
    "<think></think>, a one-line \"Action:\" summary, and a single tool call. Coordinates are "
    "normalized to [0, 999] in x and y.",

    "Act as an autonomous assistant operating a Linux desktop. Two channels are available: "
    "GUI actions via computer_use (positions given as integer x, y in the range 0-999 across "
    "the screenshot) and shell commands via bash, whose session persists between calls. "
    "Respond to each observation by thinking in <think></think>, stating the next step on a "
    "line that begins with \"Action:\", and issuing one tool call.",

    "You are an agent that completes tasks on a computer. Choose, at each turn, between acting "
    "on the screen with computer_use (coordinates are integers in 0..999, where 0 is the "
    "first and 999 the last pixel) and running a command with bash (a persistent shell with "
    "Python). Format every turn as <think>reasoning</think>, then \"Action: <one-line "
    "summary>\", then exactly one <tool_call>.",
)

SCREENSHOT_OMITTED = "[screenshot omitted]"
FOLDED_HEADER = "Previous actions:"

# The Qwen3 chat template's tools block, verbatim (tokenizer_config.json).
_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and "
               "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
               "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")


def tools_block(schemas: Sequence[dict[str, Any]]) -> str:
  """The system turn's tools section; `tojson` is json.dumps(ensure_ascii=False) as in transformers."""
  return _TOOLS_HEAD + "".join("\n" + json.dumps(s, ensure_ascii=False) for s in schemas) + _TOOLS_TAIL


def system_turn(system_prompt: str, schemas: Sequence[dict[str, Any]]) -> str:
  """`<|im_start|>system ... <|im_end|>\\n` exactly as the template renders system + tools; with no
  schemas, as it renders a system message alone (the template writes a tools block only for tools)."""
  if not schemas:
    return "<|im_start|>system\n" + system_prompt + "<|im_end|>\n"
  return "<|im_start|>system\n" + system_prompt + "\n\n" + tools_block(schemas) + "<|im_end|>\n"


def draw_system_prompt(phrasings: Sequence[str], seed: int, episode_id: str, step: int) -> int:
  """Index of the phrasing for one sample: a pure function of (seed, episode, step).

  Independent of rendering order, so multiprocess packing is reproducible.
  """
  return random.Random(f"{seed}/{episode_id}/{step}").randrange(len(phrasings))


def folded_line(step: int, action: str) -> str:
  """One folded earlier step: `<step>. Action: <summary>`."""
  return f"{step}. Action: {action}"


def first_user_text(instruction: str, folded: Sequence[tuple[int, str]]) -> str:
  """Task instruction, then the numbered folded `Action:` lines (oldest first), if any."""
  if not folded:
    return instruction
  return instruction + "\n\n" + FOLDED_HEADER + "\n" + "\n".join(folded_line(s, a) for s, a in folded)
