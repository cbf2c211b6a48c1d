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

# ---- text renderings and structured exports ------------------------------------------------------
capability("convert.render", "Render tables and documents as Markdown, HTML or JSON text")


def _stock(r, n=3):
  return [["item", "qty"]] + [[i, q] for i, q in zip(distinct(r, ITEMS, n), r.sample(range(1, 60), n))]


sk("convert.render.xlsx_to_markdown", "Render a worksheet as a Markdown table",
   lambda p: package("Write stock.md: the first sheet of stock.xlsx as a Markdown table, one line per row, cells separated "
                     "by ' | ' between leading '| ' and trailing ' |', with a '|---|---|' line after the header.",
                     [{"type": "xlsx", "path": "stock.xlsx", "sheets": {"Stock": p["rows"]}}],
                     {"type": "file_text", "path": "stock.md", "equals": "\n".join(
                         ["| item | qty |", "|---|---|"] + [f"| {i} | {q} |" for i, q in p["rows"][1:]])},
                     [py("import openpyxl\nrows = list(openpyxl.load_workbook('stock.xlsx').active.iter_rows(values_only=True))\n"
                         "open('stock.md', 'w').write('\\n'.join('| ' + ' | '.join(map(str, r)) + ' |' for r in rows))")],
                     terminal=[py("import openpyxl\nrows = list(openpyxl.load_workbook('stock.xlsx').active.iter_rows(values_only=True))\n"
                                  "lines = ['| ' + ' | '.join(map(str, r)) + ' |' for r in rows]\nlines.insert(1, '|---|---|')\n"
                                  "open('stock.md', 'w').write('\\n'.join(lines))")]),
   lambda r: {"rows": _stock(r)}, ("xlsx", "text"))

sk("convert.render.csv_to_html_rows", "Render CSV data rows as HTML table rows",
   lambda p: package("Write rows.html with one line per data row of stock.csv (header skipped): "
                     "<tr><td>ITEM</td><td>QTY</td></tr>.", [{"type": "csv", "path": "stock.csv", "rows": p["rows"]}],
                     {"type": "file_text", "path": "rows.html", "equals": "\n".join(
                         f"<tr><td>{i}</td><td>{q}</td></tr>" for i, q in p["rows"][1:])},
                     [bash("awk -F, '{print \"<tr><td>\" $1 \"</td><td>\" $2 \"</td></tr>\"}' stock.csv > rows.html")],
                     terminal=[bash("tail -n +2 stock.csv | awk -F, '{print \"<tr><td>\" $1 \"</td><td>\" $2 \"</td></tr>\"}' > rows.html")]),
   lambda r: {"rows": _stock(r, 4)}, ("csv", "text"))

sk("convert.render.docx_to_markdown", "Render a document as Markdown (headings with #)",
   lambda p: package("Write doc.md from doc.docx: one line per non-empty paragraph, Heading 1 paragraphs prefixed with '# '.",
                     [{"type": "docx", "path": "doc.docx", "paragraphs": [x for h, t in zip(p["heads"], p["texts"])
                                                                         for x in ({"text": h, "style": "Heading 1"}, t)]}],
                     {"type": "file_text", "path": "doc.md", "equals": "\n".join(x for h, t in zip(p["heads"], p["texts"]) for x in (f"# {h}", t))},
                     [py("import docx\nopen('doc.md', 'w').write('\\n'.join(x.text for x in docx.Document('doc.docx').paragraphs if x.text.strip()))")],
                     terminal=[py("import docx\nopen('doc.md', 'w').write('\\n'.join(('# ' if x.style.name == 'Heading 1' else '') + x.text "
                                  "for x in docx.Document('doc.docx').paragraphs if x.text.strip()))")]),
   lambda r: {"heads": [f"About {w}" for w in distinct(r, WORDS, 2)], "texts": [f"{n} wrote this." for n in distinct(r, NAMES, 2)]},
   ("docx", "text"))

sk("convert.render.pptx_to_json", "Export a deck's slide titles and bodies as JSON",
   lambda p: package("Write deck.json: a JSON list with one {\"title\", \"body\"} object per slide of deck.pptx, in order.",
                     [{"type": "pptx", "path": "deck.pptx", "slides": p["slides"]}],
                     {"type": "json_equals", "path": "deck.json", "expected": p["slides"]},
                     [py("import json\nfrom pptx import Presentation\njson.dump([{'title': s.shapes.title.text} for s in Presentation('deck.pptx').slides], "
                         "open('deck.json', 'w'))")],
                     terminal=[py("import json\nfrom pptx import Presentation\njson.dump([{'title': s.shapes.title.text, 'body': s.placeholders[1].text} "
                                  "for s in Presentation('deck.pptx').slides], open('deck.json', 'w'))")]),
   lambda r: {"slides": [{"title": t, "body": f"owner {n}"} for t, n in zip(_titles(r), distinct(r, NAMES, 3))]}, ("pptx", "json"))

