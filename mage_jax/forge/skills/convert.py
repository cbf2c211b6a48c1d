"""Conversions (multi-application): carry content from one file format or app into another."""
from __future__ import annotations

from mage_jax.forge.skills.base import COLORS, ITEMS, NAMES, WORDS, H, app, bash, capability, click, define, distinct, domain, key, package, py, type_

domain("convert", "Multi-application conversions: documents, data files, images and app output into other formats")
capability("convert.office", "Between documents, decks and PDFs")
capability("convert.data", "Between JSON, CSV, logs, databases and workbooks")
capability("convert.image", "Between images, PDFs and tables")
capability("convert.desktop", "From a Tk app's saved output into a file format")


def _titles(r, n=3):
  return [f"{w.title()} {n_}" for w, n_ in zip(distinct(r, WORDS, n), distinct(r, NAMES, n))]


def sk(id, desc, build, sample, apps, kind="terminal"):
  define(id, desc, sample, build, kind=kind, apps=apps)


_DOCX_PARAS = "import docx\nparas = [x.text for x in docx.Document('in.docx').paragraphs if x.text.strip()]\n"
_PPTX_TITLES = "from pptx import Presentation\ntitles = [s.shapes.title.text for s in Presentation('in.pptx').slides]\n"
_PDF_OUT = "from fpdf import FPDF\nf = FPDF(); f.set_font('Helvetica', size=12)\n"

# ---- office ------------------------------------------------------------------------------------
sk("convert.office.docx_to_pptx", "Make one slide per document paragraph, titled with it",
   lambda p: package("Create out.pptx with one slide per paragraph of in.docx, in order, each slide titled with the paragraph text.",
                     [{"type": "docx", "path": "in.docx", "paragraphs": p["titles"]}],
                     {"type": "pptx_titles", "path": "out.pptx", "titles": p["titles"]},
                     [py(_DOCX_PARAS + "from pptx import Presentation\np = Presentation()\nfor t in paras[1:]: "
                         "p.slides.add_slide(p.slide_layouts[1]).shapes.title.text = t\np.save('out.pptx')")],
                     terminal=[py(_DOCX_PARAS + "from pptx import Presentation\np = Presentation()\nfor t in paras: "
                                  "p.slides.add_slide(p.slide_layouts[1]).shapes.title.text = t\np.save('out.pptx')")]),
   lambda r: {"titles": _titles(r)}, ("docx", "pptx"))

sk("convert.office.pptx_to_pdf", "Make one PDF page per slide holding its title",
   lambda p: package("Create out.pdf with one page per slide of in.pptx, in order, each page holding the slide's title.",
                     [{"type": "pptx", "path": "in.pptx", "slides": [{"title": t} for t in p["titles"]]}],
                     {"type": "pdf_page_texts", "path": "out.pdf", "pages": p["titles"]},
                     [py(_PPTX_TITLES + _PDF_OUT + "for t in titles[::-1]:\n  f.add_page(); f.cell(0, 8, t)\nf.output('out.pdf')")],
                     terminal=[py(_PPTX_TITLES + _PDF_OUT + "for t in titles:\n  f.add_page(); f.cell(0, 8, t)\nf.output('out.pdf')")]),
   lambda r: {"titles": _titles(r)}, ("pptx", "pdf"))

sk("convert.office.pdf_to_docx", "Make one document paragraph per PDF page's text",
   lambda p: package("Create out.docx with one paragraph per page of in.pdf, in order, holding that page's text.",
                     [{"type": "pdf_text", "path": "in.pdf", "pages": p["titles"]}],
                     {"type": "docx_paragraphs", "path": "out.docx", "paragraphs": p["titles"]},
                     [py("import docx\nfrom pypdf import PdfReader\nd = docx.Document()\n"
                         "d.add_paragraph(' '.join(x.extract_text() for x in PdfReader('in.pdf').pages))\nd.save('out.docx')")],
                     terminal=[py("import docx\nfrom pypdf import PdfReader\nd = docx.Document()\n"
                                  "for x in PdfReader('in.pdf').pages: d.add_paragraph(x.extract_text().strip())\nd.save('out.docx')")]),
   lambda r: {"titles": _titles(r)}, ("pdf", "docx"))

