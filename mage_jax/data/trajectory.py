"""The native trajectory format: JSONL, one episode per line (docs/data.md).

An episode is a task instruction plus steps t = 1..T. Step t holds the
observation o_t the agent saw *before* acting (a screenshot path relative to
the JSONL file and/or terminal text) and the response a_t it produced after
o_t: `think`, the one-line `Action:` summary and exactly one tool call. So the
observation that results from a_t is o_{t+1}, stored on the next step.

`read_episodes` never raises on bad data: every line that cannot become a
valid Episode (bytes that are not UTF-8, malformed or over-deep JSON, NaN, a
bad field, a repeated episode id) is yielded as a `SkippedItem` naming
file:line, a reason kind (for counting) and a human-readable reason, and the
lines after it are still read.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import re
from typing import Any, Callable, Iterable, Iterator

from PIL import Image

from mage_jax.actions import schema as tools

# Reason kinds (counted in reports/manifests).
MALFORMED_JSON = "malformed_json"
INVALID_FIELD = "invalid_field"
EMPTY_EPISODE = "empty_episode"
UNKNOWN_TOOL = "unknown_tool"
INVALID_ARGUMENTS = "invalid_arguments"
MISSING_IMAGE = "missing_image"
UNREADABLE_IMAGE = "unreadable_image"
INVALID_UTF8 = "invalid_utf8"
TOO_DEEP = "too_deep"
DUPLICATE_ID = "duplicate_id"

# Deeper records are skipped: no episode or chat record needs more than ~10 levels, and
# unbounded depth is what exhausts the recursion limit (in json, then in anything that walks it).
MAX_JSON_DEPTH = 64
_BOM = "\ufeff"
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # how errors="surrogateescape" reads a non-UTF-8 byte

# How eagerly `read_episodes` checks screenshots.
IMAGE_CHECKS = ("verify", "exists", "none")

_SCHEMA_BY_NAME = {s["function"]["name"]: s for s in tools.TOOL_SCHEMAS}


class EpisodeError(ValueError):
  """An episode that cannot be used; `kind` is one of the reason kinds above."""

  def __init__(self, kind: str, reason: str):
    super().__init__(f"{kind}: {reason}")
    self.kind = kind
    self.reason = reason


@dataclasses.dataclass
class Observation:
  screenshot: str | None = None  # path, relative to the episode's root (the JSONL's folder)
  text: str | None = None        # terminal / tool output text

  def is_empty(self) -> bool:
    return self.screenshot is None and not self.text


@dataclasses.dataclass
class ToolCall:
  name: str
  arguments: dict[str, Any]


@dataclasses.dataclass
class Step:
  observation: Observation  # o_t: seen before a_t
  think: str                # <think> body of a_t
  action: str               # the `Action:` one-line summary of a_t (without the "Action: " prefix)
  tool_call: ToolCall       # the single tool call of a_t


@dataclasses.dataclass
class Episode:
  id: str
  instruction: str
  steps: list[Step]
  # Tool schemas offered in the system turn: OpenAI function schemas. Written to
  # JSONL as bare names when they equal the canonical schemas in agent/tools.py.
  tools: list[dict[str, Any]] = dataclasses.field(
      default_factory=lambda: [dict(s) for s in tools.TOOL_SCHEMAS])
  screen_size: tuple[int, int] | None = None  # [W, H] of the screen, pixels
  source: str = ""
  stage: int = 0
  outcome: str | None = None  # "success" | "failure" | None (unknown)
  reward: float | None = None
  meta: dict[str, Any] = dataclasses.field(default_factory=dict)
  root: str = ""  # folder that relative screenshot paths resolve against (not serialized)

  @property
  def tool_names(self) -> list[str]:
    return [t["function"]["name"] for t in self.tools]

  def image_path(self, rel: str) -> str:
    return rel if os.path.isabs(rel) else os.path.join(self.root, rel)


@dataclasses.dataclass
class SkippedItem:
  path: str
  line: int  # 1-based line in `path`
  kind: str
  reason: str
  episode_id: str | None = None

  def __str__(self) -> str:
    ep = f" (episode {self.episode_id})" if self.episode_id else ""
    return f"{self.path}:{self.line}{ep}: {self.kind}: {self.reason}"


@dataclasses.dataclass
class ReadReport:
  """Counts for one pass over trajectory files; merged into pack manifests.

  `first_seen` maps each accepted episode id to its "file:line"; reports that share one
  dict reject an id repeated anywhere across them (a pack shares it over all sources).
  """
  episodes: int = 0
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  skipped_items: list[SkippedItem] = dataclasses.field(default_factory=list)
  first_seen: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)

  def add(self, item: "Episode | SkippedItem") -> None:
    if isinstance(item, SkippedItem):
      self.skipped[item.kind] += 1
      self.skipped_items.append(item)
    else:
      self.episodes += 1

  def to_dict(self) -> dict[str, Any]:
    return {"episodes": self.episodes, "skipped": dict(self.skipped),
            "skipped_items": [str(s) for s in self.skipped_items]}


# ---------------------------------------------------------------------------- parsing


def _require(d: dict, key: str, types: type | tuple, where: str) -> Any:
  if key not in d:
    raise EpisodeError(INVALID_FIELD, f"missing field {where}{key!r}")
  value = d[key]
  if not isinstance(value, types):
    raise EpisodeError(INVALID_FIELD, f"{where}{key}: expected {_type_names(types)}, "
                                      f"got {type(value).__name__}")
  return value


def _type_names(types: type | tuple) -> str:
  types = types if isinstance(types, tuple) else (types,)
  return " or ".join(t.__name__ for t in types)


def resolve_tools(spec: Any) -> list[dict[str, Any]]:
  """`tools` field -> schemas. Names resolve to agent/tools.py; full schemas must name a known tool."""
  if spec is None:
    return [dict(s) for s in tools.TOOL_SCHEMAS]
  if not isinstance(spec, list) or not spec:
    raise EpisodeError(INVALID_FIELD, "tools: expected a non-empty list of names or schemas")
  out = []
  for i, t in enumerate(spec):
    if isinstance(t, str):
      name = t
    elif isinstance(t, dict):
      fn = t.get("function", t)
      name = fn.get("name") if isinstance(fn, dict) else None
      if not isinstance(name, str):
        raise EpisodeError(INVALID_FIELD, f"tools[{i}]: schema has no function name")
    else:
      raise EpisodeError(INVALID_FIELD, f"tools[{i}]: expected a name or a schema object")
    if name not in _SCHEMA_BY_NAME:
      raise EpisodeError(UNKNOWN_TOOL, f"tools[{i}]: unknown tool {name!r}; "
                                       f"expected one of {list(tools.TOOL_NAMES)}")
    if isinstance(t, dict):
      out.append(t if "function" in t else {"type": "function", "function": t})
    else:
      out.append(dict(_SCHEMA_BY_NAME[name]))
  return out


def check_call(name: Any, arguments: Any, allowed: list[str], where: str) -> ToolCall:
  """Validates one tool call against the episode's tools and agent/tools.validate_call."""
  if not isinstance(name, str) or name not in allowed:
    raise EpisodeError(UNKNOWN_TOOL, f"{where}.name: unknown tool {name!r}; "
                                     f"the episode offers {allowed}")
  why = tools.validate_call(name, arguments)
  if why is not None:
    raise EpisodeError(INVALID_ARGUMENTS, f"{where}.arguments: {why}")
  return ToolCall(name, arguments)


