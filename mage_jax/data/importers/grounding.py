"""Grounding samples as stage-1 data: (screenshot, instruction, target region) -> a one-step
episode whose response is one computer_use click at the target, in [0, 999] (docs/data.md,
"Grounding samples").

Three record formats:
- generic: {image, instruction, point | box, [coord_space, click, action, think, id, source, stage]};
- ScreenSpot-v2 (OS-Copilot/ScreenSpot-v2: screenspot_{desktop,mobile,web}_v2.json, one JSON
  array each): {img_filename, instruction, bbox: [x, y, width, height] in pixels, data_type:
  "text" | "icon", data_source}; the split is the file's platform (desktop / mobile / web);
- OSWorld-G (xlang-ai/OSWorld-G benchmark/OSWorld-G.json, or _refined): {id, image_path,
  image_size: [W, H], instruction, box_type: "bbox" | "polygon" | "refusal", box_coordinates:
  [x, y, width, height] (bbox) or [x0, y0, x1, y1, ...] (polygon vertices), pixels; GUI_types}.
  A refusal record (the target is not on the screen) becomes a terminate(failure) step. The
  categories of benchmark/classification_result.json ({"classified": {category: [id or
  {"id": ...}]}}) are attached when that file is given or lies next to the input.

meta["grounding"] holds the target as the evaluation needs it (image_size, the pixel box or
polygon, refusal) and `hits` scores a predicted call against it in pixel space, as the
benchmarks' own scripts do; meta["benchmark"] holds the name, split and the categories a
leaderboard reports (runs/grounding_eval.py).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Iterator

from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import sources

CLICK_ACTIONS = ("left_click", "double_click", "right_click", "middle_click", "mouse_move")
COORD_SPACES = ("pixel", "relative", "norm999")
SCREENSPOT_SPLITS = ("mobile", "desktop", "web")
OSWORLD_G_BOX_TYPES = ("bbox", "polygon", "refusal")
REFUSAL_ACTION = "Stop: the requested element is not on the screen"


def _bad(reason: str, kind: str = tr.INVALID_FIELD) -> tr.EpisodeError:
  return tr.EpisodeError(kind, reason)


def _to_999(x: float, y: float, space: str, w: int, h: int) -> list[int]:
  if space == "pixel":
    x, y = x * tools.COORD_MAX / (w - 1), y * tools.COORD_MAX / (h - 1)
  elif space == "relative":
    x, y = x * tools.COORD_MAX, y * tools.COORD_MAX
  return [min(tools.COORD_MAX, max(0, int(round(v)))) for v in (x, y)]


def _numbers(v: Any, n: int | None = None) -> bool:
  return (isinstance(v, list) and (n is None or len(v) == n)
          and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))


def _default_action(instruction: str, click: str) -> str:
  text = instruction.strip().rstrip(".")
  verbs = ("click", "tap", "select", "press", "open", "double", "right", "choose", "hover")
  if text.lower().startswith(verbs):
    return text + "."
  return f"{click.replace('_', ' ').capitalize()} {text}."


def _instruction(record: dict, field: str = "instruction") -> str:
  text = record.get(field)
  if not isinstance(text, str) or not text.strip():
    raise _bad(f"{field}: expected a non-empty string")
  return text.strip()


def _episode(record: dict, ep_id: str, image: str, instruction: str, size: tuple[int, int],
             arguments: dict[str, Any], action: str, grounding: dict, root: str, *, source: str,
             stage: int, benchmark: dict | None = None) -> tr.Episode:
  meta: dict[str, Any] = {"grounding": {"image_size": list(size), **grounding}}
  if benchmark:
    meta["benchmark"] = benchmark
  d = {"id": ep_id, "instruction": instruction, "tools": list(tools.TOOL_NAMES),
       "screen_size": list(size), "source": source, "stage": stage, "meta": meta,
       "steps": [{"observation": {"screenshot": image, "text": None}, "think": record.get("think", ""),
                  "action": action, "tool_call": {"name": tools.COMPUTER_USE, "arguments": arguments}}]}
  return tr.episode_from_dict(d, root)


def _box_target(box: list[float], w: int, h: int) -> tuple[list[int], dict]:
  """(click coordinate, grounding meta) for a pixel box [x1, y1, x2, y2]."""
  centre = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
  coord = _to_999(*centre, "pixel", w, h)
  return coord, {"coord_space": "pixel", "point": centre, "coordinate": coord, "box": box,
                 "box_999": _to_999(box[0], box[1], "pixel", w, h) + _to_999(box[2], box[3], "pixel", w, h)}


# ------------------------------------------------------------------------------ generic


def grounding_episode(record: Any, root: str = "", *, episode_id: str = "",
                      source: str | None = None, stage: int | None = None) -> tr.Episode:
  """{image, instruction, point | box, [coord_space, action, think, click, id, source, stage]}
  -> 1-step Episode. source/stage: defaults for records without them ("grounding", 1)."""
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  image = record.get("image")
  instruction = _instruction(record)
  space = record.get("coord_space", "pixel")
  if space not in COORD_SPACES:
    raise _bad(f"coord_space: expected one of {COORD_SPACES}, got {space!r}")
  click = record.get("click", "left_click")
  if click not in CLICK_ACTIONS:
    raise _bad(f"click: expected one of {CLICK_ACTIONS}, got {click!r}")
  w, h = sources.image_size(image, root)
  box = record.get("box", record.get("bbox"))
  point = record.get("point")
  if box is not None:
    if not _numbers(box, 4) or box[0] > box[2] or box[1] > box[3]:
      raise _bad(f"box: expected [x1, y1, x2, y2] with x1 <= x2, y1 <= y2, got {box!r}")
    point = point if point is not None else [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
  if not _numbers(point, 2):
    raise _bad(f"point: expected [x, y] (or a box), got {point!r}")
  coord = _to_999(point[0], point[1], space, w, h)
  meta = {"coord_space": space, "point": point, "coordinate": coord, "box": box,
          "box_999": None if box is None else _to_999(box[0], box[1], space, w, h)
          + _to_999(box[2], box[3], space, w, h)}
  if box is not None and space != "pixel":  # the pixel box the evaluation tests against
    meta["box_px"] = [box[0] * (w - 1), box[1] * (h - 1), box[2] * (w - 1), box[3] * (h - 1)] \
        if space == "relative" else [tools.to_pixel(v, s) for v, s in zip(box, (w, h, w, h))]
  return _episode(record, str(record.get("id") or episode_id), image, instruction, (w, h),
                  {"action": click, "coordinate": coord},
                  record.get("action") or _default_action(instruction, click), meta, root,
                  source=record.get("source", "grounding" if source is None else source),
                  stage=record.get("stage", 1 if stage is None else stage))


def read_grounding_file(path: str, image_root: str | None = None, *, source: str | None = None,
                        stage: int | None = None) -> Iterator[tr.Episode | tr.SkippedItem]:
  """JSONL (or a JSON array) of generic grounding records; images resolve against `image_root`
  (default: the file's folder). source/stage: defaults for records without them."""
  return sources.read_records(path, grounding_episode, image_root, source=source, stage=stage)


# ------------------------------------------------------------------------------ ScreenSpot-v2


def screenspot_split(path: str) -> str | None:
  """The platform split from the official file name (screenspot_desktop_v2.json -> desktop)."""
  m = re.search(r"screenspot_(mobile|desktop|web)", os.path.basename(path).lower())
  return m.group(1) if m else None


def screenspot_episode(record: Any, root: str = "", *, episode_id: str = "", split: str = "",
                       source: str = "screenspot_v2", stage: int = 1) -> tr.Episode:
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  instruction = _instruction(record)
  w, h = sources.image_size(record.get("img_filename"), root, "img_filename")
  bbox = record.get("bbox")
  if not _numbers(bbox, 4) or bbox[2] < 0 or bbox[3] < 0:
    raise _bad(f"bbox: expected [x, y, width, height] in pixels, got {bbox!r}")
  box = [bbox[0], bbox[1], bbox[0] + bbox[2], bbox[1] + bbox[3]]
  coord, meta = _box_target(box, w, h)
  bench = {"name": "screenspot_v2", "split": split, "data_type": record.get("data_type"),
           "data_source": record.get("data_source")}
  return _episode(record, f"{episode_id}" if not record.get("id") else str(record["id"]),
                  record["img_filename"], instruction, (w, h), {"action": "left_click", "coordinate": coord},
                  _default_action(instruction, "left_click"), meta, root, source=source, stage=stage,
                  benchmark=bench)


def read_screenspot_file(path: str, image_root: str | None = None, *, split: str | None = None,
                         source: str | None = None, stage: int | None = None
                         ) -> Iterator[tr.Episode | tr.SkippedItem]:
  """A ScreenSpot-v2 annotation file (JSON array); images resolve against `image_root`
  (the dataset's screenspotv2_image/ folder). split: mobile | desktop | web (default: from
  the file name)."""
  split = split or screenspot_split(path)
  if split not in SCREENSPOT_SPLITS:
    raise ValueError(f"{path}: cannot tell the ScreenSpot-v2 split from the file name; "
                     f"pass split= one of {SCREENSPOT_SPLITS}")
  return sources.read_records(path, screenspot_episode, image_root, split=split,
                              source=source or "screenspot_v2", stage=1 if stage is None else stage)


# ------------------------------------------------------------------------------ OSWorld-G


def load_osworld_g_categories(path: str) -> dict[str, list[str]]:
  """classification_result.json -> {record id: [category, ...]} (a record may have several)."""
  with open(path, encoding="utf-8") as f:
    data = json.load(f)
  classified = data.get("classified") if isinstance(data, dict) else None
  if not isinstance(classified, dict):
    raise ValueError(f"{path}: expected {{\"classified\": {{category: [ids]}}}}")
  out: dict[str, list[str]] = {}
  for category, entries in classified.items():
    for e in entries if isinstance(entries, list) else []:
      rid = e.get("id") if isinstance(e, dict) else e
      if isinstance(rid, str):
        out.setdefault(rid, []).append(category)
  return out


def _inside_point(polygon: list[float]) -> list[float]:
  """A point inside a simple polygon: the middle of the first inside span of the horizontal
  line through the middle of its bounding box (the vertex mean can fall outside a concave one)."""
  xs, ys = polygon[0::2], polygon[1::2]
  y = (min(ys) + max(ys)) / 2
  crossings = sorted(xs[i] + (y - ys[i]) * (xs[j] - xs[i]) / (ys[j] - ys[i])
                     for i, j in ((i, (i + 1) % len(xs)) for i in range(len(xs)))
                     if (ys[i] > y) != (ys[j] > y))
  return [(crossings[0] + crossings[1]) / 2, y] if len(crossings) >= 2 else [sum(xs) / len(xs), y]


def osworld_g_episode(record: Any, root: str = "", *, episode_id: str = "",
                      categories: dict[str, list[str]] | None = None, source: str = "osworld_g",
                      stage: int = 1) -> tr.Episode:
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  rid = record.get("id")
  if not isinstance(rid, str) or not rid:
    raise _bad("id: expected a non-empty string")
  instruction = _instruction(record)
  w, h = sources.image_size(record.get("image_path"), root, "image_path")
  if record.get("image_size") is not None and record["image_size"] != [w, h]:
    raise _bad(f"image_size: {record['image_size']} but {record['image_path']} is {w}x{h}; "
               "the coordinates would not match the screenshot")
  kind, coords = record.get("box_type"), record.get("box_coordinates")
  if kind not in OSWORLD_G_BOX_TYPES:
    raise _bad(f"box_type: expected one of {OSWORLD_G_BOX_TYPES}, got {kind!r}")
  bench = {"name": "osworld_g", "split": "osworld_g", "box_type": kind,
           "gui_types": record.get("GUI_types") or [],
           "categories": (categories or {}).get(rid, ["refusal"] if kind == "refusal" else [])}
  if kind == "refusal":
    return _episode(record, rid, record["image_path"], instruction, (w, h),
                    {"action": "terminate", "status": "failure"}, REFUSAL_ACTION,
                    {"refusal": True}, root, source=source, stage=stage, benchmark=bench)
  if kind == "bbox":
    if not _numbers(coords, 4) or coords[2] < 0 or coords[3] < 0:
      raise _bad(f"box_coordinates: expected [x, y, width, height] for a bbox, got {coords!r}")
    coord, meta = _box_target([coords[0], coords[1], coords[0] + coords[2], coords[1] + coords[3]], w, h)
  else:
    if not _numbers(coords) or len(coords) < 6 or len(coords) % 2:
      raise _bad(f"box_coordinates: expected [x0, y0, x1, y1, ...] (3+ vertices) for a polygon, "
                 f"got {str(coords)[:80]}")
    point = _inside_point(coords)
    coord = _to_999(*point, "pixel", w, h)
    meta = {"coord_space": "pixel", "point": point, "coordinate": coord, "polygon": coords,
            "box": [min(coords[0::2]), min(coords[1::2]), max(coords[0::2]), max(coords[1::2])]}
  return _episode(record, rid, record["image_path"], instruction, (w, h),
                  {"action": "left_click", "coordinate": coord},
                  _default_action(instruction, "left_click"), meta, root, source=source, stage=stage,
                  benchmark=bench)


def read_osworld_g_file(path: str, image_root: str | None = None, *, categories: str | None = None,
                        source: str | None = None, stage: int | None = None
                        ) -> Iterator[tr.Episode | tr.SkippedItem]:
  """OSWorld-G.json (or OSWorld-G_refined.json); images resolve against `image_root` (the
  benchmark's images/ folder). categories: classification_result.json (default: the one next
  to `path`, if any)."""
  if categories is None:
    beside = os.path.join(os.path.dirname(os.path.abspath(path)), "classification_result.json")
    categories = beside if os.path.isfile(beside) else ""
  by_id = load_osworld_g_categories(categories) if categories else {}
  return sources.read_records(path, osworld_g_episode, image_root, categories=by_id,
                              source=source or "osworld_g", stage=1 if stage is None else stage)


# ------------------------------------------------------------------------------ scoring


def _in_polygon(x: float, y: float, polygon: list[float]) -> bool:
  """Even-odd rule: a ray to the right of (x, y) crosses the boundary an odd number of times."""
  xs, ys = polygon[0::2], polygon[1::2]
  inside = False
  for i in range(len(xs)):
    j = i - 1
    if (ys[i] > y) != (ys[j] > y) and x < xs[i] + (y - ys[i]) * (xs[j] - xs[i]) / (ys[j] - ys[i]):
      inside = not inside
  return inside


def target_box_px(grounding: dict) -> list[float] | None:
  """The target box in pixels (generic records in relative/norm999 space keep it in box_px)."""
  if grounding.get("box_px") is not None:
    return grounding["box_px"]
  return grounding.get("box") if grounding.get("coord_space", "pixel") == "pixel" else None


def hits(grounding: dict, name: str | None, arguments: dict | None) -> bool:
  """Whether a predicted call answers the target: for a refusal, terminate(failure); else a
  computer_use call with a coordinate whose pixel ([0, 999] -> x·(W−1)/999, unrounded) lies in
  the box (edges included) or the polygon."""
  args = arguments or {}
  if grounding.get("refusal"):
    return name == tools.COMPUTER_USE and args.get("action") == "terminate" and args.get("status") == "failure"
  c = args.get("coordinate")
  if name != tools.COMPUTER_USE or not _numbers(c, 2):
    return False
  w, h = grounding["image_size"]
  x, y = c[0] * (w - 1) / tools.COORD_MAX, c[1] * (h - 1) / tools.COORD_MAX
  if grounding.get("polygon"):
    return _in_polygon(x, y, grounding["polygon"])
  box = target_box_px(grounding)
  if box is None:  # a point-only record has no region to hit
    return False
  return box[0] <= x <= box[2] and box[1] <= y <= box[3]