sk("convert.office.csv_to_bullets", "Write a CSV column as a bulleted list in a document",
   lambda p: package("Create list.docx with one paragraph per data row of team.csv holding the name column, each in the "
                     "List Bullet style.", [{"type": "csv", "path": "team.csv", "rows": [["name", "role"]] + [[n, "dev"] for n in p["names"]]}],
                     {"type": "all", "checks": [{"type": "docx_paragraphs", "path": "list.docx", "paragraphs": p["names"]}]
                      + [{"type": "docx_style", "path": "list.docx", "text": n, "style": "List Bullet"} for n in p["names"]]},
                     [py("import csv, docx\nd = docx.Document()\nfor r in list(csv.reader(open('team.csv')))[1:]: d.add_paragraph(r[0])\nd.save('list.docx')")],
                     terminal=[py("import csv, docx\nd = docx.Document()\nfor r in list(csv.reader(open('team.csv')))[1:]: "
                                  "d.add_paragraph(r[0], style='List Bullet')\nd.save('list.docx')")]),
   lambda r: {"names": distinct(r, NAMES, 3)}, ("csv", "docx"))

# ---- data --------------------------------------------------------------------------------------
sk("convert.data.nested_json_to_csv", "Flatten nested JSON records into CSV columns",
   lambda p: package("people.json is a list of {name, address: {city, zip}}. Write people.csv with header name,city,zip and one row "
                     "per record, in order.", [{"type": "json", "path": "people.json", "data": [
                         {"name": n, "address": {"city": c, "zip": z}} for n, c, z in p["rows"]]}],
                     {"type": "csv_equals", "path": "people.csv", "rows": [["name", "city", "zip"]] + p["rows"]},
                     [py("import csv, json\nw = csv.writer(open('people.csv', 'w', newline=''))\nw.writerow(['name', 'city', 'zip'])\n"
                         "for d in json.load(open('people.json')): w.writerow([d['name'], d['address']['zip'], d['address']['city']])")],
                     terminal=[py("import csv, json\nw = csv.writer(open('people.csv', 'w', newline=''))\nw.writerow(['name', 'city', 'zip'])\n"
                                  "for d in json.load(open('people.json')): w.writerow([d['name'], d['address']['city'], d['address']['zip']])")]),
   lambda r: {"rows": [[n, w.title(), str(r.randint(10000, 99999))] for n, w in zip(distinct(r, NAMES, 3), distinct(r, WORDS, 3))]},
   ("json", "csv"))

sk("convert.data.log_to_sqlite", "Parse log lines into a database table",
   lambda p: package("app.log has lines 'LEVEL user action'. Create events.db with a table events(level TEXT, user TEXT, action TEXT) "
                     "holding one row per line.", [{"type": "text", "path": "app.log", "content": "".join(" ".join(x) + "\n" for x in p["rows"])}],
                     {"type": "sqlite_query", "path": "events.db", "query": "SELECT level, user, action FROM events ORDER BY rowid", "rows": p["rows"]},
                     [py("import sqlite3\ncon = sqlite3.connect('events.db')\ncon.execute('CREATE TABLE events (level TEXT, user TEXT, action TEXT)')\n"
                         "con.executemany('INSERT INTO events VALUES (?, ?, ?)', [l.split() for l in open('app.log')][:-1])\ncon.commit()")],
                     terminal=[py("import sqlite3\ncon = sqlite3.connect('events.db')\ncon.execute('CREATE TABLE events (level TEXT, user TEXT, action TEXT)')\n"
                                  "con.executemany('INSERT INTO events VALUES (?, ?, ?)', [l.split() for l in open('app.log')])\ncon.commit()")]),
   lambda r: {"rows": [[r.choice(["INFO", "WARN"]), n.lower(), r.choice(["login", "logout", "upload"])] for n in distinct(r, NAMES, 4)]},
   ("text", "sqlite"))

