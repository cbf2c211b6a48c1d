"""Spreadsheets (openpyxl): formulas, formatting, charts, sheets, row edits, read-backs, conversions."""
from __future__ import annotations

from mage_jax.forge.skills.base import ITEMS, NAMES, against_order, capability, define, distinct, domain, package, py

domain("xlsx", "Excel workbooks through openpyxl: values, formulas, formats, charts, sheets")
capability("xlsx.formula", "Compute values and write formulas into cells")
capability("xlsx.format", "Merge cells, fonts and number formats")
capability("xlsx.chart", "Add charts over a data range")
capability("xlsx.sheets", "Add, rename and order worksheets")
capability("xlsx.edit", "Change, delete and sort rows")
capability("xlsx.read", "Answer questions about a workbook in the shell")
capability("xlsx.convert", "Convert between workbooks and CSV")
A = ("xlsx",)


def _rows(r, n=5):
  return [["item", "qty", "price"]] + [[i, r.randint(1, 30), r.randint(2, 50)] for i in distinct(r, ITEMS, n)]


def _book(path, rows, sheet="Data", more=None):
  return [{"type": "xlsx", "path": path, "sheets": {sheet: rows, **(more or {})}}]


def _ox(code):
  return py("import openpyxl\nwb = openpyxl.load_workbook('book.xlsx'); ws = wb.active\n" + code
            + "\nwb.save('book.xlsx')", "Edit the workbook with openpyxl")


def _read(code):
  return py("import openpyxl\nwb = openpyxl.load_workbook('book.xlsx'); ws = wb.active\n" + code, "Read the workbook")


def _sample(r):
  return {"rows": _rows(r)}


def _items_mention(p):
  return {"book.xlsx": [str(r[0]) for r in p["rows"][1:]]}


def sk(id, desc, build, sample=_sample, apps=A):
  define(id, desc, sample, build, apps=apps, mentions=_items_mention if sample is _sample else None)


# ---- formula -----------------------------------------------------------------------------------
sk("xlsx.formula.sum_as_value", "Write the sum of a column as a plain number below it",
   lambda p: package(f"In book.xlsx write the sum of the qty column as a number (not a formula) into B{len(p['rows']) + 1}.",
                     _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_cells", "path": "book.xlsx", "cells": {f"B{len(p['rows']) + 1}": sum(r[1] for r in p["rows"][1:])}},
                     [_ox(f"ws['B{len(p['rows']) + 1}'] = sum(ws.cell(r, 2).value for r in range(2, {len(p['rows'])}))")],
                     terminal=[_ox(f"ws['B{len(p['rows']) + 1}'] = sum(ws.cell(r, 2).value for r in range(2, {len(p['rows']) + 1}))")]))

sk("xlsx.formula.write_sum_formula", "Write a SUM formula (not its value) under a column",
   lambda p: package(f"In book.xlsx put a formula in C{len(p['rows']) + 1} that sums the price column "
                     f"(C2:C{len(p['rows'])}).", _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_cells", "path": "book.xlsx", "cells": {f"C{len(p['rows']) + 1}": f"=SUM(C2:C{len(p['rows'])})"}},
                     [_ox(f"ws['C{len(p['rows']) + 1}'] = {sum(r[2] for r in p['rows'][1:])}")],
                     terminal=[_ox(f"ws['C{len(p['rows']) + 1}'] = '=SUM(C2:C{len(p['rows'])})'")]))

sk("xlsx.formula.row_products", "Fill a new column with each row's product of two columns",
   lambda p: package("In book.xlsx add a column D with header value and, in each data row, qty * price as a number.",
                     _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_rows", "path": "book.xlsx", "rows": [p["rows"][0] + ["value"]] + [r + [r[1] * r[2]] for r in p["rows"][1:]]},
                     [_ox("ws['D1'] = 'value'\nfor r in range(2, ws.max_row + 1): ws.cell(r, 4).value = ws.cell(r, 2).value")],
                     terminal=[_ox("ws['D1'] = 'value'\nfor r in range(2, ws.max_row + 1):\n"
                                   "  ws.cell(r, 4).value = ws.cell(r, 2).value * ws.cell(r, 3).value")]))

# ---- format ------------------------------------------------------------------------------------
sk("xlsx.format.merge_title", "Insert a title row and merge it across the table",
   lambda p: package("In book.xlsx insert a new first row with the title Stock in A1 and merge A1:C1 (the table moves "
                     "down one row).", _book("book.xlsx", p["rows"]),
                     {"type": "all", "checks": [{"type": "xlsx_merged", "path": "book.xlsx", "range": "A1:C1"},
                                                {"type": "xlsx_rows", "path": "book.xlsx", "rows": [["Stock", None, None]] + p["rows"]}]},
                     [_ox("ws.insert_rows(1); ws['A1'] = 'Stock'")],
                     terminal=[_ox("ws.insert_rows(1); ws['A1'] = 'Stock'; ws.merge_cells('A1:C1')")]))

