"""OSWorld's compare_table (spreadsheets), re-implemented for its common rules (our code).

Without rules: every sheet's cell values equal, sheet by sheet. options.rules, each must hold:
  sheet_data  {sheet_idx0, sheet_idx1, precision?: 4}: the two sheets' cell values equal, numbers
              rounded to `precision` decimals. A sheet index is an int (the result's sheet at that
              position), "RI<n>"/"EI<n>" (the result's/expected file's n-th sheet) or "RN<name>"/"EN<name>"
              (by name); a missing sheet fails the rule.
  sheet_name  the two workbooks' sheet names equal, in order.
  chart       {sheet_idx0, sheet_idx1, chart_props}: the two sheets' charts, keyed by their series'
              data references ("values,categories;..."), with the listed properties equal: type (the
              chart's XML tag, e.g. barChart), title, legend (position), xtitle, ytitle, ztitle,
              direction (bar/col), width, height, anchor.
  pivot_table {sheet_idx0, sheet_idx1, pivot_props}: the two sheets' pivot tables, keyed by their
              source range (shifted past empty leading/trailing pivot fields, as OSWorld does), with
              the listed properties equal: name, show_total/show_empty_row/show_empty_col/show_headers,
              location, selection/filter (the items chosen per field; `ordered` keeps their order),
              filter (page field indices), row_fields, col_fields, data_fields ("field;name;subtotal;
              show data as", the name only with data_fields_name).
  sheet_fuzzy {sheet_idx0, sheet_idx1, rules: [{range: [A1:B6, ...], type, ...}]}: for every cell of the
              ranges, the two sheets' values as text, after `normalization` [[old, new]...] replacements,
              trim_leadings/trim_trailings characters, ignore_chars and ignore_case, compare by type:
              exact_match, includes (the expected's in the result's), included_by, fuzzy_match (ratio x 100
              >= threshold, default 85).
  freeze      {sheet_idx0, sheet_idx1}: the two sheets' frozen panes equal.
  zoom        {sheet_idx, method, ref}: the sheet's zoom (100 when unset) matches the rule.
  check_cell  {sheet_idx, coordinate, props: {value or a style property: {method, ref}}}: each matches. A
              rule {method, ref}: eq/ne/lt/le/gt/ge compare, approx:T is |value - ref| <= T (non-numbers
              fail), re[.FLAG...] a regex search, spreadsheet_range [inner, outer] (cell ranges that
              cover inner and lie within outer), str_set_eq/str_list_eq (a comma-separated string as a
              set/list), range.XY [lo, hi] (X, Y: e inclusive, t strict). Style properties: table_styles.py.
  style       {sheet_idx0, sheet_idx1, props}: every cell's listed style properties equal, and the
              conditional formats (table_styles.py says how they stand in for OSWorld's evaluation).
  row_props   {sheet_idx0, sheet_idx1, props}: the rows with their own settings, their listed
              properties (hidden, height, ...) equal.
  data_validation {sheet_idx, dv_props: [{attribute: rule}]}: at least len(dv_props) validations,
              each matching one of dv_props (attributes: ranges, type, formula1, operator, ...).
  sheet_print {sheet_idx0, sheet_idx1, ignore_case?}: the sheets as LibreOffice prints them: the CSV
              exports a task's postconfig writes beside the workbook (`<book>-<sheet>.csv`), compared
              line by line (stripped, trailing blank lines dropped). With OSWorld's `multi` getters the
              result/expected is [workbook, csv...]; the importer names each CSV's sheet in the options
              (`result_csv_sheets`, `expected_csv_sheets`).
Other rule types (col_props, filter: SUPPORTED_RULES lists what is here) are refused by the importer
with the rule named.
"""
from __future__ import annotations

import functools
import io
import operator
import os
import re
from typing import Any

import openpyxl
from openpyxl.utils import get_column_letter
from openpyxl.utils.cell import coordinate_to_tuple
from openpyxl.worksheet.cell_range import MultiCellRange

from mage_jax.tasks.osworld import table_styles
from mage_jax.tasks.osworld.document_metrics import fuzzy_ratio

SUPPORTED_RULES = ("sheet_data", "sheet_name", "chart", "pivot_table", "freeze", "zoom", "check_cell", "sheet_fuzzy",
                   "sheet_print", "style", "row_props", "data_validation")
CELL_PROPS = ("value",) + table_styles.STYLE_PROPS


