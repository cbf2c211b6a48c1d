"""Reports (multi-application): turn data from CSV, SQLite or workbooks into charts, documents, decks and PDFs."""
from __future__ import annotations

import collections

from mage_jax.forge.skills.base import CATEGORIES, ITEMS, NAMES, WORDS, capability, define, distinct, domain, package, py

domain("report", "Multi-application reports: data from one file format presented in another")
capability("report.chart", "Charts in workbooks built from other data")
capability("report.table", "Document tables filled from data files")
capability("report.summary", "Written summaries of computed figures")
capability("report.slides", "Slide decks built from data and documents")
capability("report.pdf", "PDF output built from data and documents")
capability("report.export", "Structured exports and bundles")


def _rows(r, n=4):
  return [["item", "qty"]] + [[i, q] for i, q in zip(distinct(r, ITEMS, n), r.sample(range(1, 60), n))]


def _csv(rows, path="data.csv"):
  return {"type": "csv", "path": path, "rows": rows}


def _xlsx(sheets, path="data.xlsx"):
  return {"type": "xlsx", "path": path, "sheets": sheets}


def _db(rows):
  return {"type": "sqlite", "path": "data.db", "tables": {"stock": {"columns": ["item TEXT", "qty INTEGER"], "rows": rows[1:]}}}


def _docx(paras, tables=(), path="data.docx"):
  return {"type": "docx", "path": path, "paragraphs": paras, **({"tables": list(tables)} if tables else {})}


_READ_CSV = "import csv\nrows = list(csv.reader(open('data.csv')))\n"
_READ_DB = "import sqlite3\nrows = [['item', 'qty']] + [list(r) for r in sqlite3.connect('data.db').execute('SELECT item, qty FROM stock ORDER BY item')]\n"
_READ_XLSX = "import openpyxl\nwb = openpyxl.load_workbook('data.xlsx')\nrows = [list(r) for r in wb.active.iter_rows(values_only=True)]\n"
_CHART = ("import openpyxl\nfrom openpyxl.chart import BarChart, Reference\nwb = openpyxl.Workbook(); ws = wb.active\n"
          "for r in rows: ws.append([int(v) if str(v).isdigit() else v for v in r])\n{chart}wb.save('report.xlsx')")
_ADD_CHART = "ch = BarChart(); ch.add_data(Reference(ws, min_col=2, min_row=1, max_row=ws.max_row), titles_from_data=True)\nws.add_chart(ch, 'D2')\n"
_TABLE = "import docx\nd = docx.Document()\nt = d.add_table(len(rows), 2)\nfor i, r in enumerate(rows):\n  for j, v in enumerate(r): t.cell(i, j).text = str(v)\nd.save('report.docx')"


def _by_item(rows):
  return [rows[0]] + sorted(rows[1:])


def sk(id, desc, build, sample=lambda r: {"rows": _rows(r)}, apps=("csv", "xlsx")):
  define(id, desc, sample, build, apps=apps)


# ---- chart -------------------------------------------------------------------------------------
sk("report.chart.csv_to_xlsx_chart", "Load a CSV into a new workbook and chart its numbers",
   lambda p: package("Create report.xlsx holding the rows of data.csv (numbers as numbers) with a bar chart of the qty column.",
                     [_csv(p["rows"])], {"type": "all", "checks": [{"type": "xlsx_rows", "path": "report.xlsx", "rows": p["rows"]},
                                                                   {"type": "xlsx_chart", "path": "report.xlsx"}]},
                     [py(_READ_CSV + _CHART.format(chart=""))], terminal=[py(_READ_CSV + _CHART.format(chart=_ADD_CHART))]))

sk("report.chart.sqlite_to_xlsx_chart", "Query a database into a new workbook and chart it",
   lambda p: package("Create report.xlsx with header item,qty and the rows of the stock table of data.db sorted by item, "
                     "plus a bar chart of qty.", [_db(p["rows"])],
                     {"type": "all", "checks": [{"type": "xlsx_rows", "path": "report.xlsx", "rows": _by_item(p["rows"])},
                                                {"type": "xlsx_chart", "path": "report.xlsx"}]},
                     [py(_READ_DB + "rows = rows[:1] + rows[1:][::-1]\n" + _CHART.format(chart=_ADD_CHART))],
                     terminal=[py(_READ_DB + _CHART.format(chart=_ADD_CHART))]), apps=("sqlite", "xlsx"))

