"""Model text -> (think, action summary, one tool call), the inverse of `schema.format_response`.

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

from mage_jax.actions import schema

_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_OPEN_RE = re.compile(r"(?:^|\n)[ \t]*(<tool_call>)")
# Horizontal whitespace only: `\s*` at a line start crosses newlines and is quadratic on blank lines.
_ACTION_RE = re.compile(r"^[ \t]*Action:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
# Bounds that keep parsing linear and its messages short; a policy turn is a few thousand tokens.
MAX_RESPONSE_CHARS = 256_000
_MAX_REASON_CHARS = 300

# Error kinds (stable strings; counted per episode).
NO_TOOL_CALL = "no_tool_call"
MULTIPLE_TOOL_CALLS = "multiple_tool_calls"
BROKEN_JSON = "broken_json"
INVALID_CALL = "invalid_call"  # unknown tool/action, missing or out-of-range arguments
TEXT_AFTER_CALL = "text_after_call"
TOO_LONG = "too_long"  # the response exceeds MAX_RESPONSE_CHARS
ERROR_KINDS = (NO_TOOL_CALL, MULTIPLE_TOOL_CALLS, BROKEN_JSON, INVALID_CALL, TEXT_AFTER_CALL, TOO_LONG)


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
  if len(reason) > _MAX_REASON_CHARS:
    reason = reason[:_MAX_REASON_CHARS] + "..."
  result.error_kind, result.error = kind, reason
  return result


def _split_think(text: str) -> tuple[str, str]:
  """(think body, text after </think>); ("", text) without a closed <think> block."""
  start = text.find(_THINK_OPEN)
  end = text.find(_THINK_CLOSE, start + len(_THINK_OPEN)) if start >= 0 else -1
  if end < 0:
    return "", text
  return text[start + len(_THINK_OPEN):end].strip("\n"), text[end + len(_THINK_CLOSE):]


def parse_response(text: str) -> ParseResult:
  """Parses one assistant turn (without `<|im_start|>assistant` / `<|im_end|>`)."""
  result = ParseResult()
  if not isinstance(text, str):
    return _fail(result, BROKEN_JSON, f"the response must be text, got {type(text).__name__}")
  if len(text) > MAX_RESPONSE_CHARS:
    return _fail(result, TOO_LONG, f"the response has {len(text)} characters; at most {MAX_RESPONSE_CHARS}")
  text = text.replace("<|im_end|>", "").replace("<|endoftext|>", "")
  result.think, body = _split_think(text)
  # A JSON string can't hold a raw newline, so "<tool_call>" at a line start is a real tag even
  # when a typed text contains the literal string "<tool_call>".
  opens = [m.start(1) for m in _OPEN_RE.finditer(body)] or [m.start() for m in re.finditer(re.escape(_CALL_OPEN), body)]
  if not opens:
    return _fail(result, NO_TOOL_CALL, "the response has no <tool_call>")
  if len(opens) > 1:
    return _fail(result, MULTIPLE_TOOL_CALLS, f"the response has {len(opens)} <tool_call> blocks; exactly one is allowed")
  start = opens[0]
  a = _ACTION_RE.search(body[:start])
  if a:
    result.summary = a.group(1)
  end = body.find("\n" + _CALL_CLOSE, start)
  end = end + 1 if end >= 0 else body.find(_CALL_CLOSE, start)
  if end < 0:
    return _fail(result, BROKEN_JSON, "<tool_call> is not closed by </tool_call>")
  trailing = body[end + len(_CALL_CLOSE):].strip()
  if _CALL_OPEN in trailing:
    return _fail(result, MULTIPLE_TOOL_CALLS, "the response has 2 or more <tool_call> blocks; exactly one is allowed")
  if trailing:
    return _fail(result, TEXT_AFTER_CALL, f"text after </tool_call>: {trailing[:60]!r}")
  payload = body[start + len(_CALL_OPEN):end].strip()
  try:
    call = json.loads(payload)
  except json.JSONDecodeError as e:
    return _fail(result, BROKEN_JSON, f"tool call is not valid JSON ({e.msg} at char {e.pos})")
  except ValueError as e:  # an integer past Python's digit limit
    return _fail(result, BROKEN_JSON, f"tool call holds an unreadable number ({e})")
  except RecursionError:
    return _fail(result, BROKEN_JSON, "tool call is nested too deeply")
  if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
    return _fail(result, BROKEN_JSON, 'tool call must be an object with "name" and "arguments"')
  extra = set(call) - {"name", "arguments"}
  if extra:
    return _fail(result, INVALID_CALL, f"tool call has unexpected keys {sorted(extra)}")
  name, arguments = call["name"], call["arguments"]
  reason = schema.validate_call(name, arguments) if isinstance(name, str) else f"tool name must be a string, got {type(name).__name__}"
  result.name, result.arguments = (name if isinstance(name, str) else None), arguments if isinstance(arguments, dict) else None
  if reason:
    return _fail(result, INVALID_CALL, reason)
  return result


def parse_for_toolset(text: str, toolset: str) -> ParseResult:
  """`parse_response`, then a call to a tool outside `toolset` (schema.TOOLSETS) is an invalid call."""
  result = parse_response(text)
  allowed = schema.TOOLSETS[toolset]
  if result.ok and result.name not in allowed:
    return _fail(result, INVALID_CALL, f"tool {result.name!r} is not available in this harness; "
                                       f"the tools are {list(allowed)}")
  return result


def channel_of(name: str | None) -> str | None:
  """'gui' for computer_use, 'terminal' for bash."""
  return {schema.COMPUTER_USE: "gui", schema.BASH: "terminal"}.get(name or "")