sk("convert.data.sqlite_tables_to_sheets", "Copy every database table into its own worksheet",
   lambda p: package("Create db.xlsx with one sheet per table of shop.db, named after the table (tables in name order), each "
                     "holding the table's rows under a header of its column names.",
                     [{"type": "sqlite", "path": "shop.db", "tables": {t: {"columns": ["item TEXT", "qty INTEGER"], "rows": rows}
                                                                      for t, rows in p["tables"].items()}}],
                     {"type": "all", "checks": [{"type": "xlsx_sheetnames", "path": "db.xlsx", "names": sorted(p["tables"])}]
                      + [{"type": "xlsx_rows", "path": "db.xlsx", "sheet": t, "rows": [["item", "qty"]] + rows} for t, rows in p["tables"].items()]},
                     [py("import sqlite3, openpyxl\ncon = sqlite3.connect('shop.db')\nwb = openpyxl.Workbook(); wb.remove(wb.active)\n"
                         "for (t,) in con.execute(\"SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name\"):\n"
                         "  ws = wb.create_sheet(t)\n  for r in con.execute(f'SELECT * FROM {t}'): ws.append(list(r))\nwb.save('db.xlsx')")],
                     terminal=[py("import sqlite3, openpyxl\ncon = sqlite3.connect('shop.db')\nwb = openpyxl.Workbook(); wb.remove(wb.active)\n"
                                  "for (t,) in con.execute(\"SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name\"):\n"
                                  "  ws = wb.create_sheet(t); ws.append(['item', 'qty'])\n  for r in con.execute(f'SELECT * FROM {t}'): ws.append(list(r))\n"
                                  "wb.save('db.xlsx')")]),
   lambda r: {"tables": {t: [[i, r.randint(1, 9)] for i in distinct(r, ITEMS, 2)] for t in distinct(r, ["north", "south", "east"], 2)}},
   ("sqlite", "xlsx"))

sk("convert.data.zip_of_csv_to_sqlite", "Load every CSV inside a zip archive into database tables",
   lambda p: package("data.zip holds CSV files (header item,qty). Create data.db with one table per file, named after the file "
                     "without .csv, columns item TEXT and qty INTEGER.",
                     [{"type": "archive", "path": "data.zip", "format": "zip",
                       "files": {f"{t}.csv": "item,qty\n" + "".join(f"{i},{q}\n" for i, q in rows) for t, rows in p["tables"].items()}}],
                     {"type": "all", "checks": [{"type": "sqlite_query", "path": "data.db", "query": f"SELECT item, qty FROM {t} ORDER BY rowid",
                                                 "rows": rows} for t, rows in p["tables"].items()]},
                     [py("import csv, io, sqlite3, zipfile\ncon = sqlite3.connect('data.db')\nz = zipfile.ZipFile('data.zip')\n"
                         "for n in z.namelist()[:1]:\n  t = n[:-4]; con.execute(f'CREATE TABLE {t} (item TEXT, qty INTEGER)')\n"
                         "  con.executemany(f'INSERT INTO {t} VALUES (?, ?)', list(csv.reader(io.StringIO(z.read(n).decode())))[1:])\ncon.commit()")],
                     terminal=[py("import csv, io, sqlite3, zipfile\ncon = sqlite3.connect('data.db')\nz = zipfile.ZipFile('data.zip')\n"
                                  "for n in z.namelist():\n  t = n[:-4]; con.execute(f'CREATE TABLE {t} (item TEXT, qty INTEGER)')\n"
                                  "  con.executemany(f'INSERT INTO {t} VALUES (?, ?)', list(csv.reader(io.StringIO(z.read(n).decode())))[1:])\ncon.commit()")]),
   lambda r: {"tables": {t: [[i, r.randint(1, 9)] for i in distinct(r, ITEMS, 3)] for t in distinct(r, ["spring", "summer", "autumn"], 2)}},
   ("zip", "sqlite"))