# ---- table -------------------------------------------------------------------------------------
sk("report.table.sqlite_to_docx", "Write a database table into a document table",
   lambda p: package("Create report.docx with one table: header item,qty and the rows of the stock table of data.db sorted by item.",
                     [_db(p["rows"])], {"type": "docx_table", "path": "report.docx", "rows": _by_item(p["rows"])},
                     [py(_READ_DB + "rows = rows[1:]\n" + _TABLE)], terminal=[py(_READ_DB + _TABLE)]), apps=("sqlite", "docx"))

sk("report.table.xlsx_to_docx", "Copy a worksheet into a document table",
   lambda p: package("Create report.docx with one table holding every row of the first sheet of data.xlsx.",
                     [_xlsx({"Stock": p["rows"]})], {"type": "docx_table", "path": "report.docx", "rows": p["rows"]},
                     [py(_READ_XLSX + "rows = [r[::-1] for r in rows]\n" + _TABLE)], terminal=[py(_READ_XLSX + _TABLE)]),
   apps=("xlsx", "docx"))

# ---- summary -----------------------------------------------------------------------------------
def _sales(r):
  return {"rows": [["category", "amount"]] + [[r.choice(CATEGORIES[:3]), r.randint(1, 50)] for _ in range(8)]}


def _totals(rows):
  tot = collections.Counter()
  for c, a in rows[1:]:
    tot[c] += a
  return sorted(tot.items())


sk("report.summary.csv_totals_docx", "Write per-category totals of a CSV as document paragraphs",
   lambda p: package("Create summary.docx with one paragraph per category of data.csv, sorted by category, reading "
                     "'<category>: <total amount>'.", [_csv(p["rows"])],
                     {"type": "docx_paragraphs", "path": "summary.docx", "paragraphs": [f"{c}: {t}" for c, t in _totals(p["rows"])]},
                     [py(_READ_CSV + "import docx\nd = docx.Document()\nfor r in rows[1:]: d.add_paragraph(f'{r[0]}: {r[1]}')\nd.save('summary.docx')")],
                     terminal=[py(_READ_CSV + "import docx, collections\nt = collections.Counter()\nfor c, a in rows[1:]: t[c] += int(a)\n"
                                  "d = docx.Document()\nfor c in sorted(t): d.add_paragraph(f'{c}: {t[c]}')\nd.save('summary.docx')")]),
   sample=_sales, apps=("csv", "docx"))

sk("report.summary.xlsx_total_docx", "Write a titled document stating a workbook's grand total",
   lambda p: package("Create total.docx with a Heading 1 paragraph 'Stock total' followed by a paragraph 'Total qty: N', N "
                     "being the sum of the qty column of data.xlsx.", [_xlsx({"Stock": p["rows"]})],
                     {"type": "all", "checks": [
                         {"type": "docx_style", "path": "total.docx", "text": "Stock total", "style": "Heading 1"},
                         {"type": "docx_paragraphs", "path": "total.docx",
                          "paragraphs": ["Stock total", f"Total qty: {sum(r[1] for r in p['rows'][1:])}"]}]},
                     [py(_READ_XLSX + "import docx\nd = docx.Document()\nd.add_paragraph('Stock total')\n"
                         "d.add_paragraph(f'Total qty: {sum(r[1] for r in rows[1:])}')\nd.save('total.docx')")],
                     terminal=[py(_READ_XLSX + "import docx\nd = docx.Document()\nd.add_heading('Stock total', 1)\n"
                                  "d.add_paragraph(f'Total qty: {sum(r[1] for r in rows[1:])}')\nd.save('total.docx')")]),
   apps=("xlsx", "docx"))

# ---- slides ------------------------------------------------------------------------------------
_DECK = "from pptx import Presentation\np = Presentation()\n"

sk("report.slides.csv_rows_to_slides", "Make one slide per CSV row (title and body from columns)",
   lambda p: package("Create items.pptx with one slide per data row of data.csv, in order: the item as the slide title and "
                     "'qty N' as its body text.", [_csv(p["rows"])],
                     {"type": "all", "checks": [{"type": "pptx_titles", "path": "items.pptx", "titles": [r[0] for r in p["rows"][1:]]},
                                                {"type": "pptx_bodies", "path": "items.pptx", "bodies": [f"qty {r[1]}" for r in p["rows"][1:]]}]},
                     [py(_READ_CSV + _DECK + "for r in rows[1:]:\n  s = p.slides.add_slide(p.slide_layouts[1]); s.shapes.title.text = r[0]\n"
                         "p.save('items.pptx')")],
                     terminal=[py(_READ_CSV + _DECK + "for r in rows[1:]:\n  s = p.slides.add_slide(p.slide_layouts[1]); "
                                  "s.shapes.title.text = r[0]; s.placeholders[1].text = f'qty {r[1]}'\np.save('items.pptx')")]),
   apps=("csv", "pptx"))

