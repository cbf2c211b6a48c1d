"""Pipelines (multi-application): extract data out of documents into tables and databases, and carry
data between files and the Tk desktop apps (read in the shell, act in the window, or the reverse)."""
from __future__ import annotations

from mage_jax.forge.skills.base import (CITIES, ITEMS, NAMES, WORDS, H, app, bash, capability, click, define, distinct, domain,
                                        fill, key, move, package, py, scroll, type_, wait)

domain("pipeline", "Multi-application pipelines: documents to data, data to databases, files to and from desktop apps")
capability("pipeline.extract", "Pull structured data out of documents into tables")
capability("pipeline.load", "Load data from documents and files into databases and workbooks")
capability("pipeline.desktop", "Carry data between files and the Tk apps")


def _rows(r, n=4):
  return [["item", "qty"]] + [[i, q] for i, q in zip(distinct(r, ITEMS, n), r.sample(range(1, 60), n))]


def _sample(r):
  return {"rows": _rows(r)}


def _q(rows, path="stock.db"):
  return {"type": "sqlite_query", "path": path, "query": "SELECT item, qty FROM stock ORDER BY item", "rows": sorted(rows[1:])}


_TO_DB = ("import sqlite3\ncon = sqlite3.connect('stock.db')\ncon.execute('CREATE TABLE stock (item TEXT, qty INTEGER)')\n"
          "con.executemany('INSERT INTO stock VALUES (?, ?)', [(r[0], int(r[1])) for r in rows{sl}])\ncon.commit()")
_CSV_OUT = "import csv\ncsv.writer(open('out.csv', 'w', newline='')).writerows(rows)"


def sk(id, desc, build, apps, sample=_sample, kind="terminal"):
  define(id, desc, sample, build, kind=kind, apps=apps)


# ---- extract -----------------------------------------------------------------------------------
sk("pipeline.extract.pdf_lines_to_csv", "Collect 'item: qty' lines spread over PDF pages into a CSV",
   lambda p: package("stock.pdf lists 'item: qty' lines over several pages. Write out.csv with header item,qty and one row "
                     "per line, in document order.",
                     [{"type": "pdf_text", "path": "stock.pdf", "pages": ["\n".join(f"{i}: {q}" for i, q in p["rows"][1:3]), "\n".join(f"{i}: {q}" for i, q in p["rows"][3:])]}],
                     {"type": "csv_equals", "path": "out.csv", "rows": p["rows"]},
                     [py("from pypdf import PdfReader\nrows = [['item', 'qty']] + [l.split(': ') for l in "
                         "PdfReader('stock.pdf').pages[0].extract_text().splitlines()]\n" + _CSV_OUT)],
                     terminal=[py("from pypdf import PdfReader\nrows = [['item', 'qty']] + [l.split(': ') for x in PdfReader('stock.pdf').pages "
                                  "for l in x.extract_text().splitlines() if ': ' in l]\n" + _CSV_OUT)]), ("pdf", "csv"))

sk("pipeline.extract.docx_table_to_csv", "Save the table of a document as a CSV file",
   lambda p: package("report.docx holds one table. Save its cells as out.csv (one CSV row per table row).",
                     [{"type": "docx", "path": "report.docx", "paragraphs": ["Stock report"], "tables": [p["rows"]]}],
                     {"type": "csv_equals", "path": "out.csv", "rows": p["rows"]},
                     [py("import docx\nrows = [[c.text for c in r.cells] for r in docx.Document('report.docx').tables[0].rows][1:]\n" + _CSV_OUT)],
                     terminal=[py("import docx\nrows = [[c.text for c in r.cells] for r in docx.Document('report.docx').tables[0].rows]\n" + _CSV_OUT)]),
   ("docx", "csv"))

