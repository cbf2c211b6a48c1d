"""Model text -> (think, action summary, one tool call), the inverse of `tools.format_response`.

A policy turn is `<think>...</think>`, an `Action: ...` line and exactly one
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Anything else is
turned into a `ParseResult` with `error` set: the episode loop shows the
error to the policy as an observation and counts it; parsing never raises.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from mage_jax.agent import tools

_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ACTION_RE = re.compile(r"^\s*Action:\s*(.*?)\s*$", re.MULTILINE)

# Error kinds (stable strings; counted per episode).
NO_TOOL_CALL = "no_tool_call"
MULTIPLE_TOOL_CALLS = "multiple_tool_calls"
BROKEN_JSON = "broken_json"
INVALID_CALL = "invalid_call"  # unknown tool/action, missing or out-of-range arguments
TEXT_AFTER_CALL = "text_after_call"
ERROR_KINDS = (NO_TOOL_CALL, MULTIPLE_TOOL_CALLS, BROKEN_JSON, INVALID_CALL, TEXT_AFTER_CALL)


@dataclasses.dataclass
class ParseResult:
  think: str = ""
  summary: str = ""
  name: str | None = None
  arguments: dict[str, Any] | None = None
  error_kind: str | None = None
  error: str | None = None

  @property
  def ok(self) -> bool:
    return self.error_kind is None

  def error_observation(self) -> str:
    """The text shown to the policy instead of an environment observation."""
    return (f"Error ({self.error_kind}): {self.error}. Reply with <think>...</think>, one "
            "'Action: ...' line and exactly one <tool_call>{\"name\": ..., \"arguments\": "
            "{...}}</tool_call>; nothing after it.")


def _fail(result: ParseResult, kind: str, reason: str) -> ParseResult:
  result.error_kind, result.error = kind, reason
  return result


def parse_response(text: str) -> ParseResult:
  """Parses one assistant turn (without `<|im_start|>assistant` / `<|im_end|>`)."""
  result = ParseResult()
  text = text.replace("<|im_end|>", "").replace("<|endoftext|>", "")
  m = _THINK_RE.search(text)
  if m:
    result.think = m.group(1).strip("\n")
  body = text[m.end():] if m else text
  n_open = body.count(_CALL_OPEN)
  if n_open == 0:
    return _fail(result, NO_TOOL_CALL, "the response has no <tool_call>")
  if n_open > 1:
    return _fail(result, MULTIPLE_TOOL_CALLS, f"the response has {n_open} <tool_call> blocks; exactly one is allowed")
  start = body.index(_CALL_OPEN)
  a = _ACTION_RE.search(body[:start])
  if a:
    result.summary = a.group(1)
  end = body.find(_CALL_CLOSE, start)
  if end < 0:
    return _fail(result, BROKEN_JSON, "<tool_call> is not closed by </tool_call>")
  trailing = body[end + len(_CALL_CLOSE):].strip()
  if trailing:
    return _fail(result, TEXT_AFTER_CALL, f"text after </tool_call>: {trailing[:60]!r}")
  payload = body[start + len(_CALL_OPEN):end].strip()
  try:
    call = json.loads(payload)
  except json.JSONDecodeError as e:
    return _fail(result, BROKEN_JSON, f"tool call is not valid JSON ({e.msg} at char {e.pos})")
  if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
    return _fail(result, BROKEN_JSON, 'tool call must be an object with "name" and "arguments"')
  extra = set(call) - {"name", "arguments"}
  if extra:
    return _fail(result, INVALID_CALL, f"tool call has unexpected keys {sorted(extra)}")
  name, arguments = call["name"], call["arguments"]
  reason = tools.validate_call(name, arguments) if isinstance(name, str) else f"tool name must be a string, got {name!r}"
  result.name, result.arguments = (name if isinstance(name, str) else None), arguments if isinstance(arguments, dict) else None
  if reason:
    return _fail(result, INVALID_CALL, reason)
  return result


def channel_of(name: str | None) -> str | None:
  """'gui' for computer_use, 'terminal' for bash."""
  return {tools.COMPUTER_USE: "gui", tools.BASH: "terminal"}.get(name or "")