sk("report.slides.sheets_to_slides", "Make one slide per worksheet, titled by the sheet name",
   lambda p: package("Create sheets.pptx with one slide per sheet of data.xlsx, in sheet order, titled with the sheet's name.",
                     [_xlsx({s: _rows_fixed(i) for i, s in enumerate(p["sheets"])})],
                     {"type": "pptx_titles", "path": "sheets.pptx", "titles": p["sheets"]},
                     [py("import openpyxl\n" + _DECK + "for n in sorted(openpyxl.load_workbook('data.xlsx').sheetnames):\n"
                         "  p.slides.add_slide(p.slide_layouts[1]).shapes.title.text = n\np.save('sheets.pptx')")],
                     terminal=[py("import openpyxl\n" + _DECK + "for n in openpyxl.load_workbook('data.xlsx').sheetnames:\n"
                                  "  p.slides.add_slide(p.slide_layouts[1]).shapes.title.text = n\np.save('sheets.pptx')")]),
   sample=lambda r: {"sheets": [w.title() for w in sorted(distinct(r, WORDS, 3), reverse=True)]}, apps=("xlsx", "pptx"))


def _rows_fixed(i):
  return [["k", "v"], ["row", i]]


sk("report.slides.notes_from_docx", "Copy document paragraphs into the speaker notes of existing slides",
   lambda p: package("deck.pptx has as many slides as notes.docx has paragraphs. Put paragraph i of notes.docx into the "
                     "speaker notes of slide i (in order).",
                     [{"type": "pptx", "path": "deck.pptx", "slides": [{"title": f"Part {i + 1}"} for i in range(len(p["notes"]))]},
                      _docx(p["notes"], path="notes.docx")],
                     {"type": "pptx_notes", "path": "deck.pptx", "notes": p["notes"]},
                     [py("import docx\n" + "from pptx import Presentation\np = Presentation('deck.pptx')\n"
                         "for s, t in zip(p.slides, [x.text for x in docx.Document('notes.docx').paragraphs][::-1]):\n"
                         "  s.notes_slide.notes_text_frame.text = t\np.save('deck.pptx')")],
                     terminal=[py("import docx\n" + "from pptx import Presentation\np = Presentation('deck.pptx')\n"
                                  "for s, t in zip(p.slides, [x.text for x in docx.Document('notes.docx').paragraphs]):\n"
                                  "  s.notes_slide.notes_text_frame.text = t\np.save('deck.pptx')")]),
   sample=lambda r: {"notes": [f"Mention {n} and {w}" for n, w in zip(distinct(r, NAMES, 3), distinct(r, WORDS, 3))]},
   apps=("docx", "pptx"))

# ---- pdf ---------------------------------------------------------------------------------------
_PDF = "from fpdf import FPDF\nf = FPDF(); f.set_font('Helvetica', size=12)\n"

sk("report.pdf.csv_rows_to_pages", "Write one PDF page per CSV row",
   lambda p: package("Create items.pdf with one page per data row of data.csv, in order, each page reading '<item>: <qty>'.",
                     [_csv(p["rows"])], {"type": "pdf_page_texts", "path": "items.pdf", "pages": [f"{i}: {q}" for i, q in p["rows"][1:]]},
                     [py(_READ_CSV + _PDF + "f.add_page()\nfor r in rows[1:]: f.cell(0, 8, f'{r[0]}: {r[1]}', new_x='LMARGIN', new_y='NEXT')\nf.output('items.pdf')")],
                     terminal=[py(_READ_CSV + _PDF + "for r in rows[1:]:\n  f.add_page(); f.cell(0, 8, f'{r[0]}: {r[1]}')\nf.output('items.pdf')")]),
   apps=("csv", "pdf"))

