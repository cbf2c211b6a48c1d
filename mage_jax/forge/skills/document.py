"""Documents (python-docx): write, edit, style, tables, read-backs and exports of .docx files."""
from __future__ import annotations

from mage_jax.forge.skills.base import CITIES, ITEMS, NAMES, WORDS, capability, define, distinct, domain, package, py

domain("docx", "Word documents through python-docx: paragraphs, styles, tables, read-backs")
capability("docx.create", "Write a new document")
capability("docx.edit", "Add, change and remove paragraphs")
capability("docx.style", "Apply paragraph styles and run formatting")
capability("docx.table", "Create and edit tables")
capability("docx.read", "Answer questions about a document in the shell or a text file")
A = ("docx",)
DOC = "doc.docx"


def _paras(r, n=4):
  return [f"The {w} report from {c} is ready." for w, c in zip(distinct(r, WORDS, n), distinct(r, CITIES, n))]


def _sample(r):
  return {"paras": _paras(r)}


def _doc(paras, tables=()):
  return [{"type": "docx", "path": DOC, "paragraphs": paras, **({"tables": list(tables)} if tables else {})}]


def _edit(code):
  return py(f"import docx\nd = docx.Document('{DOC}')\n{code}\nd.save('{DOC}')", "Edit the document with python-docx")


def _read(code):
  return py(f"import docx\nd = docx.Document('{DOC}')\n{code}", "Read the document with python-docx")


def _paras_is(paras, path=DOC):
  return {"type": "docx_paragraphs", "path": path, "paragraphs": paras}


def _mention(p):
  return {DOC: [p["paras"][0]]}


def sk(id, desc, build, sample=_sample, apps=A, mention=True):
  define(id, desc, sample, build, apps=apps, mentions=_mention if sample is _sample and mention else None)


# ---- create ------------------------------------------------------------------------------------
sk("docx.create.from_lines", "Create a document with one paragraph per given line",
   lambda p: package("Create memo.docx with exactly these paragraphs, in order: " + " | ".join(p["paras"]) + " (the | only "
                     "separates them).", [], _paras_is(p["paras"], "memo.docx"),
                     [py("import docx\nd = docx.Document()\n" + "".join(f"d.add_paragraph({t!r})\n" for t in p["paras"][:-1])
                         + "d.save('memo.docx')")],
                     terminal=[py("import docx\nd = docx.Document()\n" + "".join(f"d.add_paragraph({t!r})\n" for t in p["paras"])
                                  + "d.save('memo.docx')")]), mention=False)

sk("docx.create.from_text_file", "Turn the lines of a text file into document paragraphs",
   lambda p: package(f"Create {DOC} with one paragraph per non-empty line of draft.txt, in order.",
                     [{"type": "text", "path": "draft.txt", "content": "\n\n".join(p["paras"]) + "\n"}], _paras_is(p["paras"]),
                     [py(f"import docx\nd = docx.Document()\nd.add_paragraph(open('draft.txt').read())\nd.save('{DOC}')")],
                     terminal=[py(f"import docx\nd = docx.Document()\nfor l in open('draft.txt'):\n  if l.strip(): "
                                  f"d.add_paragraph(l.strip())\nd.save('{DOC}')")]), apps=("text", "docx"), mention=False)

# ---- edit --------------------------------------------------------------------------------------
sk("docx.edit.append_paragraph", "Append a paragraph at the end of a document",
   lambda p: package(f"Append a last paragraph to {DOC} that reads: Signed, {p['name']}.", _doc(p["paras"]),
                     _paras_is(p["paras"] + [f"Signed, {p['name']}."]),
                     [_edit(f"d.paragraphs[0].insert_paragraph_before('Signed, {p['name']}.')")],
                     terminal=[_edit(f"d.add_paragraph('Signed, {p['name']}.')")]),
   sample=lambda r: {"paras": _paras(r), "name": r.choice(NAMES)})

