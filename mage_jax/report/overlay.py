"""The action drawn on the screenshot it was taken on, in the screenshot's pixels.

Coordinates are the schema's [0, 999] grid: px = round(x·(W−1)/999) (DESIGN.md, Tools), so 0 and
999 are the first and last pixel. Drags start at the pointer's position (the last coordinate any
earlier action moved it to); scrolls happen at the pointer.
"""
from __future__ import annotations

from typing import Any

CLICKS = ("left_click", "right_click", "middle_click", "double_click", "mouse_move")
SCROLL_ARROW = 0.12   # arrow length as a share of the screen height


def to_pixel(coordinate: Any, width: int, height: int) -> tuple[int, int] | None:
  """The pixel of a [0, 999] coordinate, None for anything that is not two in-range integers."""
  if not (isinstance(coordinate, (list, tuple)) and len(coordinate) == 2):
    return None
  x, y = coordinate
  if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 999 for v in (x, y)):
    return None
  return round(x * (width - 1) / 999), round(y * (height - 1) / 999)


def marks(name: str, arguments: dict[str, Any], pointer: tuple[int, int] | None, width: int,
          height: int) -> tuple[dict[str, Any], tuple[int, int] | None]:
  """(what to draw, the pointer after the action). Keys: click (x, y, kind), drag (x0, y0, x1, y1;
  x0 None when the start is unknown), scroll (x, y, y_end), text (typed text or keys)."""
  out: dict[str, Any] = {}
  if name != "computer_use" or not isinstance(arguments, dict):
    return out, pointer
  action = arguments.get("action")
  if action in CLICKS or action == "left_click_drag":
    end = to_pixel(arguments.get("coordinate"), width, height)
    if end is None:
      out["invalid"] = "coordinate outside [0, 999]² or not integers"
      return out, pointer
    if action == "left_click_drag":
      out["drag"] = {"x0": pointer[0] if pointer else None, "y0": pointer[1] if pointer else None,
                     "x1": end[0], "y1": end[1]}
    else:
      out["click"] = {"x": end[0], "y": end[1], "kind": action}
    return out, end
  if action == "scroll":
    x, y = pointer if pointer else (width // 2, height // 2)
    pixels = arguments.get("pixels")
    up = isinstance(pixels, (int, float)) and pixels > 0
    length = SCROLL_ARROW * height
    out["scroll"] = {"x": x, "y": y, "y_end": round(y - length if up else y + length),
                     "label": f"scroll {pixels}"}
  elif action == "type":
    out["text"] = f"type: {arguments.get('text', '')}"
  elif action == "key":
    keys = arguments.get("keys")
    out["text"] = "key: " + ("+".join(map(str, keys)) if isinstance(keys, list) else str(keys))
  return out, pointer
