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
Other rule types (chart, pivot_table, check_cell, style, freeze, ...: SUPPORTED_RULES lists what is
here) are refused by the importer with the rule named.
"""
from __future__ import annotations

import io
from typing import Any

SUPPORTED_RULES = ("sheet_data", "sheet_name", "chart", "pivot_table")


def _book(data: bytes, data_only: bool = True):
  import openpyxl
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
  from openpyxl.utils.cell import coordinate_to_tuple
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


def compare_table(result: bytes | None, expected: bytes | None, rules: list[dict] | None = None, **_) -> float:
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