sk("pipeline.extract.pptx_titles_to_docx", "List a deck's slide titles as document paragraphs",
   lambda p: package("Create outline.docx with one paragraph per slide title of deck.pptx, in slide order.",
                     [{"type": "pptx", "path": "deck.pptx", "slides": [{"title": t, "body": "tbd"} for t in p["titles"]]}],
                     {"type": "docx_paragraphs", "path": "outline.docx", "paragraphs": p["titles"]},
                     [py("import docx\nfrom pptx import Presentation\nd = docx.Document()\n"
                         "for s in Presentation('deck.pptx').slides: d.add_paragraph(s.placeholders[1].text)\nd.save('outline.docx')")],
                     terminal=[py("import docx\nfrom pptx import Presentation\nd = docx.Document()\n"
                                  "for s in Presentation('deck.pptx').slides: d.add_paragraph(s.shapes.title.text)\nd.save('outline.docx')")]),
   ("pptx", "docx"), sample=lambda r: {"titles": [f"{w.title()} review" for w in distinct(r, WORDS, 4)]})

sk("pipeline.extract.image_sizes_to_csv", "Tabulate the sizes of the images in a folder",
   lambda p: package("Write sizes.csv with header file,width,height and one row per .png in pics/, sorted by file name.",
                     [{"type": "png", "path": f"pics/{n}.png", "size": s, "fill": [200, 200, 200]} for n, s in p["pics"].items()],
                     {"type": "csv_equals", "path": "sizes.csv", "rows": [["file", "width", "height"]] + [
                         [f"{n}.png", *p["pics"][n]] for n in sorted(p["pics"])]},
                     [py("import os, csv\nfrom PIL import Image\nw = csv.writer(open('sizes.csv', 'w', newline=''))\nw.writerow(['file', 'width', 'height'])\n"
                         "for f in sorted(os.listdir('pics')): w.writerow([f, *Image.open('pics/' + f).size[::-1]])")],
                     terminal=[py("import os, csv\nfrom PIL import Image\nw = csv.writer(open('sizes.csv', 'w', newline=''))\nw.writerow(['file', 'width', 'height'])\n"
                                  "for f in sorted(os.listdir('pics')): w.writerow([f, *Image.open('pics/' + f).size])")]),
   ("png", "csv"), sample=lambda r: {"pics": {n: [r.randint(20, 90), r.randint(100, 160)] for n in distinct(r, WORDS, 3)}})

# ---- load --------------------------------------------------------------------------------------
sk("pipeline.load.xlsx_to_sqlite", "Load a worksheet into a new database table",
   lambda p: package("Create stock.db with a table stock(item TEXT, qty INTEGER) holding the data rows of data.xlsx.",
                     [{"type": "xlsx", "path": "data.xlsx", "sheets": {"Stock": p["rows"]}}], _q(p["rows"]),
                     [py("import openpyxl\nrows = list(openpyxl.load_workbook('data.xlsx').active.iter_rows(values_only=True))[1:-1]\n" + _TO_DB.format(sl=""))],
                     terminal=[py("import openpyxl\nrows = list(openpyxl.load_workbook('data.xlsx').active.iter_rows(values_only=True))\n" + _TO_DB.format(sl="[1:]"))]),
   ("xlsx", "sqlite"))

sk("pipeline.load.json_to_sqlite", "Load a JSON list of records into a new database table",
   lambda p: package("Create stock.db with a table stock(item TEXT, qty INTEGER) holding the records of stock.json.",
                     [{"type": "json", "path": "stock.json", "data": [{"item": i, "qty": q} for i, q in p["rows"][1:]]}], _q(p["rows"]),
                     [py("import json\nrows = [[d['item'], d['qty'] + 1] for d in json.load(open('stock.json'))]\n" + _TO_DB.format(sl=""))],
                     terminal=[py("import json\nrows = [[d['item'], d['qty']] for d in json.load(open('stock.json'))]\n" + _TO_DB.format(sl=""))]),
   ("json", "sqlite"))