sk("docx.edit.replace_word", "Replace a word everywhere in a document",
   lambda p: package(f"In {DOC} replace every occurrence of the word report with summary.", _doc(p["paras"]),
                     _paras_is([t.replace("report", "summary") for t in p["paras"]]),
                     [_edit("d.paragraphs[0].runs[0].text = d.paragraphs[0].runs[0].text.replace('report', 'summary')")],
                     terminal=[_edit("for para in d.paragraphs:\n  for run in para.runs: run.text = run.text.replace('report', 'summary')")]))

sk("docx.edit.delete_paragraph", "Delete the paragraph that mentions a given word",
   lambda p: package(f"Delete the paragraph of {DOC} that mentions {p['paras'][p['pick']].split()[1]}.", _doc(p["paras"]),
                     _paras_is([t for i, t in enumerate(p["paras"]) if i != p["pick"]]),
                     [_edit("e = d.paragraphs[-1]._element; e.getparent().remove(e)")],
                     terminal=[_edit(f"for para in d.paragraphs:\n  if {p['paras'][p['pick']].split()[1]!r} in para.text:\n"
                                     "    para._element.getparent().remove(para._element)")]),
   sample=lambda r: {"paras": _paras(r, 5), "pick": r.randint(0, 3)})

sk("docx.edit.insert_after", "Insert a paragraph right after a given one",
   lambda p: package(f"In {DOC} insert a new paragraph 'See appendix.' directly after the first paragraph.", _doc(p["paras"]),
                     _paras_is(p["paras"][:1] + ["See appendix."] + p["paras"][1:]),
                     [_edit("d.add_paragraph('See appendix.')")],
                     terminal=[_edit("d.paragraphs[1].insert_paragraph_before('See appendix.')")]))

# ---- style -------------------------------------------------------------------------------------
sk("docx.style.make_heading", "Give one paragraph the Heading 1 style",
   lambda p: package(f"In {DOC} give the first paragraph the style Heading 1.", _doc(p["paras"]),
                     {"type": "docx_style", "path": DOC, "text": p["paras"][0], "style": "Heading 1"},
                     [_edit("d.paragraphs[0].style = d.styles['Heading 2']")],
                     terminal=[_edit("d.paragraphs[0].style = d.styles['Heading 1']")]))

sk("docx.style.bold_paragraph", "Make every run of one paragraph bold",
   lambda p: package(f"In {DOC} make the paragraph that mentions {p['paras'][p['pick']].split()[1]} bold (all of it).",
                     _doc(p["paras"]), {"type": "docx_style", "path": DOC, "text": p["paras"][p["pick"]], "bold": True},
                     [_edit("d.paragraphs[0].runs[0].bold = True")],
                     terminal=[_edit(f"for para in d.paragraphs:\n  if {p['paras'][p['pick']].split()[1]!r} in para.text:\n"
                                     "    for run in para.runs: run.bold = True")]),
   sample=lambda r: {"paras": _paras(r), "pick": r.randint(1, 3)})

# ---- table -------------------------------------------------------------------------------------
def _tab(r, n=3):
  return [["item", "qty"]] + [[i, str(q)] for i, q in zip(distinct(r, ITEMS, n), r.sample(range(1, 40), n))]


sk("docx.table.create_from_csv", "Add a table to a document filled from a CSV file",
   lambda p: package(f"Add a table to {DOC} holding the rows of stock.csv (header row included, one cell per value).",
                     _doc(p["paras"][:1]) + [{"type": "csv", "path": "stock.csv", "rows": p["rows"]}],
                     {"type": "docx_table", "path": DOC, "rows": p["rows"]},
                     [_edit("import csv\nrows = list(csv.reader(open('stock.csv')))[1:]\nt = d.add_table(len(rows), 2)\n"
                            "for i, row in enumerate(rows):\n  for j, v in enumerate(row): t.cell(i, j).text = v")],
                     terminal=[_edit("import csv\nrows = list(csv.reader(open('stock.csv')))\nt = d.add_table(len(rows), 2)\n"
                                     "for i, row in enumerate(rows):\n  for j, v in enumerate(row): t.cell(i, j).text = v")]),
   sample=lambda r: {"paras": _paras(r), "rows": _tab(r)}, apps=("csv", "docx"))