def match_rule(value: Any, rule: dict) -> bool:
  """OSWorld's value rule {method, ref} (see the module doc)."""
  method = rule["method"]
  if method.startswith("re"):
    flags = functools.reduce(operator.or_, (getattr(re, f) for f in method.split(".")[1:]), re.RegexFlag(0))
    return isinstance(value, str) and re.search(rule["ref"], value, flags) is not None
  if method in ("eq", "ne", "lt", "le", "gt", "ge"):
    try:
      return bool(getattr(operator, method)(value, rule["ref"]))
    except TypeError:   # e.g. None < 3: the agent's cell is not comparable
      return False
  if method.startswith("approx:"):
    try:
      return abs(float(value) - float(rule["ref"])) <= float(method.split(":", 1)[1])
    except (TypeError, ValueError):
      return False
  if method == "spreadsheet_range":   # ref [inner, outer]: the ranges cover inner and lie within outer
    from openpyxl.worksheet.cell_range import MultiCellRange   # office-format library only for this document type (start-up cost)
    if not isinstance(value, MultiCellRange):
      value = MultiCellRange(str(value))
    inner, outer = MultiCellRange(rule["ref"][0]), MultiCellRange(rule["ref"][1])
    return all(r in value for r in inner) and all(r in outer for r in value)
  if method in ("str_list_eq", "str_set_eq"):   # a comma-separated string (quotes stripped) as a list/set
    kind = list if method == "str_list_eq" else set
    return isinstance(value, str) and kind(value.strip("\"'").split(",")) == kind(rule["ref"])
  if method.startswith("range."):   # range.XY [lo, hi]: X/Y are e (inclusive) or t (strict)
    lo, hi = rule["ref"]
    try:
      return getattr(operator, "l" + method[6])(lo, value) and getattr(operator, "l" + method[7])(value, hi)
    except TypeError:
      return False
  raise ValueError(f"unsupported value rule method {method!r}")


def _book(data: bytes, data_only: bool = True):
  return openpyxl.load_workbook(io.BytesIO(data), data_only=data_only)


def _title(t) -> str | None:
  try:
    return t.tx.rich.p[0].r[0].t
  except (AttributeError, IndexError, TypeError):
    return None


def _ref(x) -> str:
  for kind in ("numRef", "strRef"):
    f = getattr(getattr(x, kind, None), "f", None)
    if f is not None:
      return f
  return ""


def charts(ws, props: list[str]) -> dict[str, dict[str, Any]] | None:
  """{series references: {property: value}} for the charts of `ws` (None: no such sheet)."""
  if ws is None:
    return None
  out = {}
  for ch in ws._charts:
    getters = {"type": lambda: ch.tagname, "title": lambda: _title(ch.title),
               "legend": lambda: ch.legend.position if ch.legend is not None else None,
               "xtitle": lambda: _title(getattr(ch.x_axis, "title", None)),
               "ytitle": lambda: _title(getattr(ch.y_axis, "title", None)),
               "ztitle": lambda: _title(getattr(getattr(ch, "z_axis", None), "title", None)),
               "direction": lambda: getattr(ch, "barDir", None), "width": lambda: ch.width, "height": lambda: ch.height,
               "anchor": lambda: [ch.anchor.editAs, ch.anchor._from.col, ch.anchor.to.row, ch.anchor.to.col, ch.anchor.to.row]}
    key = ";".join(f"{_ref(s.val)},{_ref(s.cat)}" for s in ch.series)
    out[key] = {p: getters[p]() for p in props if p in getters}
  return out


def _trim(rows: list[list]) -> tuple[list[list], int, int]:
  """The selection lists without empty leading/trailing fields, and how many were cut each side."""
  lo = next((i for i, r in enumerate(rows) if r), len(rows))
  hi = next((i for i, r in enumerate(reversed(rows)) if r), len(rows))
  return rows[lo:len(rows) - hi] if lo < len(rows) else [], lo, hi if lo < len(rows) else 0


