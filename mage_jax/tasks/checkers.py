"""Checkers: score in [0, 1] from the episode's final state (files, app state files, terminal output).

A checker spec is a JSON object with a `type`:
  all          {checks: [...]}                     mean of the sub-scores; a presence sub-check earns
                                                   only beside a passing content check (below)
  file_text    {path, equals | contains | regex}   text compared after stripping whitespace
  file_exists  {path}        file_absent {path}
  dir_listing  {path, equals: [names]}            exact set of entries
  json_equals  {path, expected, subset?: bool}     (subset: every expected key matches)
  json_point_in {path, key, box: [x0, y0, x1, y1]} a JSON [x, y] inside a box (inclusive)
  csv_equals   {path, rows}                        cells compared as stripped strings
  xlsx_cells   {path, cells: {"A1": value}, sheet?}  numbers compare with 1e-6 tolerance
  xlsx_merged  {path, range, sheet?}
  xlsx_chart   {path, min_charts?: 1, sheet?}
  pptx_titles  {path, titles: [..]}                slide titles in order
  pdf_pages    {path, pages}
  terminal_answer {text}                           the last bash command's whole output is text
  app_state    {path, expected}                    a built-in app's saved state is expected, and so
                                                   was every state it saved or chose before
  python       {file, function?: "check"}          package-relative module; f(ctx) -> float
Files are read from inside the sandbox (symlinks resolve there, never on the host).
Checkers never raise on agent-produced content: unreadable or malformed state scores 0.

No checker may be satisfiable by a policy that never reads the task (gates.no_blind_exploit runs a
registry of such policies): an answer is one command's output, not a match anywhere in a flood; a
choice among on-screen options counts only if nothing else was chosen; a bare file earns nothing.
"""
from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import json
import os
import re
from typing import Any, Callable, Protocol

from mage_jax.tasks import extensions

TYPES = ("all", "file_text", "file_exists", "file_absent", "dir_listing", "json_equals", "json_point_in", "csv_equals",
         "xlsx_cells", "xlsx_merged", "xlsx_chart", "pptx_titles", "pdf_pages", "terminal_answer",
         "app_state", "python")
RETIRED = {"terminal_contains": "it matched a flood anywhere in the shell history (`seq` 'computed' 37 * 43); "
                                "use terminal_answer (the last command's whole output)"}
# Sub-checks any policy can satisfy without reading the task: in `all` they earn only beside a passing
# content check (see _presence_path).
PRESENCE_TYPES = ("file_exists", "file_absent")
OUTPUT_TYPES = ("terminal_answer", "python")   # checkers that read the shell's output


# Checker types defined outside this file (documents, databases, real apps, web replicas): each
# module listed here calls `register` when imported. Add a module with one line.
EXTENSION_MODULES: tuple[str, ...] = ("mage_jax.tasks.doc_types", "mage_jax.tasks.data_types",
                                     "mage_jax.tasks.office_types", "mage_jax.tasks.web.task_types",
                                     "mage_jax.tasks.osworld.task_types")


@dataclasses.dataclass(frozen=True)
class Extension:
  score: Callable[["CheckContext", dict[str, Any]], float]   # (ctx, spec) -> [0, 1]; may raise on bad content
  validate: Callable[[dict[str, Any], str], None]            # (spec, where) -> raises ValueError naming `where`
  reads_output: bool = False                                 # reads the shell's output (not files)
  content_errors: tuple[str, ...] = ()                       # exception modules meaning "malformed agent file": 0


EXTENSIONS: dict[str, Extension] = {}


def register(type_name: str, ext: Extension) -> None:
  extensions.add(EXTENSIONS, "checker", type_name, ext, tuple(TYPES) + tuple(RETIRED))


def _load_extensions() -> None:
  extensions.load_once(EXTENSION_MODULES)


class CheckContext(Protocol):
  """read_file/list_dir return None only when the path is verifiably absent; a path that exists
  but can't be read raises an OSError (sandbox.Unreadable), which scores 0."""
  terminal_outputs: list[str]
  def read_file(self, path: str) -> bytes | None: ...
  def list_dir(self, path: str) -> list[str] | None: ...