sk("pipeline.load.pdf_to_xlsx", "Copy 'item: qty' lines of a PDF into a new workbook",
   lambda p: package("stock.pdf lists 'item: qty' lines. Create stock.xlsx whose first sheet has header item,qty and one row "
                     "per line (qty as a number), in order.",
                     [{"type": "pdf_text", "path": "stock.pdf", "pages": ["\n".join(f"{i}: {q}" for i, q in p["rows"][1:])]}],
                     {"type": "xlsx_rows", "path": "stock.xlsx", "rows": p["rows"]},
                     [py("import openpyxl\nfrom pypdf import PdfReader\nwb = openpyxl.Workbook(); ws = wb.active\n"
                         "for l in PdfReader('stock.pdf').pages[0].extract_text().splitlines(): ws.append(l.split(': '))\nwb.save('stock.xlsx')")],
                     terminal=[py("import openpyxl\nfrom pypdf import PdfReader\nwb = openpyxl.Workbook(); ws = wb.active\nws.append(['item', 'qty'])\n"
                                  "for l in PdfReader('stock.pdf').pages[0].extract_text().splitlines():\n  i, q = l.split(': '); ws.append([i, int(q)])\n"
                                  "wb.save('stock.xlsx')")]), ("pdf", "xlsx"))

# ---- desktop -----------------------------------------------------------------------------------
def _state(path, expected):
  return {"type": "app_state", "path": path, "expected": expected}


sk("pipeline.desktop.grid_then_sqlite", "Edit a grid window, save it, and load the saved CSV into a database",
   lambda p: package(f"In the grid set the qty of {p['rows'][1][0]} to {p['value']} and click Save (it writes grid.csv); then "
                     "load grid.csv into a new table stock(item TEXT, qty INTEGER) of stock.db.",
                     [app({"kind": "grid", "name": "grid", "out": f"{H}/grid.csv", "columns": ["item", "qty"], "rows": p["rows"][1:]})],
                     _q([p["rows"][0], [p["rows"][1][0], p["value"]]] + p["rows"][2:]),
                     [click("grid.save"), py("import csv\nrows = list(csv.reader(open('grid.csv')))\n" + _TO_DB.format(sl="[1:]"))],
                     hybrid=[click("grid.cell:0:1"), key("ctrl", "a"), key("shift", "End"), type_(str(p["value"])), click("grid.save"),
                             py("import csv\nrows = list(csv.reader(open('grid.csv')))\n" + _TO_DB.format(sl="[1:]"))]),
   ("tk", "sqlite"), sample=lambda r: {"rows": _rows(r, 3), "value": r.randint(60, 99)}, kind="hybrid")

sk("pipeline.desktop.form_from_sqlite", "Look a person up in a database and fill the form window with them",
   lambda p: package(f"people.db has a table people(name, email, city). Fill the form with the name, email and city of the "
                     f"person whose id is {p['id']}, then click Save.",
                     [{"type": "sqlite", "path": "people.db", "tables": {"people": {
                         "columns": ["id INTEGER", "name TEXT", "email TEXT", "city TEXT"],
                         "rows": [[i + 1, n, f"{n.lower()}@{w}.org", c] for i, (n, w, c) in enumerate(p["people"])]}}},
                      app({"kind": "form", "name": "form", "out": f"{H}/form.json", "fields": ["Name", "Email", "City"]})],
                     _state("form.json", _person(p, p["id"])),
                     [py("import sqlite3\nprint(sqlite3.connect('people.db').execute('SELECT * FROM people').fetchall())")]
                     + fill("form", _person(p, p["id"] % len(p["people"]) + 1)) + [click("form.save")],
                     hybrid=[py(f"import sqlite3\nprint(sqlite3.connect('people.db').execute('SELECT name, email, city FROM people WHERE id = {p['id']}').fetchone())")]
                     + fill("form", _person(p, p["id"])) + [click("form.save")]),
   ("sqlite", "tk"), sample=lambda r: {"people": [[n, w, c] for n, w, c in zip(distinct(r, NAMES, 4), distinct(r, WORDS, 4), distinct(r, CITIES, 4))],
                                       "id": r.randint(1, 4)}, kind="hybrid")


def _person(p, i):
  n, w, c = p["people"][i - 1]
  return {"Name": n, "Email": f"{n.lower()}@{w}.org", "City": c}