# ---- image -------------------------------------------------------------------------------------
sk("convert.image.pngs_to_pdf", "Bundle a folder of images into a PDF, one page each",
   lambda p: package("Combine the .png files of scans/ (in file-name order) into scans.pdf, one image per page.",
                     [{"type": "png", "path": f"scans/{n}.png", "size": [120, 160], "fill": COLORS[c]} for n, c in p["scans"].items()],
                     {"type": "pdf_pages", "path": "scans.pdf", "pages": len(p["scans"])},
                     [py("from PIL import Image\nImage.open(sorted(__import__('glob').glob('scans/*.png'))[0]).convert('RGB').save('scans.pdf')")],
                     terminal=[py("import glob\nfrom PIL import Image\nims = [Image.open(f).convert('RGB') for f in sorted(glob.glob('scans/*.png'))]\n"
                                  "ims[0].save('scans.pdf', save_all=True, append_images=ims[1:])")]),
   lambda r: {"scans": {f"page_{i}": c for i, c in enumerate(r.choices(list(COLORS), k=r.randint(2, 4)))}}, ("png", "pdf"))

sk("convert.image.swatches_from_csv", "Paint a strip of colour swatches listed in a CSV",
   lambda p: package("palette.csv lists colours as name,r,g,b. Create swatches.png, 50 pixels high and 50 pixels wide per colour, "
                     "painting colour i (in file order) in the i-th 50-pixel column.",
                     [{"type": "csv", "path": "palette.csv", "rows": [["name", "r", "g", "b"]] + [[c, *COLORS[c]] for c in p["colors"]]}],
                     {"type": "all", "checks": [{"type": "image_size", "path": "swatches.png", "size": [50 * len(p["colors"]), 50]},
                                                {"type": "image_pixels", "path": "swatches.png",
                                                 "points": [[50 * i + 25, 25, COLORS[c]] for i, c in enumerate(p["colors"])]}]},
                     [py("import csv\nfrom PIL import Image\nrows = list(csv.reader(open('palette.csv')))[1:]\nim = Image.new('RGB', (50 * len(rows), 50))\n"
                         "for i, r in enumerate(rows): im.paste(tuple(map(int, r[1:])), (50 * i, 0, 50 * i + 50, 25))\nim.save('swatches.png')")],
                     terminal=[py("import csv\nfrom PIL import Image\nrows = list(csv.reader(open('palette.csv')))[1:]\nim = Image.new('RGB', (50 * len(rows), 50))\n"
                                  "for i, r in enumerate(rows): im.paste(tuple(map(int, r[1:])), (50 * i, 0, 50 * i + 50, 50))\nim.save('swatches.png')")]),
   lambda r: {"colors": distinct(r, list(COLORS), 3)}, ("csv", "png"))

sk("convert.image.pdf_facts_to_json", "Record a PDF's page count and title in a JSON file",
   lambda p: package("Write facts.json: {\"pages\": <page count of report.pdf>, \"title\": <its metadata title>}.",
                     [{"type": "pdf_text", "path": "report.pdf", "pages": [f"part {i}" for i in range(p["n"])], "title": p["title"]}],
                     {"type": "json_equals", "path": "facts.json", "expected": {"pages": p["n"], "title": p["title"]}},
                     [py("import json\nfrom pypdf import PdfReader\nr = PdfReader('report.pdf')\njson.dump({'pages': len(r.pages) - 1, 'title': r.metadata.title}, open('facts.json', 'w'))")],
                     terminal=[py("import json\nfrom pypdf import PdfReader\nr = PdfReader('report.pdf')\njson.dump({'pages': len(r.pages), 'title': r.metadata.title}, open('facts.json', 'w'))")]),
   lambda r: {"n": r.randint(2, 6), "title": f"{r.choice(WORDS).title()} audit"}, ("pdf", "json"))