def validate_spec(spec: dict[str, Any], where: str) -> None:
  _load_extensions()
  t = spec.get("type")
  if t in RETIRED:
    raise ValueError(f"{where}: checker type {t!r} was retired: {RETIRED[t]}")
  if t in EXTENSIONS:
    EXTENSIONS[t].validate(spec, where)
    return
  if t not in TYPES:
    raise ValueError(f"{where}: unknown checker type {t!r}; expected one of {TYPES + tuple(EXTENSIONS)}")
  if t == "all":
    if not isinstance(spec.get("checks"), list) or not spec["checks"]:
      raise ValueError(f"{where}: 'all' needs a non-empty 'checks' list")
    for i, sub in enumerate(spec["checks"]):
      validate_spec(sub, f"{where}.checks[{i}]")
  elif t == "terminal_answer":
    if not isinstance(spec.get("text"), str) or not spec["text"].strip():
      raise ValueError(f"{where}: terminal_answer needs a non-empty string 'text'")
  elif t == "app_state":
    if "path" not in spec or not isinstance(spec.get("expected"), dict):
      raise ValueError(f"{where}: app_state needs 'path' and an object 'expected'")
  elif t == "python":
    if "file" not in spec:
      raise ValueError(f"{where}: python checker needs 'file'")
  elif "path" not in spec:
    raise ValueError(f"{where}: checker {t!r} needs 'path'")


def _text(ctx: CheckContext, path: str) -> str | None:
  data = ctx.read_file(path)
  return None if data is None else data.decode("utf-8", errors="replace")


def _same(a: Any, b: Any) -> bool:
  if isinstance(b, (int, float)) and not isinstance(b, bool):
    try:
      return abs(float(a) - float(b)) < 1e-6
    except (TypeError, ValueError):
      return False
  return (str(a).strip() if a is not None else None) == (str(b).strip() if b is not None else None)


def _workbook(ctx: CheckContext, path: str):
  import openpyxl   # office-format library only for this document type (start-up cost)
  data = ctx.read_file(path)
  return None if data is None else openpyxl.load_workbook(io.BytesIO(data))


def _sheet(wb, spec):
  return wb[spec["sheet"]] if spec.get("sheet") else wb.worksheets[0]