sk("docx.table.set_cell", "Change one table cell found by its row label",
   lambda p: package(f"In the table of {DOC} set the qty of {p['rows'][p['pick']][0]} to {p['value']}.",
                     _doc(p["paras"][:2], [p["rows"]]),
                     {"type": "docx_table", "path": DOC, "rows": [r if i != p["pick"] else [r[0], str(p["value"])]
                                                                  for i, r in enumerate(p["rows"])]},
                     [_edit(f"d.tables[0].cell({p['pick']}, 0).text = '{p['value']}'")],
                     terminal=[_edit(f"for row in d.tables[0].rows:\n  if row.cells[0].text == {p['rows'][p['pick']][0]!r}: "
                                     f"row.cells[1].text = '{p['value']}'")]),
   sample=lambda r: {"paras": _paras(r), "rows": _tab(r, 4), "pick": r.randint(1, 4), "value": r.randint(50, 99)})

sk("docx.table.add_row", "Append a row to a table",
   lambda p: package(f"Add a row to the end of the table in {DOC}: item {p['item']}, qty {p['qty']}.",
                     _doc(p["paras"][:2], [p["rows"]]), {"type": "docx_table", "path": DOC, "rows": p["rows"] + [[p["item"], str(p["qty"])]]},
                     [_edit(f"c = d.tables[0].add_row().cells; c[0].text = '{p['item']}'")],
                     terminal=[_edit(f"c = d.tables[0].add_row().cells; c[0].text = '{p['item']}'; c[1].text = '{p['qty']}'")]),
   sample=lambda r: {"paras": _paras(r), "rows": _tab(r), "item": "widget", "qty": r.randint(41, 99)})

# ---- read --------------------------------------------------------------------------------------
sk("docx.read.count_words", "Print how many words a document's paragraphs hold",
   lambda p: package(f"How many words do the paragraphs of {DOC} hold in total? Print just the number as your last "
                     "command's output.", _doc(p["paras"]),
                     {"type": "terminal_answer", "text": str(sum(len(t.split()) for t in p["paras"]))},
                     [_read("print(len(d.paragraphs))")],
                     terminal=[_read("print(sum(len(x.text.split()) for x in d.paragraphs))")]),
   sample=lambda r: {"paras": [" ".join(r.choices(WORDS, k=r.randint(3, 9))) for _ in range(4)]})

sk("docx.read.table_lookup", "Print a value looked up in a document's table",
   lambda p: package(f"What qty does the table in {DOC} give for {p['rows'][p['pick']][0]}? Print just the number as "
                     "your last command's output.", _doc(p["paras"][:1], [p["rows"]]),
                     {"type": "terminal_answer", "text": p["rows"][p["pick"]][1]},
                     [_read("print(d.tables[0].cell(1, 1).text)")],
                     terminal=[_read(f"print(next(r.cells[1].text for r in d.tables[0].rows if r.cells[0].text == "
                                     f"{p['rows'][p['pick']][0]!r}))")]),
   sample=lambda r: {"paras": _paras(r), "rows": _tab(r, 5), "pick": r.randint(2, 5)})

sk("docx.read.headings_outline", "Write a document's headings, in order, to a text file",
   lambda p: package(f"Write the headings of {DOC} (its Heading 1 paragraphs), in order, one per line, to outline.txt.",
                     _doc([x for h, t in zip(p["heads"], p["paras"]) for x in ({"text": h, "style": "Heading 1"}, t)]),
                     {"type": "file_text", "path": "outline.txt", "equals": "\n".join(p["heads"])},
                     [_read("open('outline.txt', 'w').write('\\n'.join(x.text for x in d.paragraphs[:2]))")],
                     terminal=[_read("open('outline.txt', 'w').write('\\n'.join(x.text for x in d.paragraphs "
                                     "if x.style.name == 'Heading 1'))")]),
   sample=lambda r: {"paras": _paras(r, 3), "heads": [f"Part {w}" for w in distinct(r, WORDS, 3)]}, apps=("docx", "text"))