sk("pipeline.desktop.todo_from_docx", "Add a document's action items to the todo window",
   lambda p: package("Add the action items of minutes.docx (its paragraphs starting with 'ACTION: ', without that prefix) to "
                     "the todo window, in order, then click Save.",
                     [{"type": "docx", "path": "minutes.docx", "paragraphs": ["Minutes"] + [f"ACTION: {a}" for a in p["actions"]] + ["Next week: review"]},
                      app({"kind": "todo", "name": "todo", "out": f"{H}/todo.json", "items": []})],
                     _state("todo.json", {"items": [{"text": a, "done": False} for a in p["actions"]]}),
                     [py("import docx\nprint([x.text for x in docx.Document('minutes.docx').paragraphs])")]
                     + [click("todo.entry"), type_(p["actions"][0]), click("todo.add"), click("todo.save")],
                     hybrid=[py("import docx\nprint([x.text for x in docx.Document('minutes.docx').paragraphs])")]
                     + [c for a in p["actions"] for c in (click("todo.entry"), type_(a), click("todo.add"))] + [click("todo.save")]),
   ("docx", "tk"), sample=lambda r: {"actions": [f"{v} {w}" for v, w in zip(["send", "book"], distinct(r, WORDS, 2))]}, kind="hybrid")

sk("pipeline.desktop.choose_max_from_xlsx", "Choose in a list window the item a workbook ranks highest",
   lambda p: package("In the list window select the item with the highest qty in stock.xlsx and click Choose.",
                     [{"type": "xlsx", "path": "stock.xlsx", "sheets": {"Stock": p["rows"]}},
                      app({"kind": "picker", "name": "picker", "out": f"{H}/choice.json", "items": sorted(ITEMS)})],
                     _state("choice.json", {"chosen": max(p["rows"][1:], key=lambda r: r[1])[0]}),
                     [click(f"picker.item:{min(p['rows'][1:], key=lambda r: r[1])[0]}"), click("picker.choose")],
                     hybrid=[py("import openpyxl\nprint(max(list(openpyxl.load_workbook('stock.xlsx').active.iter_rows(values_only=True))[1:], key=lambda r: r[1]))"),
                             click(f"picker.item:{max(p['rows'][1:], key=lambda r: r[1])[0]}"), click("picker.choose")]),
   ("xlsx", "tk"), kind="hybrid",
   # the workbook's items are among the first 7 rows of the list (8 show): a spray that selects every
   # visible row and then clicks Choose picks the 8th, never the answer
   sample=lambda r: {"rows": [["item", "qty"]] + [[i, q] for i, q in zip(r.sample(sorted(ITEMS)[:7], 4), r.sample(range(1, 60), 4))]})

sk("pipeline.desktop.button_from_pdf", "Click the button a PDF names",
   lambda p: package("order.pdf says which courier to use. Click that courier's button.",
                     [{"type": "pdf_text", "path": "order.pdf", "pages": [f"Order {p['no']}\nCourier: {p['couriers'][p['pick']]}"]},
                      app({"kind": "buttons", "name": "buttons", "out": f"{H}/clicked.json", "buttons": p["couriers"], "prompt": "Courier"})],
                     _state("clicked.json", {"clicked": p["couriers"][p["pick"]]}),
                     [click(f"buttons.button:{p['couriers'][p['pick'] - 1]}")],
                     hybrid=[py("from pypdf import PdfReader\nprint(PdfReader('order.pdf').pages[0].extract_text())"),
                             click(f"buttons.button:{p['couriers'][p['pick']]}")]),
   ("pdf", "tk"), sample=lambda r: {"couriers": [w.title() for w in distinct(r, WORDS, 3)], "pick": r.randint(0, 2), "no": r.randint(100, 999)},
   kind="hybrid")

sk("pipeline.desktop.editor_to_docx", "Save a text editor's content and turn it into a document",
   lambda p: package("Save the editor's text with Ctrl+S (it writes draft.txt), then create draft.docx with one paragraph per "
                     "line of draft.txt.", [app({"kind": "editor", "name": "editor", "out": f"{H}/draft.txt", "content": "\n".join(p["lines"])})],
                     {"type": "docx_paragraphs", "path": "draft.docx", "paragraphs": p["lines"]},
                     [click("editor.text"), key("ctrl", "s"), py("import docx\nd = docx.Document()\nd.add_paragraph(open('draft.txt').read().split(chr(10))[0])\nd.save('draft.docx')")],
                     hybrid=[click("editor.text"), key("ctrl", "s"),
                             py("import docx\nd = docx.Document()\nfor l in open('draft.txt').read().splitlines(): d.add_paragraph(l)\nd.save('draft.docx')")]),
   ("tk", "docx"), sample=lambda r: {"lines": [f"{n} met {w}" for n, w in zip(distinct(r, NAMES, 3), distinct(r, WORDS, 3))]}, kind="hybrid")