def _score(ctx: CheckContext, spec: dict[str, Any], root: str | None) -> float:
  t = spec["type"]
  if t in EXTENSIONS:
    return float(min(1.0, max(0.0, EXTENSIONS[t].score(ctx, spec))))
  if t == "all":
    return _all(ctx, spec["checks"], root)
  if t == "terminal_answer":
    outs = ctx.terminal_outputs
    return float(bool(outs) and outs[-1].strip() == spec["text"].strip())
  if t == "app_state":
    return _app_state(_text(ctx, spec["path"]), spec["expected"])
  if t == "python":
    path = os.path.join(root or ".", spec["file"])
    mod_spec = importlib.util.spec_from_file_location("task_checker", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    fn: Callable[[CheckContext], float] = getattr(mod, spec.get("function", "check"))
    return min(1.0, max(0.0, float(fn(ctx))))
  path = spec["path"]
  if t == "file_exists":
    return float(ctx.read_file(path) is not None)
  if t == "file_absent":
    return float(ctx.read_file(path) is None)
  if t == "dir_listing":
    names = ctx.list_dir(path)
    return float(names is not None and sorted(names) == sorted(spec["equals"]))
  if t == "file_text":
    text = _text(ctx, path)
    if text is None:
      return 0.0
    if "equals" in spec:
      return float(text.strip() == spec["equals"].strip())
    if "contains" in spec:
      return float(spec["contains"] in text)
    return float(re.search(spec["regex"], text, re.MULTILINE) is not None)
  if t == "json_equals":
    text = _text(ctx, path)
    data = json.loads(text) if text is not None else None
    exp = spec["expected"]
    if spec.get("subset"):
      return float(isinstance(data, dict) and all(k in data and data[k] == v for k, v in exp.items()))
    return float(data == exp)
  if t == "json_point_in":
    text = _text(ctx, path)
    x, y = json.loads(text)[spec["key"]] if text is not None else (None, None)
    x0, y0, x1, y1 = spec["box"]
    return float(x is not None and x0 <= x <= x1 and y0 <= y <= y1)
  if t == "csv_equals":
    text = _text(ctx, path)
    if text is None:
      return 0.0
    rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    return float(rows == [[str(c).strip() for c in r] for r in spec["rows"]])
  if t == "xlsx_cells":
    wb = _workbook(ctx, path)
    if wb is None:
      return 0.0
    ws = _sheet(wb, spec)
    return float(all(_same(ws[ref].value, v) for ref, v in spec["cells"].items()))
  if t == "xlsx_merged":
    wb = _workbook(ctx, path)
    return float(wb is not None and spec["range"] in [str(r) for r in _sheet(wb, spec).merged_cells.ranges])
  if t == "xlsx_chart":
    wb = _workbook(ctx, path)
    return float(wb is not None and len(_sheet(wb, spec)._charts) >= spec.get("min_charts", 1))
  if t == "pptx_titles":
    from pptx import Presentation   # office-format library only for this document type (start-up cost)
    data = ctx.read_file(path)
    if data is None:
      return 0.0
    titles = [s.shapes.title.text if s.shapes.title is not None else None
              for s in Presentation(io.BytesIO(data)).slides]
    return float(titles == spec["titles"])
  if t == "pdf_pages":
    from pypdf import PdfReader   # PDF library only for this document type (start-up cost)
    data = ctx.read_file(path)
    return float(data is not None and len(PdfReader(io.BytesIO(data)).pages) == spec["pages"])
  raise ValueError(f"unknown checker type {t!r}")


def _presence_path(spec: dict[str, Any]) -> str | None:
  """The path of a sub-check that a blind policy satisfies (a file exists or is gone, a directory is
  empty); None for a content check."""
  if spec["type"] in PRESENCE_TYPES or (spec["type"] == "dir_listing" and not spec["equals"]):
    return os.path.normpath(spec["path"])
  return None


def _all(ctx: CheckContext, checks: list[dict[str, Any]], root: str | None) -> float:
  """Mean of the sub-scores, where a presence sub-check earns its share only if a content check on
  the same path passes, or (none on its path) every content check passes: presence is not progress."""
  scores = [score(ctx, s, root) for s in checks]
  content = {}  # path -> did every content check on it pass
  for s, v in zip(checks, scores):
    if _presence_path(s) is None and "path" in s:
      p = os.path.normpath(s["path"])
      content[p] = content.get(p, True) and v == 1.0
  all_content = [v for s, v in zip(checks, scores) if _presence_path(s) is None]
  earned = []
  for s, v in zip(checks, scores):
    p = _presence_path(s)
    if p is not None:
      v = v if content.get(p, bool(all_content) and min(all_content) == 1.0) else 0.0
    earned.append(v)
  return sum(earned) / len(earned)


def _app_state(text: str | None, expected: dict[str, Any]) -> float:
  """1 if the app's state (its JSON without 'events') equals `expected` and every state it recorded
  in 'events' (each save or choice, in order) did too: "click X" means X and nothing else."""
  data = json.loads(text) if text is not None else None
  if not isinstance(data, dict) or not isinstance(data.get("events"), list) or not data["events"]:
    return 0.0
  events = data.pop("events")
  return float(data == expected and all(isinstance(e, dict) and e.get("state") == expected for e in events))


def reads_output(spec: dict[str, Any]) -> bool:
  """Whether the checker reads the shell's output (python checkers may read anything)."""
  if spec["type"] == "all":
    return any(reads_output(s) for s in spec["checks"])
  if spec["type"] in EXTENSIONS:
    return EXTENSIONS[spec["type"]].reads_output
  return spec["type"] in OUTPUT_TYPES


def reads_files(spec: dict[str, Any]) -> bool:
  if spec["type"] == "all":
    return any(reads_files(s) for s in spec["checks"])
  if spec["type"] in EXTENSIONS:
    return not EXTENSIONS[spec["type"]].reads_output
  return spec["type"] != "terminal_answer"


def score(ctx: CheckContext, spec: dict[str, Any], root: str | None = None) -> float:
  """The checker's score; malformed agent output (bad JSON/xlsx/...) scores 0."""
  _load_extensions()
  try:
    return _score(ctx, spec, root)
  except (ValueError, KeyError, TypeError, OSError, json.JSONDecodeError, IndexError, AttributeError) as e:
    if isinstance(e, ValueError) and str(e).startswith("unknown checker type"):
      raise
    return 0.0
  except Exception as e:  # zipfile.BadZipFile, pypdf errors ... from agent-made files
    ext = EXTENSIONS.get(spec.get("type"))
    if type(e).__module__.startswith(("zipfile", "pypdf", "openpyxl", "pptx", "lxml", "sqlite3", "_csv")
                                     + (ext.content_errors if ext else ())):
      return 0.0
    raise