def episode_from_dict(d: Any, root: str = "") -> Episode:
  """One JSON object -> Episode; raises EpisodeError naming the field."""
  if not isinstance(d, dict):
    raise EpisodeError(INVALID_FIELD, f"expected a JSON object, got {type(d).__name__}")
  ep_id = d.get("id")
  if not isinstance(ep_id, (str, int)) or isinstance(ep_id, bool) or str(ep_id) == "":
    raise EpisodeError(INVALID_FIELD, "id: expected a non-empty string")
  instruction = _require(d, "instruction", str, "")
  if not instruction.strip():
    raise EpisodeError(INVALID_FIELD, "instruction: empty")
  raw_steps = _require(d, "steps", list, "")
  if not raw_steps:
    raise EpisodeError(EMPTY_EPISODE, "steps: the episode has no steps")
  schemas = resolve_tools(d.get("tools"))
  allowed = [s["function"]["name"] for s in schemas]
  screen = d.get("screen_size")
  if screen is not None:
    if (not isinstance(screen, list) or len(screen) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in screen)):
      raise EpisodeError(INVALID_FIELD, f"screen_size: expected [W, H] positive ints, got {screen!r}")
    screen = (screen[0], screen[1])
  outcome = d.get("outcome")
  if outcome not in (None, "success", "failure"):
    raise EpisodeError(INVALID_FIELD, f"outcome: expected 'success', 'failure' or null, got {outcome!r}")
  reward = d.get("reward")
  if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)
                             or not math.isfinite(reward)):
    raise EpisodeError(INVALID_FIELD, f"reward: expected a finite number or null, got {reward!r}")
  stage = d.get("stage", 0)
  if not isinstance(stage, int) or isinstance(stage, bool):
    raise EpisodeError(INVALID_FIELD, f"stage: expected an int, got {stage!r}")
  source = d.get("source", "")
  if not isinstance(source, str):
    raise EpisodeError(INVALID_FIELD, f"source: expected a string, got {source!r}")
  meta = d.get("meta", {})
  if not isinstance(meta, dict):
    raise EpisodeError(INVALID_FIELD, "meta: expected an object")
  steps = [_step_from_dict(s, i, allowed) for i, s in enumerate(raw_steps)]
  return Episode(id=str(ep_id), instruction=instruction, steps=steps, tools=schemas,
                 screen_size=screen, source=source, stage=stage, outcome=outcome,
                 reward=None if reward is None else float(reward), meta=meta, root=root)