sk("report.pdf.docx_to_pdf", "Turn each paragraph of a document into a PDF page",
   lambda p: package("Create memo.pdf with one page per paragraph of memo.docx, in order, each page holding that paragraph's text.",
                     [_docx(p["paras"], path="memo.docx")], {"type": "pdf_page_texts", "path": "memo.pdf", "pages": p["paras"]},
                     [py("import docx\n" + _PDF + "f.add_page()\nf.multi_cell(0, 8, ' '.join(x.text for x in docx.Document('memo.docx').paragraphs))\n"
                         "f.output('memo.pdf')")],
                     terminal=[py("import docx\n" + _PDF + "for x in docx.Document('memo.docx').paragraphs:\n  f.add_page(); f.multi_cell(0, 8, x.text)\n"
                                  "f.output('memo.pdf')")]),
   sample=lambda r: {"paras": [f"Note on {w} for {n}" for w, n in zip(distinct(r, WORDS, 3), distinct(r, NAMES, 3))]},
   apps=("docx", "pdf"))

sk("report.pdf.sqlite_invoice", "Write a PDF invoice whose total comes from a database query",
   lambda p: package("Create invoice.pdf with a single page that says 'Total qty: N', N being the sum of qty in the stock "
                     "table of data.db.", [_db(p["rows"])],
                     {"type": "pdf_page_texts", "path": "invoice.pdf", "pages": [f"Total qty: {sum(r[1] for r in p['rows'][1:])}"]},
                     [py(_READ_DB + _PDF + "f.add_page(); f.cell(0, 8, f'Total qty: {len(rows) - 1}')\nf.output('invoice.pdf')")],
                     terminal=[py(_READ_DB + _PDF + "f.add_page(); f.cell(0, 8, f'Total qty: {sum(r[1] for r in rows[1:])}')\nf.output('invoice.pdf')")]),
   apps=("sqlite", "pdf"))

# ---- export ------------------------------------------------------------------------------------
sk("report.export.xlsx_to_json", "Export a workbook's sheets to a JSON object of records",
   lambda p: package("Write book.json: an object mapping each sheet name of data.xlsx to a list of {item, qty} objects "
                     "(one per data row, qty a number).", [_xlsx({"North": p["rows"], "South": p["south"]})],
                     {"type": "json_equals", "path": "book.json", "expected": {
                         "North": [{"item": i, "qty": q} for i, q in p["rows"][1:]], "South": [{"item": i, "qty": q} for i, q in p["south"][1:]]}},
                     [py("import json, openpyxl\nwb = openpyxl.load_workbook('data.xlsx')\njson.dump({s.title: [{'item': r[0], 'qty': r[1]} "
                         "for r in s.iter_rows(values_only=True)] for s in wb}, open('book.json', 'w'))")],
                     terminal=[py("import json, openpyxl\nwb = openpyxl.load_workbook('data.xlsx')\njson.dump({s.title: [{'item': r[0], 'qty': r[1]} "
                                  "for r in s.iter_rows(min_row=2, values_only=True)] for s in wb}, open('book.json', 'w'))")]),
   sample=lambda r: {"rows": _rows(r, 3), "south": _rows(r, 2)}, apps=("xlsx", "json"))

sk("report.export.tables_to_zip", "Export every table of a database to CSV files bundled in a zip",
   lambda p: package("Export each table of data.db to a CSV file named <table>.csv (header row of column names first) and "
                     "put them all, without directories, into tables.zip.",
                     [{"type": "sqlite", "path": "data.db", "tables": {t: {"columns": ["item TEXT", "qty INTEGER"], "rows": p["rows"][1:]}
                                                                      for t in p["tables"]}}],
                     {"type": "archive_members", "path": "tables.zip", "names": [f"{t}.csv" for t in p["tables"]],
                      "texts": {f"{t}.csv": "".join(f"{a},{b}\n" for a, b in p["rows"]) for t in p["tables"]}},
                     [py("import sqlite3, zipfile\ncon = sqlite3.connect('data.db')\nwith zipfile.ZipFile('tables.zip', 'w') as z:\n"
                         "  for (t,) in con.execute(\"SELECT name FROM sqlite_master WHERE type = 'table'\"):\n"
                         "    z.writestr(t + '.csv', ''.join(f'{a},{b}\\n' for a, b in con.execute(f'SELECT * FROM {t}')))")],
                     terminal=[py("import sqlite3, zipfile\ncon = sqlite3.connect('data.db')\nwith zipfile.ZipFile('tables.zip', 'w') as z:\n"
                                  "  for (t,) in con.execute(\"SELECT name FROM sqlite_master WHERE type = 'table'\"):\n"
                                  "    z.writestr(t + '.csv', 'item,qty\\n' + ''.join(f'{a},{b}\\n' for a, b in con.execute(f'SELECT * FROM {t}')))")]),
   sample=lambda r: {"rows": _rows(r, 3), "tables": distinct(r, ["north", "south", "east", "west"], 2)}, apps=("sqlite", "csv"))
