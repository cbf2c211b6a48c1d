"""OSWorld's compare_table (spreadsheets), re-implemented for its common rules (our code).

Without rules: every sheet's cell values equal, sheet by sheet. options.rules, each must hold:
  sheet_data  {sheet_idx0, sheet_idx1, precision?: 4}: the two sheets' cell values equal, numbers
              rounded to `precision` decimals. A sheet index is an int (the result's sheet at that
              position), "RI<n>"/"EI<n>" (the result's/expected file's n-th sheet) or "RN<name>"/"EN<name>"
              (by name); a missing sheet fails the rule.
  sheet_name  the two workbooks' sheet names equal, in order.
Other rule types (chart, pivot_table, check_cell, style, freeze, ...: SUPPORTED_RULES lists what is
here) are refused by the importer with the rule named.
"""
from __future__ import annotations

import io
from typing import Any

SUPPORTED_RULES = ("sheet_data", "sheet_name")


def _book(data: bytes):
  import openpyxl
  return openpyxl.load_workbook(io.BytesIO(data), data_only=True)


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
    else:
      raise ValueError(f"compare_table: unsupported rule type {r['type']!r}")
  return 1.0