def _step_from_dict(s: Any, i: int, allowed: list[str]) -> Step:
  where = f"steps[{i}]"
  if not isinstance(s, dict):
    raise EpisodeError(INVALID_FIELD, f"{where}: expected an object")
  obs = s.get("observation") or {}
  if not isinstance(obs, dict):
    raise EpisodeError(INVALID_FIELD, f"{where}.observation: expected an object")
  shot, text = obs.get("screenshot"), obs.get("text")
  if shot is not None and (not isinstance(shot, str) or not shot):
    raise EpisodeError(INVALID_FIELD, f"{where}.observation.screenshot: expected a path string")
  if text is not None and not isinstance(text, str):
    raise EpisodeError(INVALID_FIELD, f"{where}.observation.text: expected a string")
  think = s.get("think", "")
  if not isinstance(think, str):
    raise EpisodeError(INVALID_FIELD, f"{where}.think: expected a string")
  action = s.get("action")
  if not isinstance(action, str) or not action.strip() or "\n" in action.strip():
    raise EpisodeError(INVALID_FIELD, f"{where}.action: expected a non-empty one-line summary")
  action = action.strip()
  if action.startswith("Action:"):  # tolerate the prefix; we store the bare summary
    action = action[len("Action:"):].strip()
  call = s.get("tool_call")
  if not isinstance(call, dict):
    raise EpisodeError(INVALID_FIELD, f"{where}.tool_call: expected {{name, arguments}}")
  tool_call = check_call(call.get("name"), call.get("arguments"), allowed, f"{where}.tool_call")
  return Step(Observation(shot, text), think, action, tool_call)


def check_images(ep: Episode, mode: str = "verify") -> None:
  """Raises EpisodeError if a screenshot is missing ("exists"/"verify") or undecodable ("verify")."""
  if mode not in IMAGE_CHECKS:
    raise ValueError(f"image check {mode!r}: expected one of {IMAGE_CHECKS}")
  if mode == "none":
    return
  for i, step in enumerate(ep.steps):
    rel = step.observation.screenshot
    if rel is None:
      continue
    path = ep.image_path(rel)
    if not os.path.isfile(path):
      raise EpisodeError(MISSING_IMAGE, f"steps[{i}].observation.screenshot: no file {path}")
    if mode == "verify":
      try:
        with Image.open(path) as im:
          im.verify()  # checks structure/CRCs without a full decode
      except Exception as e:  # noqa: BLE001 - Pillow raises many types for bad files
        raise EpisodeError(UNREADABLE_IMAGE,
                           f"steps[{i}].observation.screenshot: cannot read {path}: {e}") from None


