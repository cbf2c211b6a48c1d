"""Importers from formats users already have into native Episodes (docs/data.md).

1. Chat records, OpenAI / ms-swift / LLaMA-Factory style: `messages` (or
   ShareGPT `conversations` with from/value) + `images` + `tools`. Assistant
   turns carry `tool_calls` (or ms-swift `tool_call` messages, or an inline
   `<tool_call>` block); results come as `tool` (`tool_response`,
   `observation`) messages. `<image>` placeholders are consumed in order from
   `images`. Each assistant turn becomes one step; the observation before it
   (the first user turn's image/text, then each tool result) is its o_t.
2. Grounding samples for stage 1: (screenshot, instruction, target point or
   box) -> a one-step episode whose response is a single computer_use click at
   the target's centre in [0, 999]; the box is kept in meta for click-accuracy eval.

Both produce native Episodes through `trajectory.episode_from_dict`, so the
same validation applies, and bad records are yielded as SkippedItems.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Iterator

from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tr

IMAGE_PLACEHOLDER = "<image>"
_ROLE_ALIASES = {"human": "user", "gpt": "assistant", "function_call": "tool_call",
                 "observation": "tool", "tool_response": "tool"}
_INLINE_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_THINK = re.compile(r"^\s*<think>(.*?)</think>", re.S)


def _bad(reason: str, kind: str = tr.INVALID_FIELD) -> tr.EpisodeError:
  return tr.EpisodeError(kind, reason)


def _jsonish(value: Any, where: str, kind: str = tr.INVALID_FIELD) -> Any:
  """Values that some formats store as JSON strings (tools, arguments, ms-swift tool_call)."""
  if isinstance(value, str):
    try:
      return json.loads(value)
    except json.JSONDecodeError as e:
      raise _bad(f"{where}: not valid JSON ({e.msg})", kind) from None
  return value


class _Images:
  """Consumes `images` in order, one per <image> placeholder or image content part."""

  def __init__(self, images: Any):
    if images is None:
      images = []
    if not isinstance(images, list):
      raise _bad("images: expected a list of paths")
    self.paths = [im.get("path") if isinstance(im, dict) else im for im in images]
    if not all(isinstance(p, str) and p for p in self.paths):
      raise _bad("images: every entry must be a path (or {\"path\": ...})")
    self.next = 0

  def take(self, where: str) -> str:
    if self.next >= len(self.paths):
      raise _bad(f"{where}: more <image> placeholders than images ({len(self.paths)})")
    self.next += 1
    return self.paths[self.next - 1]


def _content(msg: dict, imgs: _Images, where: str) -> tuple[str, list[str]]:
  """(text without image placeholders, image paths) of one message."""
  content = msg.get("content", msg.get("value"))
  if content is None:
    return "", []
  if isinstance(content, list):  # OpenAI multimodal parts
    texts, paths = [], []
    for i, part in enumerate(content):
      kind = part.get("type") if isinstance(part, dict) else None
      if kind == "text":
        texts.append(part.get("text", ""))
      elif kind in ("image", "image_url"):
        ref = part.get("image") or part.get("image_url")
        ref = ref.get("url") if isinstance(ref, dict) else ref
        if isinstance(ref, str) and ref.startswith("data:"):
          raise _bad(f"{where}.content[{i}]: inline base64 images are not supported; use files")
        paths.append(ref if isinstance(ref, str) and ref else imgs.take(f"{where}.content[{i}]"))
      else:
        raise _bad(f"{where}.content[{i}]: unknown content part {part!r:.80}")
    return "".join(texts), paths
  if not isinstance(content, str):
    raise _bad(f"{where}.content: expected a string or a list of parts")
  paths = [imgs.take(where) for _ in range(content.count(IMAGE_PLACEHOLDER))]
  return content.replace(IMAGE_PLACEHOLDER, ""), paths


def _observation(text: str, paths: list[str], where: str) -> dict:
  if len(paths) > 1:
    raise _bad(f"{where}: {len(paths)} images in one observation; expected at most one screenshot")
  text = text.strip("\n")
  return {"screenshot": paths[0] if paths else None, "text": text or None}


def _call_from(obj: Any, where: str) -> dict:
  obj = _jsonish(obj, where)
  if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
    obj = obj["function"]
  if not isinstance(obj, dict) or "name" not in obj:
    raise _bad(f"{where}: expected {{name, arguments}}")
  args = _jsonish(obj.get("arguments", {}), f"{where}.arguments", tr.INVALID_ARGUMENTS)
  return {"name": obj["name"], "arguments": args}


def _assistant_step(msg: dict, extra_calls: list[dict], where: str) -> dict:
  content = msg.get("content", msg.get("value")) or ""
  if not isinstance(content, str):
    raise _bad(f"{where}.content: expected a string")
  think = msg.get("reasoning_content")
  m = _THINK.match(content)
  if m:
    think = m.group(1) if think is None else think
    content = content[m.end():]
  calls = [_call_from(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(msg.get("tool_calls") or [])]
  for i, body in enumerate(_INLINE_CALL.findall(content)):
    calls.append(_call_from(body, f"{where}.content <tool_call> #{i}"))
  content = _INLINE_CALL.sub("", content)
  calls += extra_calls
  if len(calls) != 1:
    raise _bad(f"{where}: expected exactly one tool call per assistant turn, got {len(calls)}")
  lines = [ln.strip() for ln in content.strip().splitlines() if ln.strip()]
  action_lines = [ln for ln in lines if ln.startswith("Action:")]
  if action_lines:
    action = action_lines[0][len("Action:"):].strip()
  elif len(lines) == 1:
    action = lines[0]
  else:
    raise _bad(f"{where}: no one-line `Action:` summary in the assistant content")
  return {"think": (think or "").strip("\n"), "action": action, "tool_call": calls[0]}


def episode_from_messages(record: Any, root: str = "", *, episode_id: str = "", source: str = "",
                          stage: int = 0) -> tr.Episode:
  """One chat record -> Episode (image paths relative to `root`); raises EpisodeError."""
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  msgs = record.get("messages", record.get("conversations"))
  if not isinstance(msgs, list) or not msgs:
    raise _bad("messages: expected a non-empty list", tr.EMPTY_EPISODE if msgs == [] else tr.INVALID_FIELD)
  imgs = _Images(record.get("images"))
  tool_spec = _jsonish(record.get("tools"), "tools")
  norm = []
  for i, m in enumerate(msgs):
    if not isinstance(m, dict):
      raise _bad(f"messages[{i}]: expected an object")
    role = m.get("role", m.get("from"))
    norm.append((_ROLE_ALIASES.get(role, role), m, f"messages[{i}]"))

  steps: list[dict] = []
  instruction, pending_obs, system = None, None, None
  i = 0
  while i < len(norm):
    role, m, where = norm[i]
    if role == "system":
      system = _content(m, imgs, where)[0]
    elif role in ("user", "tool"):
      text, paths = _content(m, imgs, where)
      if instruction is None:
        if role != "user":
          raise _bad(f"{where}: the first turn must be the user's task")
        instruction = text.strip()
        pending_obs = _observation("", paths, where)
      else:  # a tool result (or a later user turn) is the next observation
        while i + 1 < len(norm) and norm[i + 1][0] == "tool":  # merge parallel results
          i += 1
          t2, p2 = _content(norm[i][1], imgs, norm[i][2])
          text, paths = text + "\n" + t2, paths + p2
        pending_obs = _observation(text, paths, where)
    elif role in ("assistant", "tool_call"):
      if instruction is None:
        raise _bad(f"{where}: assistant turn before the user's task")
      extra = []
      msg = m if role == "assistant" else {}
      while i + 1 < len(norm) and norm[i + 1][0] == "tool_call":  # ms-swift: calls as messages
        i += 1
        extra.append(_call_from(norm[i][1].get("content", norm[i][1].get("value")), norm[i][2]))
      if role == "tool_call":
        extra.insert(0, _call_from(m.get("content", m.get("value")), where))
      step = _assistant_step(msg, extra, where)
      step["observation"] = pending_obs or {"screenshot": None, "text": None}
      pending_obs = None
      steps.append(step)
    else:
      raise _bad(f"{where}: unknown role {role!r}")
    i += 1
  if imgs.next != len(imgs.paths):
    raise _bad(f"images: {len(imgs.paths)} images but {imgs.next} placeholders")
  if not steps:
    raise _bad("messages: no assistant turn", tr.EMPTY_EPISODE)
  d = {"id": record.get("id") or episode_id, "instruction": instruction or "", "steps": steps,
       "tools": tool_spec, "source": record.get("source", source), "stage": record.get("stage", stage),
       "screen_size": record.get("screen_size"), "meta": {"system": system} if system else {}}
  return tr.episode_from_dict(d, root)


# ------------------------------------------------------------------------------ grounding

CLICK_ACTIONS = ("left_click", "double_click", "right_click", "middle_click", "mouse_move")
COORD_SPACES = ("pixel", "relative", "norm999")


def _to_999(x: float, y: float, space: str, w: int, h: int) -> list[int]:
  if space == "pixel":
    x, y = x * tools.COORD_MAX / (w - 1), y * tools.COORD_MAX / (h - 1)
  elif space == "relative":
    x, y = x * tools.COORD_MAX, y * tools.COORD_MAX
  return [min(tools.COORD_MAX, max(0, int(round(v)))) for v in (x, y)]


def _default_action(instruction: str, click: str) -> str:
  text = instruction.strip().rstrip(".")
  verbs = ("click", "tap", "select", "press", "open", "double", "right", "choose", "hover")
  if text.lower().startswith(verbs):
    return text + "."
  return f"{click.replace('_', ' ').capitalize()} {text}."


def grounding_episode(record: Any, root: str = "", *, episode_id: str = "",
                      tool_names: tuple[str, ...] = tools.TOOL_NAMES, source: str | None = None,
                      stage: int | None = None) -> tr.Episode:
  """{image, instruction, point | box, [coord_space, action, think, click, id, source, stage]}
  -> 1-step Episode. source/stage: defaults for records without them ("grounding", 1)."""
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  image, instruction = record.get("image"), record.get("instruction")
  if not isinstance(image, str) or not image:
    raise _bad("image: expected a path")
  if not isinstance(instruction, str) or not instruction.strip():
    raise _bad("instruction: expected a non-empty string")
  space = record.get("coord_space", "pixel")
  if space not in COORD_SPACES:
    raise _bad(f"coord_space: expected one of {COORD_SPACES}, got {space!r}")
  click = record.get("click", "left_click")
  if click not in CLICK_ACTIONS:
    raise _bad(f"click: expected one of {CLICK_ACTIONS}, got {click!r}")
  path = image if os.path.isabs(image) else os.path.join(root, image)
  if not os.path.isfile(path):
    raise _bad(f"image: no file {path}", tr.MISSING_IMAGE)
  try:
    with Image.open(path) as im:
      w, h = im.size
  except Exception as e:  # noqa: BLE001
    raise _bad(f"image: cannot read {path}: {e}", tr.UNREADABLE_IMAGE) from None
  box = record.get("box", record.get("bbox"))
  point = record.get("point")
  num = lambda v, n: isinstance(v, list) and len(v) == n and all(
      isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
  if box is not None:
    if not num(box, 4) or box[0] > box[2] or box[1] > box[3]:
      raise _bad(f"box: expected [x1, y1, x2, y2] with x1 <= x2, y1 <= y2, got {box!r}")
    point = point if point is not None else [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
  if not num(point, 2):
    raise _bad(f"point: expected [x, y] (or a box), got {point!r}")
  coord = _to_999(point[0], point[1], space, w, h)
  meta = {"image_size": [w, h], "coord_space": space, "point": point, "coordinate": coord,
          "box": box,
          "box_999": None if box is None else _to_999(box[0], box[1], space, w, h)
          + _to_999(box[2], box[3], space, w, h)}
  d = {"id": record.get("id") or episode_id, "instruction": instruction.strip(),
       "tools": list(tool_names), "screen_size": [w, h],
       "source": record.get("source", "grounding" if source is None else source),
       "stage": record.get("stage", 1 if stage is None else stage), "meta": {"grounding": meta},
       "steps": [{"observation": {"screenshot": image, "text": None},
                  "think": record.get("think", ""),
                  "action": record.get("action") or _default_action(instruction, click),
                  "tool_call": {"name": tools.COMPUTER_USE,
                                "arguments": {"action": click, "coordinate": coord}}}]}
  return tr.episode_from_dict(d, root)


# ---------------------------------------------------------------------------------- files


def _read_records(path: str, convert, image_root: str | None, **kw) -> Iterator[tr.Episode | tr.SkippedItem]:
  root = image_root or os.path.dirname(os.path.abspath(path))
  stem = os.path.splitext(os.path.basename(path))[0]
  return tr.convert_jsonl(
      path, lambda record, lineno: convert(record, root, episode_id=f"{stem}-{lineno}", **kw))


def read_messages_file(path: str, image_root: str | None = None, *, source: str = "",
                       stage: int = 0) -> Iterator[tr.Episode | tr.SkippedItem]:
  """JSONL of chat records; images resolve against `image_root` (default: the file's folder)."""
  return _read_records(path, episode_from_messages, image_root, source=source, stage=stage)


def read_grounding_file(path: str, image_root: str | None = None, *, source: str | None = None,
                        stage: int | None = None) -> Iterator[tr.Episode | tr.SkippedItem]:
  """JSONL of grounding records; images resolve against `image_root` (default: the file's folder).

  source/stage: defaults for records without them (None: "grounding", stage 1).
  """
  return _read_records(path, grounding_episode, image_root, source=source, stage=stage)