sk("pipeline.desktop.rename_from_csv", "Rename files as a CSV mapping says, in the renamer window or the shell",
   lambda p: package("renames.csv maps old to new file names (header old,new). Rename the files in docs/ accordingly.",
                     [{"type": "csv", "path": "renames.csv", "rows": [["old", "new"]] + [list(x) for x in p["map"].items()]}]
                     + [{"type": "text", "path": f"docs/{a}", "content": f"v{i}"} for i, a in enumerate(p["map"])]
                     + [app({"kind": "renamer", "name": "renamer", "directory": f"{H}/docs"})],
                     {"type": "dir_listing", "path": "docs", "equals": list(p["map"].values())},
                     [bash("cat renames.csv"), click(f"renamer.file:{next(iter(p['map']))}"), click("renamer.entry"),
                      type_(next(iter(p["map"].values()))), click("renamer.rename")],
                     hybrid=[bash("cat renames.csv")] + [c for a, b in p["map"].items() for c in (
                         click(f"renamer.file:{a}"), click("renamer.entry"), type_(b), click("renamer.rename"), wait(0.3))],
                     terminal=[py("import csv, os\nfor r in list(csv.reader(open('renames.csv')))[1:]: os.rename('docs/' + r[0], 'docs/' + r[1])")]),
   ("csv", "tk"), sample=lambda r: {"map": {f"{a}.txt": f"{b}.txt" for a, b in zip(distinct(r, WORDS, 2), distinct(r, NAMES, 2))}},
   kind="hybrid")

sk("pipeline.desktop.counter_from_sqlite", "Set a counter window to a number counted in a database",
   lambda p: package("Set the counter window to the number of rows in the stock table of stock.db (use + and -), then click Save.",
                     [{"type": "sqlite", "path": "stock.db", "tables": {"stock": {"columns": ["item TEXT", "qty INTEGER"], "rows": p["rows"][1:]}}},
                      app({"kind": "counter", "name": "counter", "out": f"{H}/counter.json", "start": 0})],
                     _state("counter.json", {"value": len(p["rows"]) - 1}),
                     [click("counter.plus")] * (len(p["rows"]) - 2) + [click("counter.save")],
                     hybrid=[py("import sqlite3\nprint(sqlite3.connect('stock.db').execute('SELECT COUNT(*) FROM stock').fetchone()[0])")]
                     + [click("counter.plus")] * (len(p["rows"]) - 1) + [click("counter.save")]),
   ("sqlite", "tk"), sample=lambda r: {"rows": _rows(r, r.randint(3, 6))}, kind="hybrid")

sk("pipeline.desktop.scroll_to_csv_item", "Find in a long list window the item a CSV marks and choose it",
   lambda p: package("flags.csv marks exactly one item with flag=yes. Scroll the list window to that item, select it and click Choose.",
                     [{"type": "csv", "path": "flags.csv", "rows": [["item", "flag"]] + [[it, "yes" if i == p["pick"] else "no"]
                                                                                        for i, it in enumerate(p["items"])]},
                      app({"kind": "picker", "name": "picker", "out": f"{H}/choice.json", "items": p["items"]})],
                     _state("choice.json", {"chosen": p["items"][p["pick"]]}),
                     [bash("grep yes flags.csv"), move("picker.list"), scroll(-1500), wait(0.5),
                      click(f"picker.item:{p['items'][p['pick'] - 1]}"), click("picker.choose")],
                     hybrid=[bash("grep yes flags.csv"), move("picker.list"), scroll(-1500), wait(0.5),
                             click(f"picker.item:{p['items'][p['pick']]}"), click("picker.choose")]),
   ("csv", "tk"), sample=lambda r: {"items": [f"{w}-{i:02d}" for i, w in enumerate(r.choices(WORDS, k=40))], "pick": r.randint(34, 38)},
   kind="hybrid")
