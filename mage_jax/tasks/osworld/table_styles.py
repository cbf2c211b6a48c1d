"""Cell styles, row properties and data validation of a worksheet, as OSWorld's compare_table rules
read them (our code, from their documented semantics; used by table_metrics.py).

Cell style properties (a cell without a value has no font or number format: None):
  number_format (numbers only), font_name, font_family, font_color (ARGB), font_bold, font_italic,
  font_underline, font_size, fill_type (the fill's XML tag), bgcolor, fgcolor (the fill's colours,
  ARGB), hyperlink.
The `style` rule compares every cell's listed properties. OSWorld also evaluates each conditional
format's formula (with the `formulas` package) and gives the cells it activates the format's
style; we don't evaluate formulas, so where either sheet has conditional formats we require the
same formats instead: equal ranges, rule types, formulas and the listed properties of their styles.
That is stricter than OSWorld (two different formulas that colour the same cells fail here) and
never passes a sheet OSWorld would fail.
"""
from __future__ import annotations

from typing import Any

STYLE_PROPS = ("number_format", "font_name", "font_family", "font_color", "font_bold", "font_italic", "font_underline",
               "font_size", "fill_type", "bgcolor", "fgcolor", "hyperlink")
ROW_PROPS = ("hidden", "collapsed", "height", "outline_level")
DV_ATTRS = ("sqref", "ranges", "type", "formula1", "formula2", "operator", "allowBlank", "showDropDown", "showInputMessage",
            "showErrorMessage", "error", "errorTitle", "errorStyle", "prompt", "promptTitle", "imeMode")


def cell_style(prop: str, cell, diff=None) -> Any:
  """One style property of a cell, or of a differential style `diff` (a conditional format's) applied to it."""
  src = diff if diff is not None else cell
  has_value = cell is None or cell.value is not None
  if prop == "number_format":
    if diff is not None:
      return diff.numFmt.formatCode if diff.numFmt is not None else None
    return cell.number_format if has_value and cell.data_type == "n" else None
  if prop.startswith("font_"):
    font = src.font
    if not has_value or font is None:
      return None
    if prop == "font_color":
      return font.color.rgb if font.color is not None else None
    return getattr(font, {"font_name": "name", "font_family": "family", "font_bold": "bold", "font_italic": "italic",
                          "font_underline": "underline", "font_size": "size"}[prop])
  if prop in ("fill_type", "bgcolor", "fgcolor"):
    fill = src.fill
    if fill is None:
      return None
    if prop == "fill_type":
      return fill.tagname
    colour = getattr(fill, "bgColor" if prop == "bgcolor" else "fgColor", None)
    return colour.rgb if colour is not None else None
  if prop == "hyperlink":
    return (cell.hyperlink or "") if has_value else None
  raise ValueError(f"unsupported cell style property {prop!r}")


def sheet_styles(ws, props: list[str]) -> dict[str, Any]:
  """{coordinate: [property values]} over every cell, plus the conditional formats (see the module doc)."""
  styles: dict[str, Any] = {c.coordinate: [cell_style(p, c) for p in props] for col in ws.iter_cols() for c in col}
  formats = []
  for cf in ws.conditional_formatting:
    for rule in cf.rules:
      formats.append((str(cf.sqref), rule.type, tuple(rule.formula or ()),
                      tuple(cell_style(p, None, rule.dxf) if rule.dxf is not None else None for p in props)))
  return {"cells": styles, "conditional": sorted(formats, key=repr)}


def rows(ws, props: list[str]) -> dict[int, dict[str, Any]]:
  return {n: {p: getattr(dim, p) for p in props} for n, dim in ws.row_dimensions.items()}


def validations_match(ws, dv_props: list[dict], match_rule) -> bool:
  """OSWorld's data_validation rule: at least as many validations as dv_props, and every validation
  matches one of dv_props ({attribute: value rule}; `ranges` is the validation's cell ranges)."""
  validations = ws.data_validations.dataValidation
  if len(validations) < len(dv_props):
    return False
  value = lambda dv, attr: dv.sqref if attr == "ranges" else getattr(dv, attr)
  return all(any(all(match_rule(value(dv, a), rule) for a, rule in props.items()) for props in dv_props)
             for dv in validations)
