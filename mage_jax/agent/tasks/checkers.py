"""Checkers: score in [0, 1] from the episode's final state (files, app state files, terminal output).

A checker spec is a JSON object with a `type`:
  all          {checks: [...]}                     mean of the sub-scores
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
  terminal_contains {text}                         any bash observation contains text
  python       {file, function?: "check"}          package-relative module; f(ctx) -> float
Files are read from inside the sandbox (symlinks resolve there, never on the host).
Checkers never raise on agent-produced content: unreadable or malformed state scores 0.
"""
from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import re
from typing import Any, Callable, Protocol

TYPES = ("all", "file_text", "file_exists", "file_absent", "dir_listing", "json_equals", "json_point_in", "csv_equals",
         "xlsx_cells", "xlsx_merged", "xlsx_chart", "pptx_titles", "pdf_pages", "terminal_contains",
         "python")


class CheckContext(Protocol):
  """read_file/list_dir return None only when the path is verifiably absent; a path that exists
  but can't be read raises an OSError (sandbox.Unreadable), which scores 0."""
  terminal_outputs: list[str]
  def read_file(self, path: str) -> bytes | None: ...
  def list_dir(self, path: str) -> list[str] | None: ...


def validate_spec(spec: dict[str, Any], where: str) -> None:
  t = spec.get("type")
  if t not in TYPES:
    raise ValueError(f"{where}: unknown checker type {t!r}; expected one of {TYPES}")
  if t == "all":
    if not isinstance(spec.get("checks"), list) or not spec["checks"]:
      raise ValueError(f"{where}: 'all' needs a non-empty 'checks' list")
    for i, sub in enumerate(spec["checks"]):
      validate_spec(sub, f"{where}.checks[{i}]")
  elif t == "terminal_contains":
    if "text" not in spec:
      raise ValueError(f"{where}: terminal_contains needs 'text'")
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
  import openpyxl
  data = ctx.read_file(path)
  return None if data is None else openpyxl.load_workbook(io.BytesIO(data))


def _sheet(wb, spec):
  return wb[spec["sheet"]] if spec.get("sheet") else wb.worksheets[0]


def _score(ctx: CheckContext, spec: dict[str, Any], root: str | None) -> float:
  t = spec["type"]
  if t == "all":
    scores = [score(ctx, s, root) for s in spec["checks"]]
    return sum(scores) / len(scores)
  if t == "terminal_contains":
    return float(any(spec["text"] in out for out in ctx.terminal_outputs))
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
    from pptx import Presentation
    data = ctx.read_file(path)
    if data is None:
      return 0.0
    titles = [s.shapes.title.text if s.shapes.title is not None else None
              for s in Presentation(io.BytesIO(data)).slides]
    return float(titles == spec["titles"])
  if t == "pdf_pages":
    from pypdf import PdfReader
    data = ctx.read_file(path)
    return float(data is not None and len(PdfReader(io.BytesIO(data)).pages) == spec["pages"])
  raise ValueError(f"unknown checker type {t!r}")


def score(ctx: CheckContext, spec: dict[str, Any], root: str | None = None) -> float:
  """The checker's score; malformed agent output (bad JSON/xlsx/...) scores 0."""
  try:
    return _score(ctx, spec, root)
  except (ValueError, KeyError, TypeError, OSError, json.JSONDecodeError, IndexError, AttributeError) as e:
    if isinstance(e, ValueError) and str(e).startswith("unknown checker type"):
      raise
    return 0.0
  except Exception as e:  # zipfile.BadZipFile, pypdf errors ... from agent-made files
    if type(e).__module__.startswith(("zipfile", "pypdf", "openpyxl", "pptx", "lxml")):
      return 0.0
    raise