def episode_to_dict(ep: Episode, root: str | None = None) -> dict[str, Any]:
  """Episode -> JSON object; screenshot paths are rewritten relative to `root` if given."""

  def rel(p: str | None) -> str | None:
    if p is None or root is None:
      return p
    return os.path.relpath(os.path.abspath(ep.image_path(p)), os.path.abspath(root))

  tools_out = [t["function"]["name"] if t == _SCHEMA_BY_NAME.get(t["function"]["name"]) else t
               for t in ep.tools]
  d: dict[str, Any] = {
      "id": ep.id, "instruction": ep.instruction, "tools": tools_out,
      "screen_size": list(ep.screen_size) if ep.screen_size else None,
      "source": ep.source, "stage": ep.stage, "outcome": ep.outcome, "reward": ep.reward,
      "steps": [{
          "observation": {"screenshot": rel(s.observation.screenshot), "text": s.observation.text},
          "think": s.think, "action": s.action,
          "tool_call": {"name": s.tool_call.name, "arguments": s.tool_call.arguments},
      } for s in ep.steps],
  }
  if ep.meta:
    d["meta"] = ep.meta
  return d


# ---------------------------------------------------------------------------- files


def _field_name(path: tuple) -> str:
  out = ""
  for k in path:
    out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
  return out or "(the record)"


def _unencodable(text: str) -> int | None:
  """Index of a lone surrogate (from a JSON escape such as "\\ud800"), which UTF-8 cannot hold."""
  if text.isascii():
    return None
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    return e.start
  return None


def json_problem(value: Any) -> tuple[str, str] | None:
  """(kind, reason naming the field) for what parsed JSON may hold but an episode must not:
  nesting deeper than MAX_JSON_DEPTH, NaN/Infinity, strings that are not valid Unicode."""
  stack = [(value, ())]
  while stack:
    v, path = stack.pop()
    if isinstance(v, float) and not math.isfinite(v):
      return INVALID_FIELD, f"{_field_name(path)}: {v} is not a finite number"
    if isinstance(v, str):
      at = _unencodable(v)
      if at is not None:
        return INVALID_FIELD, (f"{_field_name(path)}: lone surrogate {v[at]!r} at index {at} "
                               "is not valid Unicode")
    elif isinstance(v, (dict, list)):
      if len(path) >= MAX_JSON_DEPTH:
        return TOO_DEEP, f"{_field_name(path[:3])}...: nested deeper than {MAX_JSON_DEPTH} levels"
      for k, x in (v.items() if isinstance(v, dict) else enumerate(v)):
        if isinstance(k, str) and _unencodable(k) is not None:
          return INVALID_FIELD, f"{_field_name(path)}: a key holds a lone surrogate (not valid Unicode)"
        stack.append((x, path + (k,)))
  return None


def _printable_id(record: Any) -> str | None:
  """The record's id for a skip message, escaped if UTF-8 cannot hold it (reports are UTF-8)."""
  ep_id = record.get("id") if isinstance(record, dict) else None
  if not isinstance(ep_id, (str, int)) or isinstance(ep_id, bool):
    return None
  ep_id = str(ep_id)
  return ep_id if _unencodable(ep_id) is None else ascii(ep_id)


def _parse_line(line: str) -> tuple[Any, tuple[str, str] | None]:
  """(record, None) or (None, (kind, reason)) for one line read with surrogateescape."""
  bad = _ESCAPED_BYTE.search(line)
  if bad:
    byte = ord(bad.group()) - 0xDC00
    return None, (INVALID_UTF8, f"byte 0x{byte:02x} at column {bad.start() + 1} is not valid UTF-8")
  try:
    d = json.loads(line)
  except json.JSONDecodeError as e:
    return None, (MALFORMED_JSON, f"{e.msg} at column {e.colno}")
  except RecursionError:
    return None, (TOO_DEEP, "JSON nested too deeply to parse")
  except ValueError as e:  # e.g. an integer literal past sys.get_int_max_str_digits()
    return None, (MALFORMED_JSON, str(e).split(";")[0])
  return d, None


