"""Key names of the `computer_use.key` action: the spellings models write -> one canonical name.

Models write "ctrl+s", "Page Up", "PgDn", "return", "cmd", "F5" or "arrow_left"
for the same few keys. `parse_keys` turns a `keys` list into canonical names
(a "+" chord is split into its keys), or says which entry it can't read;
`x_keysym_name` and `pyautogui_name` map a canonical name to the local X
desktop and to the remote OSWorld (pyautogui) path, so both paths accept the
same spellings.
"""
from __future__ import annotations

from typing import Sequence

# canonical name -> (X keysym name, pyautogui name)
_NAMED: dict[str, tuple[str, str]] = {
    "ctrl": ("Control_L", "ctrl"), "alt": ("Alt_L", "alt"), "shift": ("Shift_L", "shift"),
    "super": ("Super_L", "win"), "enter": ("Return", "enter"), "escape": ("Escape", "esc"),
    "tab": ("Tab", "tab"), "backspace": ("BackSpace", "backspace"), "delete": ("Delete", "delete"),
    "space": ("space", "space"), "insert": ("Insert", "insert"), "capslock": ("Caps_Lock", "capslock"),
    "up": ("Up", "up"), "down": ("Down", "down"), "left": ("Left", "left"), "right": ("Right", "right"),
    "home": ("Home", "home"), "end": ("End", "end"), "pageup": ("Prior", "pageup"),
    "pagedown": ("Next", "pagedown"), "printscreen": ("Print", "printscreen"),
    "numlock": ("Num_Lock", "numlock"), "scrolllock": ("Scroll_Lock", "scrolllock"),
    "pause": ("Pause", "pause"), "menu": ("Menu", "apps"),
    **{f"f{i}": (f"F{i}", f"f{i}") for i in range(1, 25)},
}

NAMED_KEYS = tuple(_NAMED)

# other spellings (after lower-casing and dropping spaces, "_" and "-") -> canonical name
_ALIASES: dict[str, str] = {
    "control": "ctrl", "ctl": "ctrl", "controll": "ctrl", "lctrl": "ctrl", "rctrl": "ctrl",
    "leftctrl": "ctrl", "rightctrl": "ctrl", "ctrll": "ctrl", "ctrlr": "ctrl",
    "option": "alt", "opt": "alt", "lalt": "alt", "ralt": "alt", "leftalt": "alt", "rightalt": "alt",
    "altl": "alt", "altr": "alt",
    "lshift": "shift", "rshift": "shift", "leftshift": "shift", "rightshift": "shift",
    "shiftl": "shift", "shiftr": "shift",
    "win": "super", "windows": "super", "cmd": "super", "command": "super", "meta": "super",
    "superl": "super", "superr": "super", "winleft": "super", "winright": "super",
    "return": "enter", "ret": "enter", "kpenter": "enter", "esc": "escape", "bksp": "backspace",
    "del": "delete", "ins": "insert", "spacebar": "space", "caps": "capslock",
    "pgup": "pageup", "prior": "pageup", "pgdn": "pagedown", "pgdown": "pagedown", "next": "pagedown",
    "print": "printscreen", "prtsc": "printscreen", "prtscr": "printscreen", "prntscrn": "printscreen",
    "scroll": "scrolllock", "apps": "menu", "contextmenu": "menu",
    **{f"{a}{d}": d for d in ("up", "down", "left", "right") for a in ("arrow", "")},
    **{f"{d}arrow": d for d in ("up", "down", "left", "right")},
}

# Printable ASCII that has a spelled-out name (X keysym names, as xdotool users write them).
_CHAR_NAMES = {
    "minus": "-", "plus": "+", "equal": "=", "equals": "=", "comma": ",", "period": ".", "dot": ".",
    "slash": "/", "backslash": "\\", "semicolon": ";", "colon": ":", "apostrophe": "'", "quote": "'",
    "grave": "`", "backtick": "`", "bracketleft": "[", "bracketright": "]", "asterisk": "*",
    "underscore": "_", "question": "?", "exclam": "!", "at": "@", "numbersign": "#", "hash": "#",
    "dollar": "$", "percent": "%", "ampersand": "&", "parenleft": "(", "parenright": ")",
    "less": "<", "greater": ">", "bar": "|", "asciitilde": "~", "tilde": "~",
}

MAX_KEYS = 8  # keys pressed at once; more is not a chord any keyboard makes


def _canonical(name: str) -> str | None:
  """One key name -> canonical name, or None if unknown."""
  if len(name) == 1:
    return name if 0x20 < ord(name) < 0x7F else ("space" if name == " " else None)
  squashed = "".join(ch for ch in name.strip().lower() if ch not in " _-")
  if len(squashed) == 1:
    return squashed
  if squashed in _NAMED:
    return squashed
  if squashed in _ALIASES:
    return _ALIASES[squashed]
  return _CHAR_NAMES.get(squashed)


def _split_chord(entry: str) -> list[str]:
  """'ctrl+shift+t' -> ['ctrl', 'shift', 't']; 'ctrl++' -> ['ctrl', '+']; '+' -> ['+']."""
  if len(entry) <= 1 or "+" not in entry:
    return [entry]
  parts, current = [], ""
  for i, ch in enumerate(entry):
    if ch == "+" and current.strip() and i + 1 < len(entry):
      parts.append(current)
      current = ""
    else:
      current += ch
  return parts + [current]


def parse_keys(keys: Sequence[str]) -> tuple[list[str] | None, str | None]:
  """A `keys` argument -> (canonical names, None) or (None, a one-line reason)."""
  names: list[str] = []
  for entry in keys:
    for part in _split_chord(entry):
      canonical = _canonical(part)
      if canonical is None:
        return None, (f"unknown key name {part[:40]!r}; use names like \"ctrl\", \"shift\", \"enter\", "
                      "\"escape\", \"tab\", \"pageup\", \"up\", \"f5\" or one character")
      names.append(canonical)
  if len(names) > MAX_KEYS:
    return None, f"{len(names)} keys pressed at once; at most {MAX_KEYS}"
  return names, None


def x_keysym_name(canonical: str) -> str | None:
  """X keysym name for a named key; None for a single character (the desktop maps characters)."""
  return _NAMED[canonical][0] if canonical in _NAMED else None


def pyautogui_name(canonical: str) -> str:
  """The name pyautogui.hotkey accepts (its KEYBOARD_KEYS spelling).

  A letter is lower-cased: in a chord it names a key, and pyautogui would add Shift for "S"
  where the local desktop presses the plain key.
  """
  return _NAMED[canonical][1] if canonical in _NAMED else canonical.lower()