def pivots(ws, props: list[str]) -> dict[str, dict[str, Any]] | None:
  """{source range: {property: value}} for the pivot tables of `ws` (None: no such sheet)."""
  if ws is None:
    return None
  out = {}
  for pvt in ws._pivots:
    raw = [[(i.h, i.x) for i in (f.items or []) if i.x is not None] for f in pvt.pivotFields]
    selection, left, right = _trim(raw)
    src = pvt.cache.cacheSource
    a, b = (coordinate_to_tuple(c) for c in src.worksheetSource.ref.split(":"))
    key = f"{src.type};{(a[0], a[1] + left)}:{(b[0], b[1] - right)};{src.worksheetSource.sheet}"
    info: dict[str, Any] = {}
    for p, attr in (("name", "name"), ("show_total", "visualTotals"), ("show_empty_row", "showEmptyRow"),
                    ("show_empty_col", "showEmptyCol"), ("show_headers", "showHeaders"), ("location", "location")):
      if p in props:
        info[p] = getattr(pvt, attr)
    if "filter" in props or "selection" in props:
      info["selection"] = selection if "ordered" in props else [set(r) for r in selection]
    if "filter" in props:
      info["filter_fields"] = {f.fld for f in pvt.pageFields}
    if "col_fields" in props:
      info["col_fields"] = [f.x - left for f in pvt.colFields]
    if "row_fields" in props:
      info["row_fields"] = [f.x - left for f in pvt.rowFields]
    if "data_fields" in props:
      info["data_fields"] = [f"{f.fld - left};{f.name if 'data_fields_name' in props else ''};{f.subtotal};{f.showDataAs}"
                             for f in pvt.dataFields]
    out[key] = info
  return out


def _values(ws, precision: int | None) -> list[list[Any]]:
  def cell(v):
    return round(v, precision) if precision is not None and isinstance(v, float) else v
  rows = [[cell(v) for v in r] for r in ws.iter_rows(values_only=True)]
  while rows and all(v is None for v in rows[-1]):   # trailing empty rows are not data
    rows.pop()
  return rows


def _sheet(idx: Any, result, expected):
  if isinstance(idx, int):
    book, key = result, idx
  elif idx[:2] in ("RI", "EI"):
    book, key = (result if idx[0] == "R" else expected), int(idx[2:])
  elif idx[:2] in ("RN", "EN"):
    book, key = (result if idx[0] == "R" else expected), idx[2:]
  else:
    raise ValueError(f"compare_table: unrecognised sheet index {idx!r}")
  if isinstance(key, int):
    return book.worksheets[key] if 0 <= key < len(book.worksheets) else None
  return book[key] if key in book.sheetnames else None


def _cell_text(ws, coordinate: str) -> str:
  v = ws[coordinate].value
  return "" if v is None else str(v)


def _fuzzy_cells(ws1, ws2, rule: dict) -> bool:
  ranges = rule["range"] if isinstance(rule["range"], list) else [rule["range"]]
  for rng in MultiCellRange(" ".join(ranges)).ranges:
    for row, col in rng.cells:
      coordinate = f"{get_column_letter(col)}{row}"
      a, b = _cell_text(ws1, coordinate), _cell_text(ws2, coordinate)
      for old, new in rule.get("normalization", []):
        a, b = a.replace(old, new), b.replace(old, new)
      if "trim_leadings" in rule:
        a, b = a.lstrip(rule["trim_leadings"]), b.lstrip(rule["trim_leadings"])
      if "trim_trailings" in rule:
        a, b = a.rstrip(rule["trim_trailings"]), b.rstrip(rule["trim_trailings"])
      if "ignore_chars" in rule:
        a, b = ("".join(ch for ch in x if ch not in rule["ignore_chars"]) for x in (a, b))
      if rule.get("ignore_case"):
        a, b = a.lower(), b.lower()
      kind = rule["type"]
      ok = (a == b if kind == "exact_match" else b in a if kind == "includes" else a in b if kind == "included_by"
            else 100 * fuzzy_ratio(a, b) >= rule.get("threshold", 85.0) if kind == "fuzzy_match" else None)
      if ok is None:
        raise ValueError(f"sheet_fuzzy: unknown comparison {kind!r}")
      if not ok:
        return False
  return True


def csv_sheet(book_name: str, csv_name: str) -> str | None:
  """The sheet a `<book stem>-<sheet>.csv` export holds, else None."""
  stem, name = os.path.splitext(os.path.basename(book_name))[0], os.path.basename(csv_name)
  return name[len(stem) + 1:-len(".csv")] if name.startswith(stem + "-") and name.endswith(".csv") else None


def _printed(data: bytes | None) -> list[str] | None:
  if data is None:
    return None
  lines = [line.strip() for line in data.decode("utf-8", errors="replace").splitlines()]
  while lines and not lines[-1]:
    lines.pop()
  return lines