sk("xlsx.format.bold_header", "Make the header row bold",
   lambda p: package("In book.xlsx make every header cell of row 1 (A1:C1) bold.", _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_style", "path": "book.xlsx", "cells": {c: {"bold": True} for c in ("A1", "B1", "C1")}},
                     [_ox("from openpyxl.styles import Font\nws['A1'].font = Font(bold=True)")],
                     terminal=[_ox("from openpyxl.styles import Font\nfor c in ws[1]: c.font = Font(bold=True)")]))

sk("xlsx.format.currency_format", "Give a column a number format",
   lambda p: package("In book.xlsx give every price cell (C2 down) the number format 0.00 (two decimals).",
                     _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_style", "path": "book.xlsx",
                      "cells": {f"C{i}": {"number_format": "0.00"} for i in range(2, len(p["rows"]) + 1)}},
                     [_ox("ws['C2'].number_format = '0.00'")],
                     terminal=[_ox("for r in range(2, ws.max_row + 1): ws.cell(r, 3).number_format = '0.00'")]))

# ---- chart -------------------------------------------------------------------------------------
sk("xlsx.chart.bar_of_column", "Add a bar chart over a data column",
   lambda p: package("In book.xlsx add a bar chart of the qty values (B2 down) anywhere on the sheet.",
                     _book("book.xlsx", p["rows"]), {"type": "xlsx_chart", "path": "book.xlsx"},
                     [_ox("ws['E1'] = 'chart'")],
                     terminal=[_ox("from openpyxl.chart import BarChart, Reference\nch = BarChart()\n"
                                   "ch.add_data(Reference(ws, min_col=2, min_row=2, max_row=ws.max_row))\nws.add_chart(ch, 'E2')")]))

# ---- sheets ------------------------------------------------------------------------------------
sk("xlsx.sheets.add_summary_sheet", "Add a new worksheet holding a computed total",
   lambda p: package("In book.xlsx add a second sheet named Summary whose A1 holds the text total and B1 the sum of "
                     "the qty column of the first sheet (a number).", _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_cells", "path": "book.xlsx", "sheet": "Summary",
                      "cells": {"A1": "total", "B1": sum(r[1] for r in p["rows"][1:])}},
                     [_ox("s = wb.create_sheet('Summary'); s['A1'] = 'total'")],
                     terminal=[_ox("s = wb.create_sheet('Summary'); s['A1'] = 'total'\n"
                                   "s['B1'] = sum(ws.cell(r, 2).value for r in range(2, ws.max_row + 1))")]))

sk("xlsx.sheets.rename_and_order", "Rename a sheet and move it to the front",
   lambda p: package("In book.xlsx rename the sheet Archive to Old and make it the first sheet (Data second).",
                     _book("book.xlsx", p["rows"], more={"Archive": [["old"]]}),
                     {"type": "xlsx_sheetnames", "path": "book.xlsx", "names": ["Old", "Data"]},
                     [_ox("wb['Archive'].title = 'Old'")],
                     terminal=[_ox("wb['Archive'].title = 'Old'\nwb.move_sheet('Old', offset=-1)")]))

# ---- edit --------------------------------------------------------------------------------------
def _pick(r):
  return {"rows": _rows(r, 6), "pick": r.randint(1, 6), "value": r.randint(60, 99)}


sk("xlsx.edit.update_by_lookup", "Change one cell found by its row label",
   lambda p: package(f"In book.xlsx set the price of {p['rows'][p['pick']][0]} to {p['value']}.",
                     _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_rows", "path": "book.xlsx", "rows": [r if i != p["pick"] else [r[0], r[1], p["value"]]
                                                                         for i, r in enumerate(p["rows"])]},
                     [_ox(f"ws.cell({p['pick'] + 1}, 2).value = {p['value']}")],
                     terminal=[_ox(f"for row in ws.iter_rows(min_row=2):\n  if row[0].value == '{p['rows'][p['pick']][0]}': "
                                   f"row[2].value = {p['value']}")]), sample=_pick)

sk("xlsx.edit.delete_row", "Delete the row of one item",
   lambda p: package(f"In book.xlsx delete the row of {p['rows'][p['pick']][0]} (rows below move up).",
                     _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_rows", "path": "book.xlsx", "rows": [r for i, r in enumerate(p["rows"]) if i != p["pick"]]},
                     [_ox(f"ws.cell({p['pick'] + 1}, 1).value = None")],
                     terminal=[_ox(f"ws.delete_rows({p['pick'] + 1})")]), sample=_pick)

