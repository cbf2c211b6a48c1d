"""Environment and model text made safe to display as text.

Jinja2's autoescaping turns markup into text; this module handles what escaping does not: control
characters (ANSI colour sequences are shown as a visible ␛ so hostile output cannot hide text), lone
surrogates from JSON (they cannot be encoded as UTF-8), and sizes (a 10 MB line must not make a
10 MB page).
"""
from __future__ import annotations

import json
from typing import Any

MAX_CHARS = 100_000        # per text field; the rest is cut with a note saying how much
PREVIEW_LINES = 12         # a folded text shows this many lines ...
PREVIEW_CHARS = 1_500      # ... or this many characters before "show all"

# C0 controls except tab and newline become their visible Unicode "control pictures" (ESC -> ␛),
# DEL -> ␡, C1 controls -> \x85-style escapes.
_CONTROLS = {c: chr(0x2400 + c) for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROLS[0x7F] = "\u2421"
_CONTROLS.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})


def clean(value: Any, limit: int = MAX_CHARS) -> str:
  """Displayable text: never raises, whatever the value."""
  if value is None:
    return ""
  if not isinstance(value, str):
    value = json.dumps(value, ensure_ascii=False, default=repr)
  cut = len(value) - limit
  if cut > 0:
    value = value[:limit]
  # A lone surrogate (JSON "\udc80", or a byte read with surrogateescape) becomes "\udc80" text.
  value = value.encode("utf-8", "backslashreplace").decode("utf-8")
  value = value.translate(_CONTROLS)
  if cut > 0:
    value += f"\n… [{cut:,} more characters not shown]"
  return value


def fold(text: str) -> tuple[str, bool]:
  """(preview, folded): a long text shows a preview and the whole of it behind a <details>."""
  lines = text.split("\n")
  if len(lines) <= PREVIEW_LINES and len(text) <= PREVIEW_CHARS:
    return text, False
  preview = "\n".join(lines[:PREVIEW_LINES])[:PREVIEW_CHARS]
  return preview, True


def slug(text: str, digest: str) -> str:
  """A file name for an episode id: safe characters only, unique by the id's digest."""
  safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in text)[:60]
  return f"{safe.strip('.') or 'episode'}-{digest[:10]}"