def _split(x: Any, sheets: list[str]) -> tuple[bytes | None, dict[str, bytes | None]]:
  """(workbook, {sheet: csv export}) from a multi getter's list, or (x, {})."""
  if isinstance(x, list):
    return (x[0] if x else None), dict(zip(sheets, x[1:]))
  return x, {}


def compare_table(result: Any, expected: Any, rules: list[dict] | None = None, result_csv_sheets: list[str] = (),
                  expected_csv_sheets: list[str] = (), **_) -> float:
  result, rcsv = _split(result, list(result_csv_sheets))
  expected, ecsv = _split(expected, list(expected_csv_sheets))
  if result is None:
    return 0.0
  try:
    rbook = _book(result)
  except Exception:   # not a workbook: the agent's file is malformed
    return 0.0
  ebook = _book(expected) if expected is not None else None
  raw: tuple | None = None   # formulas kept, charts and pivots loaded: read only when a rule needs it
  if not rules:
    if ebook is None:
      return 0.0
    return float([_values(ws, None) for ws in rbook.worksheets] == [_values(ws, None) for ws in ebook.worksheets])
  for r in rules:
    if r["type"] == "sheet_name":
      if ebook is None or rbook.sheetnames != ebook.sheetnames:
        return 0.0
    elif r["type"] == "sheet_data":
      s1, s2 = _sheet(r["sheet_idx0"], rbook, ebook), _sheet(r["sheet_idx1"], rbook, ebook)
      precision = int(r.get("precision", 4))
      if s1 is None or s2 is None or _values(s1, precision) != _values(s2, precision):
        return 0.0
    elif r["type"] == "sheet_print":
      def printed(idx):
        ws = _sheet(idx, rbook, ebook)
        csvs = rcsv if (isinstance(idx, int) or idx.startswith("R")) else ecsv
        return None if ws is None else _printed(csvs.get(ws.title))
      p1, p2 = printed(r["sheet_idx0"]), printed(r["sheet_idx1"])
      if r.get("ignore_case"):
        p1, p2 = ([l.lower() for l in p] if p is not None else None for p in (p1, p2))
      if p1 is None or p1 != p2:
        return 0.0
    elif r["type"] == "sheet_fuzzy":
      s1, s2 = _sheet(r["sheet_idx0"], rbook, ebook), _sheet(r["sheet_idx1"], rbook, ebook)
      if s1 is None or s2 is None or not all(_fuzzy_cells(s1, s2, rl) for rl in r["rules"]):
        return 0.0
    elif r["type"] == "freeze":
      s1, s2 = _sheet(r["sheet_idx0"], rbook, ebook), _sheet(r["sheet_idx1"], rbook, ebook)
      if s1 is None or s2 is None or s1.freeze_panes != s2.freeze_panes:
        return 0.0
    elif r["type"] == "zoom":
      ws = _sheet(r["sheet_idx"], rbook, ebook)
      if ws is None or not match_rule(ws.sheet_view.zoomScale or 100.0, r):
        return 0.0
    elif r["type"] == "check_cell":
      ws = _sheet(r["sheet_idx"], rbook, ebook)
      if ws is None:
        return 0.0
      cell = ws[r["coordinate"]]
      if not all(match_rule(cell.value if p == "value" else table_styles.cell_style(p, cell), rule)
                 for p, rule in r["props"].items()):
        return 0.0
    elif r["type"] in ("style", "row_props"):
      s1, s2 = _sheet(r["sheet_idx0"], rbook, ebook), _sheet(r["sheet_idx1"], rbook, ebook)
      read = table_styles.sheet_styles if r["type"] == "style" else table_styles.rows
      if s1 is None or s2 is None or read(s1, r.get("props", [])) != read(s2, r.get("props", [])):
        return 0.0
    elif r["type"] == "data_validation":
      ws = _sheet(r["sheet_idx"], rbook, ebook)
      if ws is None or not table_styles.validations_match(ws, r["dv_props"], match_rule):
        return 0.0
    elif r["type"] in ("chart", "pivot_table"):
      if raw is None:
        raw = (_book(result, False), _book(expected, False) if expected is not None else None)
      load, props = (charts, r.get("chart_props", [])) if r["type"] == "chart" else (pivots, r.get("pivot_props", []))
      a, b = load(_sheet(r["sheet_idx0"], *raw), props), load(_sheet(r["sheet_idx1"], *raw), props)
      if a is None or a != b:
        return 0.0
    else:
      raise ValueError(f"compare_table: unsupported rule type {r['type']!r}")
  return 1.0