sk("convert.render.sqlite_schema_to_json", "Describe a database's tables and columns as JSON",
   lambda p: package("Write schema.json: an object mapping each table name of app.db to the list of its column names, in order.",
                     [{"type": "sqlite", "path": "app.db", "tables": {t: {"columns": [f"{c} TEXT" for c in cols], "rows": []}
                                                                     for t, cols in p["tables"].items()}}],
                     {"type": "json_equals", "path": "schema.json", "expected": p["tables"]},
                     [py("import json, sqlite3\ncon = sqlite3.connect('app.db')\njson.dump({t: [c[1] for c in con.execute(f'PRAGMA table_info({t})')][:1] "
                         "for (t,) in con.execute(\"SELECT name FROM sqlite_master WHERE type = 'table'\")}, open('schema.json', 'w'))")],
                     terminal=[py("import json, sqlite3\ncon = sqlite3.connect('app.db')\njson.dump({t: [c[1] for c in con.execute(f'PRAGMA table_info({t})')] "
                                  "for (t,) in con.execute(\"SELECT name FROM sqlite_master WHERE type = 'table'\")}, open('schema.json', 'w'))")]),
   lambda r: {"tables": {t: distinct(r, ["name", "email", "city", "zip", "phone", "note"], r.randint(2, 4))
                         for t in distinct(r, ["users", "orders", "teams", "tags"], 2)}}, ("sqlite", "json"))

sk("convert.render.json_to_xlsx", "Write JSON records into a worksheet with a header row",
   lambda p: package("Create stock.xlsx whose first sheet has header item,qty and one row per record of stock.json, in order.",
                     [{"type": "json", "path": "stock.json", "data": [{"item": i, "qty": q} for i, q in p["rows"][1:]]}],
                     {"type": "xlsx_rows", "path": "stock.xlsx", "rows": p["rows"]},
                     [py("import json, openpyxl\nwb = openpyxl.Workbook()\nfor d in json.load(open('stock.json')): wb.active.append([d['item'], d['qty']])\n"
                         "wb.save('stock.xlsx')")],
                     terminal=[py("import json, openpyxl\nwb = openpyxl.Workbook(); wb.active.append(['item', 'qty'])\n"
                                  "for d in json.load(open('stock.json')): wb.active.append([d['item'], d['qty']])\nwb.save('stock.xlsx')")]),
   lambda r: {"rows": _stock(r, 4)}, ("json", "xlsx"))

sk("convert.render.docx_tables_to_sheets", "Copy each table of a document into its own worksheet",
   lambda p: package("Create tables.xlsx with one sheet per table of doc.docx, named Table1, Table2, ... in order, each holding "
                     "that table's cells (numbers as numbers).",
                     [{"type": "docx", "path": "doc.docx", "paragraphs": ["Tables"], "tables": p["tables"]}],
                     {"type": "all", "checks": [{"type": "xlsx_sheetnames", "path": "tables.xlsx", "names": [f"Table{i + 1}" for i in range(len(p["tables"]))]}]
                      + [{"type": "xlsx_rows", "path": "tables.xlsx", "sheet": f"Table{i + 1}", "rows": t} for i, t in enumerate(p["tables"])]},
                     [py("import docx, openpyxl\nwb = openpyxl.Workbook(); wb.remove(wb.active)\nfor i, t in enumerate(docx.Document('doc.docx').tables):\n"
                         "  ws = wb.create_sheet(f'Table{i + 1}')\n  for r in t.rows[1:]: ws.append([c.text for c in r.cells])\nwb.save('tables.xlsx')")],
                     terminal=[py("import docx, openpyxl\nwb = openpyxl.Workbook(); wb.remove(wb.active)\nfor i, t in enumerate(docx.Document('doc.docx').tables):\n"
                                  "  ws = wb.create_sheet(f'Table{i + 1}')\n  for r in t.rows: ws.append([int(c.text) if c.text.isdigit() else c.text for c in r.cells])\n"
                                  "wb.save('tables.xlsx')")]),
   lambda r: {"tables": [_stock(r, 2), _stock(r, 3)]}, ("docx", "xlsx"))

sk("convert.render.json_shapes_to_png", "Draw the rectangles a JSON file describes onto a new image",
   lambda p: package("shapes.json lists rectangles {x0, y0, x1, y1, color} (x1, y1 excluded) and a canvas size. Draw them, in "
                     "order, on a white canvas of that size and save drawing.png (color is [r, g, b]).",
                     [{"type": "json", "path": "shapes.json", "data": {"size": [200, 120], "rects": p["rects"]}}],
                     {"type": "all", "checks": [{"type": "image_size", "path": "drawing.png", "size": [200, 120]},
                                                {"type": "image_pixels", "path": "drawing.png", "points": [
                                                    [r["x0"] + 2, r["y0"] + 2, r["color"]] for r in p["rects"]] + [[199, 119, [255, 255, 255]]]}]},
                     [py("import json\nfrom PIL import Image, ImageDraw\ns = json.load(open('shapes.json'))\nim = Image.new('RGB', tuple(s['size']), 'white')\n"
                         "d = ImageDraw.Draw(im)\nfor r in s['rects'][:1]: d.rectangle([r['x0'], r['y0'], r['x1'] - 1, r['y1'] - 1], fill=tuple(r['color']))\nim.save('drawing.png')")],
                     terminal=[py("import json\nfrom PIL import Image, ImageDraw\ns = json.load(open('shapes.json'))\nim = Image.new('RGB', tuple(s['size']), 'white')\n"
                                  "d = ImageDraw.Draw(im)\nfor r in s['rects']: d.rectangle([r['x0'], r['y0'], r['x1'] - 1, r['y1'] - 1], fill=tuple(r['color']))\nim.save('drawing.png')")]),
   lambda r: {"rects": [{"x0": 10 + 60 * i, "y0": 10, "x1": 60 + 60 * i, "y1": 80, "color": COLORS[c]}
                        for i, c in enumerate(distinct(r, ["red", "blue", "yellow", "purple"], 3))]}, ("json", "png"))