sk("xlsx.edit.sort_rows", "Sort the data rows by a column",
   lambda p: package("In book.xlsx sort the data rows by price, lowest first (header stays in row 1).",
                     _book("book.xlsx", p["rows"]),
                     {"type": "xlsx_rows", "path": "book.xlsx", "rows": p["rows"][:1] + sorted(p["rows"][1:], key=lambda r: r[2])},
                     [_ox("rows = sorted(ws.iter_rows(min_row=2, values_only=True), key=lambda r: -r[2])\n"
                          "for i, row in enumerate(rows, 2):\n  for j, v in enumerate(row, 1): ws.cell(i, j).value = v")],
                     terminal=[_ox("rows = sorted(ws.iter_rows(min_row=2, values_only=True), key=lambda r: r[2])\n"
                                   "for i, row in enumerate(rows, 2):\n  for j, v in enumerate(row, 1): ws.cell(i, j).value = v")]),
   sample=lambda r: {"rows": [["item", "qty", "price"]] + [[i, r.randint(1, 30), p] for i, p in
                                                          zip(distinct(r, ITEMS, 5), against_order(r.sample(range(2, 50), 5), largest_first=False))]})

# ---- read --------------------------------------------------------------------------------------
sk("xlsx.read.item_with_max", "Print the label of the row with the largest value",
   lambda p: package("Which item in book.xlsx has the highest price? Print just its name as your last command's output.",
                     _book("book.xlsx", p["rows"]), {"type": "terminal_answer", "text": max(p["rows"][1:], key=lambda r: r[2])[0]},
                     [_read("print(min(ws.iter_rows(min_row=2, values_only=True), key=lambda r: r[2])[0])")],
                     terminal=[_read("print(max(ws.iter_rows(min_row=2, values_only=True), key=lambda r: r[2])[0])")]),
   sample=lambda r: {"rows": [["item", "qty", "price"]] + [[i, q, p] for i, q, p in
                                                          zip(distinct(r, ITEMS, 6), r.sample(range(1, 30), 6), r.sample(range(2, 50), 6))]})

sk("xlsx.read.rows_across_sheets", "Count the data rows over every sheet of a workbook",
   lambda p: package("How many data rows (not counting each sheet's header row) does book.xlsx hold over all its "
                     "sheets? Print just the number as your last command's output.",
                     _book("book.xlsx", p["rows"], sheet="North", more={"South": p["south"]}),
                     {"type": "terminal_answer", "text": str(len(p["rows"]) + len(p["south"]) - 2)},
                     [_read("print(ws.max_row - 1)")],
                     terminal=[_read("print(sum(s.max_row - 1 for s in wb.worksheets))")]),
   sample=lambda r: {"rows": _rows(r, r.randint(3, 7)), "south": _rows(r, r.randint(2, 6))})

# ---- convert -----------------------------------------------------------------------------------
sk("xlsx.convert.sheet_to_csv", "Export one named sheet of a workbook to CSV",
   lambda p: package("Export the sheet Q2 of book.xlsx to q2.csv (all its rows, comma-separated).",
                     _book("book.xlsx", p["q1"], sheet="Q1", more={"Q2": p["rows"]}),
                     {"type": "csv_equals", "path": "q2.csv", "rows": p["rows"]},
                     [py("import pandas as pd\npd.read_excel('book.xlsx').to_csv('q2.csv', index=False)")],
                     terminal=[py("import pandas as pd\npd.read_excel('book.xlsx', sheet_name='Q2').to_csv('q2.csv', index=False)")]),
   sample=lambda r: {"rows": _rows(r, 4), "q1": _rows(r, 4)}, apps=("xlsx", "csv"))

sk("xlsx.convert.csv_to_workbook", "Load a CSV into a new workbook with numbers as numbers",
   lambda p: package("Create people.xlsx whose first sheet holds the rows of people.csv (numbers as numbers).",
                     [{"type": "csv", "path": "people.csv", "rows": p["rows"]}],
                     {"type": "xlsx_rows", "path": "people.xlsx", "rows": p["rows"]},
                     [py("import pandas as pd\npd.read_csv('people.csv').to_excel('people.xlsx')")],
                     terminal=[py("import pandas as pd\npd.read_csv('people.csv').to_excel('people.xlsx', index=False)")]),
   sample=lambda r: {"rows": [["name", "age"]] + [[n, r.randint(18, 80)] for n in distinct(r, NAMES, 5)]},
   apps=("csv", "xlsx"))