# ---- desktop -----------------------------------------------------------------------------------
sk("convert.desktop.grid_to_xlsx", "Edit a grid window, save it, and convert its CSV to a workbook",
   lambda p: package(f"In the grid set the qty of {p['rows'][0][0]} to {p['value']} and click Save (it writes grid.csv), then "
                     "convert grid.csv to grid.xlsx (same cells, first sheet, numbers as numbers).",
                     [app({"kind": "grid", "name": "grid", "out": f"{H}/grid.csv", "columns": ["item", "qty"], "rows": p["rows"]})],
                     {"type": "xlsx_rows", "path": "grid.xlsx", "rows": [["item", "qty"], [p["rows"][0][0], p["value"]]] + p["rows"][1:]},
                     [click("grid.save"), py("import pandas as pd\npd.read_csv('grid.csv').to_excel('grid.xlsx', index=False)")],
                     hybrid=[click("grid.cell:0:1"), key("ctrl", "a"), key("shift", "End"), type_(str(p["value"])), click("grid.save"),
                             py("import pandas as pd\npd.read_csv('grid.csv').to_excel('grid.xlsx', index=False)")]),
   lambda r: {"rows": [[i, r.randint(1, 9)] for i in distinct(r, ITEMS, 3)], "value": r.randint(50, 99)}, ("tk", "xlsx"), kind="hybrid")

sk("convert.desktop.todo_to_csv", "Add items in the todo window, save, and export the list to CSV",
   lambda p: package(f"Add {p['new']} to the todo window and click Save (it writes todo.json), then write todo.csv with header "
                     "text,done and one row per saved item (done as true/false).",
                     [app({"kind": "todo", "name": "todo", "out": f"{H}/todo.json", "items": p["items"]})],
                     {"type": "csv_equals", "path": "todo.csv", "rows": [["text", "done"]] + [[t, "false"] for t in p["items"] + [p["new"]]]},
                     [click("todo.save"), py("import csv, json\nw = csv.writer(open('todo.csv', 'w', newline=''))\nw.writerow(['text', 'done'])\n"
                                             "for i in json.load(open('todo.json'))['items']: w.writerow([i['text'], str(i['done']).lower()])")],
                     hybrid=[click("todo.entry"), type_(p["new"]), click("todo.add"), click("todo.save"),
                             py("import csv, json\nw = csv.writer(open('todo.csv', 'w', newline=''))\nw.writerow(['text', 'done'])\n"
                                "for i in json.load(open('todo.json'))['items']: w.writerow([i['text'], str(i['done']).lower()])")]),
   lambda r: {"items": [f"check {w}" for w in distinct(r, WORDS, 2)], "new": f"visit {r.choice(NAMES)}"}, ("tk", "csv"), kind="hybrid")

sk("convert.desktop.counter_to_text_report", "Step a counter window, save, and report its value in a text file",
   lambda p: package(f"Click + on the counter {p['n']} times and Save (it writes counter.json); then write report.txt containing "
                     "'count=N' with the saved value N.", [app({"kind": "counter", "name": "counter", "out": f"{H}/counter.json", "start": p["start"]})],
                     {"type": "file_text", "path": "report.txt", "equals": f"count={p['start'] + p['n']}"},
                     [click("counter.plus"), click("counter.save"), bash("python -c \"import json; print('count=%d' % json.load(open('counter.json'))['value'])\" > report.txt")],
                     hybrid=[click("counter.plus")] * p["n"] + [click("counter.save"),
                                                               bash("python -c \"import json; print('count=%d' % json.load(open('counter.json'))['value'])\" > report.txt")]),
   lambda r: {"n": r.randint(2, 5), "start": r.randint(10, 20)}, ("tk", "text"), kind="hybrid")