def convert_jsonl(path: str, convert: Callable[[Any, int], Episode], image_check: str = "verify",
                  first_seen: dict[str, str] | None = None) -> Iterator[Episode | SkippedItem]:
  """Yields each non-blank line of a JSONL file converted by `convert(record, lineno)`,
  or a SkippedItem (file:line, kind, reason) for a line that is not UTF-8, malformed or
  over-deep JSON, an EpisodeError, or an episode id already in `first_seen` (id ->
  "file:line"; default: a fresh dict, so ids are unique within the file). A UTF-8 byte
  order mark at the start of a line is dropped."""

  def parsed() -> Iterator[tuple[int, Any, tuple[str, str] | None]]:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
      for lineno, line in enumerate(f, start=1):
        line = line.removeprefix(_BOM)
        if line.strip():
          yield (lineno, *_parse_line(line))

  return convert_parsed(path, parsed(), convert, image_check, first_seen)


def convert_parsed(path: str, records: Iterable[tuple[int, Any, tuple[str, str] | None]],
                   convert: Callable[[Any, int], Episode], image_check: str = "verify",
                   first_seen: dict[str, str] | None = None) -> Iterator[Episode | SkippedItem]:
  """`convert_jsonl` over already parsed (number, record, problem or None) triples: the
  number is the line of a JSONL file or the 1-based index of a JSON array's element."""
  first_seen = {} if first_seen is None else first_seen
  for lineno, d, problem in records:
    if problem is None:
      problem = json_problem(d)
    ep_id = _printable_id(d)
    if problem is not None:
      yield SkippedItem(path, lineno, *problem, ep_id)
      continue
    try:
      ep = convert(d, lineno)
      check_images(ep, image_check)
    except EpisodeError as e:
      yield SkippedItem(path, lineno, e.kind, e.reason, ep_id)
      continue
    if ep.id in first_seen:
      yield SkippedItem(path, lineno, DUPLICATE_ID,
                        f"id: {ep.id!r} is already used by {first_seen[ep.id]}", ep.id)
      continue
    first_seen[ep.id] = f"{path}:{lineno}"
    yield ep


def read_episodes(path: str, image_check: str = "verify",
                  first_seen: dict[str, str] | None = None) -> Iterator[Episode | SkippedItem]:
  """Yields each line of a JSONL file as an Episode or a SkippedItem (file:line, kind, reason).

  Blank lines are ignored. Screenshots are checked eagerly per `image_check`:
  "verify" (exists and Pillow can parse it; the default), "exists", or "none"
  (the renderer still skips a sample whose image fails to load, with a reason).
  An id already in `first_seen` (default: earlier in this file) is a `duplicate_id` skip.
  """
  root = os.path.dirname(os.path.abspath(path))
  return convert_jsonl(path, lambda d, _: episode_from_dict(d, root), image_check, first_seen)


def read_all(paths: Iterable[str], image_check: str = "verify",
             report: ReadReport | None = None) -> Iterator[Episode]:
  """Episodes from several files; skipped items go into `report` (if given). An episode id
  is accepted once across all the files (and across reports sharing `first_seen`)."""
  first_seen = report.first_seen if report is not None else {}
  for p in paths:
    for item in read_episodes(p, image_check, first_seen):
      if report is not None:
        report.add(item)
      if isinstance(item, Episode):
        yield item


def write_episodes(path: str, episodes: Iterable[Episode]) -> int:
  """Writes episodes as JSONL; screenshot paths become relative to the file's folder."""
  root = os.path.dirname(os.path.abspath(path))
  os.makedirs(root, exist_ok=True)
  n = 0
  with open(path, "w", encoding="utf-8") as f:
    for ep in episodes:
      f.write(json.dumps(episode_to_dict(ep, root), ensure_ascii=False) + "\n")
      n += 1
  return n
