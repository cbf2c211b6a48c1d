"""Real applications (LibreOffice Calc, Writer, Impress and GIMP, and two apps at once) as Forge skills.

The hand-written real-app suite (tasks/realapps/suite.py) has 16 fixed tasks; these skills draw
their files and values from the seed, so each skill is many tasks, and they pass the same gates as
every Forge skill. Every skill has a GUI reference (keyboard shortcuts and the suite's fixed pixels:
LibreOffice maximized at 1280x800, GIMP's action search) and a terminal one that edits the file
from Python (openpyxl, python-docx, python-pptx, PIL), so they are `hybrid` skills: the student may
use either channel. A gate of one of these packages takes 30-60 s here (the app starts per episode),
so the full Forge config leaves this domain out (`exclude_domains`) and `configs/forge.py:apps`
runs it on its own.
"""
from __future__ import annotations

import random
from typing import Any

from mage_jax.forge.skills.base import CITIES, ITEMS, NAMES, WORDS, capability, define, distinct, domain, key, package, type_
from mage_jax.tasks.realapps.suite import (SAVE, THUMB, TITLE, add_last_slide, cells, click_at, export_as, gimp_action,
                                           office, py)

domain("apps", "Real desktop applications: LibreOffice Calc, Writer, Impress and GIMP, alone or two at once")
capability("apps.calc", "Edit, format and compute in a spreadsheet open in LibreOffice Calc")
capability("apps.writer", "Style, edit and extend a document open in LibreOffice Writer")
capability("apps.impress", "Retitle, add and delete slides of a deck open in LibreOffice Impress")
capability("apps.gimp", "Transform and convert an image open in GIMP and export it")
capability("apps.multi", "Carry a value from one open application into another")
MAX_STEPS = 40
SHEETS = ["Sales", "Costs", "Stock", "Budget", "Orders"]
LABELS = [w.title() for w in ITEMS]           # Calc rows: title case (Calc's AutoInput and autocorrect stay idle)


def sk(id: str, desc: str, build, sample, apps: tuple[str, ...]) -> None:
  define(id, desc, sample, build, kind="hybrid", apps=apps)


def _hybrid(code: str, action: str) -> list[dict[str, Any]]:
  return [py(code, action)]


# ---- Calc -----------------------------------------------------------------------------------------
def _table(r: random.Random, lo: int = 10, hi: int = 400) -> dict[str, Any]:
  n = r.randint(4, 6)
  return {"file": f"{r.choice(WORDS)}.xlsx", "sheet": r.choice(SHEETS),
          "rows": [[i, r.randint(lo, hi)] for i in distinct(r, LABELS, n)]}


def _sheet(p: dict[str, Any]) -> list[dict[str, Any]]:
  rows = [["Item", "Amount"]] + p["rows"]
  return [{"type": "xlsx", "path": p["file"], "sheets": {p["sheet"]: rows}}, office("calc", p["file"])]


def _openpyxl(p: dict[str, Any], body: str) -> str:
  return f"import openpyxl\nwb = openpyxl.load_workbook({p['file']!r}); ws = wb.active\n{body.strip()}\nwb.save({p['file']!r})"


def _calc_total(p):
  n, f = len(p["rows"]), p["file"]
  t = n + 2
  total = sum(a for _, a in p["rows"])
  check = {"type": "xlsx_values", "path": f, "cells": {f"A{t}": p["label"], f"B{t}": total, "B2": p["rows"][0][1]}}
  return package(f"In {f} (open in Calc), write {p['label']} in A{t} and the sum of the amounts in B{t}, then save "
                 "the file as .xlsx.", _sheet(p), check,
                 cells(f"A{t}") + [type_(f"{p['label']}\t=SUM(B2:B{n})\n"), SAVE],
                 gui=cells(f"A{t}") + [type_(f"{p['label']}\t=SUM(B2:B{n + 1})\n"), SAVE],
                 hybrid=_hybrid(_openpyxl(p, f"ws['A{t}'] = {p['label']!r}\nws['B{t}'] = sum(ws.cell(r, 2).value for r in "
                                         f"range(2, {n + 2}))"), "Add the total with openpyxl"), max_steps=MAX_STEPS)


sk("apps.calc.sum_total", "Add a labelled total row under a column of amounts",
   _calc_total, lambda r: {**_table(r), "label": r.choice(["Total", "Sum", "All"])}, ("calc",))


def _calc_average(p):
  n, f = len(p["rows"]), p["file"]
  t = n + 2
  mean = sum(a for _, a in p["rows"]) // n
  check = {"type": "xlsx_values", "path": f, "cells": {f"A{t}": "Average", f"B{t}": mean}}
  return package(f"In {f} (open in Calc), write Average in A{t} and the mean of the amounts in B{t}, then save the "
                 "file as .xlsx.", _sheet(p), check,
                 cells(f"A{t}") + [type_(f"Average\t=SUM(B2:B{n + 1})\n"), SAVE],
                 gui=cells(f"A{t}") + [type_(f"Average\t=AVERAGE(B2:B{n + 1})\n"), SAVE],
                 hybrid=_hybrid(_openpyxl(p, f"vals = [ws.cell(r, 2).value for r in range(2, {n + 2})]\n"
                                         f"ws['A{t}'] = 'Average'\nws['B{t}'] = sum(vals) / len(vals)"),
                                "Add the mean with openpyxl"), max_steps=MAX_STEPS)


def _divisible_table(r: random.Random) -> dict[str, Any]:
  """Amounts whose mean is a whole number (a cached float like 62.4 is exact either way, but a
  third is not, and the checker compares values exactly)."""
  p = _table(r)
  n = len(p["rows"])
  p["rows"][-1][1] += (-sum(a for _, a in p["rows"])) % n
  return p


sk("apps.calc.average", "Add a labelled mean row under a column of amounts", _calc_average, _divisible_table, ("calc",))


def _calc_set(p):
  f, i = p["file"], p["pick"]
  row = i + 2
  item = p["rows"][i][0]
  kept = {f"B{j + 2}": a for j, (_, a) in enumerate(p["rows"]) if j != i}
  check = {"type": "xlsx_values", "path": f, "cells": {f"B{row}": p["value"], **kept}}
  wrong = 2 + (i + 1) % len(p["rows"])
  return package(f"In {f} (open in Calc), change the amount of {item} to {p['value']} and save the file as .xlsx.",
                 _sheet(p), check, cells(f"B{wrong}") + [type_(f"{p['value']}\n"), SAVE],
                 gui=cells(f"B{row}") + [type_(f"{p['value']}\n"), SAVE],
                 hybrid=_hybrid(_openpyxl(p, f"for r in range(2, ws.max_row + 1):\n    if ws.cell(r, 1).value == {item!r}:\n"
                                         f"        ws.cell(r, 2).value = {p['value']}"), "Change the amount with openpyxl"),
                 max_steps=MAX_STEPS)


sk("apps.calc.set_amount", "Change the amount of the row a label names",
   _calc_set, lambda r: (lambda t: {**t, "pick": r.randrange(len(t["rows"])), "value": r.randint(500, 999)})(_table(r)),
   ("calc",))


def _calc_largest(p):
  f = p["file"]
  ranked = sorted(p["rows"], key=lambda x: -x[1])
  check = {"type": "xlsx_values", "path": f, "cells": {"D2": ranked[0][0]}}
  return package(f"In {f} (open in Calc), write the name of the item with the largest amount in cell D2 and save the "
                 "file as .xlsx.", _sheet(p), check, cells("D2") + [type_(f"{ranked[1][0]}\n"), SAVE],
                 gui=cells("D2") + [type_(f"{ranked[0][0]}\n"), SAVE],
                 hybrid=_hybrid(_openpyxl(p, "rows = [(ws.cell(r, 1).value, ws.cell(r, 2).value) for r in range(2, ws.max_row + 1)]\n"
                                         "ws['D2'] = max(rows, key=lambda x: x[1])[0]"), "Find the largest with openpyxl"),
                 max_steps=MAX_STEPS)


def _distinct_amounts(r: random.Random) -> dict[str, Any]:
  p = _table(r)
  for j, v in enumerate(distinct(r, list(range(10, 400)), len(p["rows"]))):  # a unique largest
    p["rows"][j][1] = v
  return p


sk("apps.calc.name_largest", "Write down the label of the largest amount", _calc_largest, _distinct_amounts, ("calc",))


def _calc_bold(p):
  f, cols = p["file"], p["columns"]
  last = "ABC"[len(cols) - 1]
  rows = [cols] + p["rows"]
  setup = [{"type": "xlsx", "path": f, "sheets": {p["sheet"]: rows}}, office("calc", f)]
  style = {f"{c}1": {"bold": True} for c in "ABC"[:len(cols)]}
  check = {"type": "xlsx_style", "path": f, "cells": {**style, "A2": {"bold": False}}}
  return package(f"Make the header row of {f} (open in Calc) bold and save the file as .xlsx.", setup, check,
                 cells(f"A1:{'ABC'[len(cols) - 2]}1") + [key("ctrl", "b"), SAVE],
                 gui=cells(f"A1:{last}1") + [key("ctrl", "b"), SAVE],
                 hybrid=_hybrid(_openpyxl(p, "from openpyxl.styles import Font\nfor c in ws[1]:\n    c.font = Font(bold=True)"),
                                "Bold the header with openpyxl"), max_steps=MAX_STEPS)


sk("apps.calc.bold_header", "Make a sheet's header row bold",
   _calc_bold, lambda r: (lambda cols: {"file": f"{r.choice(WORDS)}.xlsx", "sheet": r.choice(SHEETS), "columns": cols,
                                        "rows": [[n] + [r.randint(1, 99) for _ in cols[1:]] for n in distinct(r, NAMES, 4)]})(
       ["Name"] + distinct(r, ["Score", "Age", "Points", "Level", "Rank"], r.randint(1, 2))), ("calc",))


# ---- Writer ---------------------------------------------------------------------------------------
SENTENCES = ["The {w} team met in {c}.", "Sales of {w} grew in {c}.", "{n} leads the {w} project.",
             "Draft notes on {w}: remove before sending.", "Next review of {w} in {c}.", "{n} moved the {w} desk to {c}.",
             "Costs for {w} fell this month.", "Ask {n} about the {w} budget."]


def _doc(r: random.Random) -> dict[str, Any]:
  """4-5 one-line paragraphs (Down moves one paragraph), each with a word no other one has."""
  n = r.randint(4, 5)
  words, cities, names = distinct(r, WORDS, n), distinct(r, CITIES, n), distinct(r, NAMES, n)
  paras = [r.choice(SENTENCES).format(w=words[i], c=cities[i], n=names[i]) for i in range(n)]
  return {"file": f"{r.choice(WORDS)}_notes.docx", "paragraphs": paras, "keys": words}


def _key_of(p, i):
  """The word that names paragraph i: its own word (every paragraph has a different one)."""
  return next(k for k in p["keys"] if k in p["paragraphs"][i])


def _docx(p: dict[str, Any]) -> list[dict[str, Any]]:
  return [{"type": "docx", "path": p["file"], "paragraphs": p["paragraphs"]}, office("writer", p["file"])]


def _python_docx(p: dict[str, Any], body: str) -> str:
  return (f"import docx\nd = docx.Document({p['file']!r})\nps = [p for p in d.paragraphs if p.text.strip()]\n"
          f"{body.strip()}\nd.save({p['file']!r})")


def _down(i: int) -> list[dict[str, Any]]:
  return [key("ctrl", "Home")] + [key("Down")] * i


def _writer_heading(p):
  i, lvl = p["pick"], p["level"]
  other = 2 if lvl == 1 else 1
  check = {"type": "docx_style", "path": p["file"], "text": p["paragraphs"][i], "style": f"Heading {lvl}", "only": True,
           "paragraphs": p["paragraphs"]}
  return package(f"In {p['file']} (open in Writer), make the paragraph that mentions {_key_of(p, i)} a Heading {lvl} "
                 "and save the file in Word format.", _docx(p), check,
                 _down(i) + [key("ctrl", str(other)), SAVE], gui=_down(i) + [key("ctrl", str(lvl)), SAVE],
                 hybrid=_hybrid(_python_docx(p, f"ps[{i}].style = d.styles['Heading {lvl}']"), "Set the style with python-docx"),
                 max_steps=MAX_STEPS)


sk("apps.writer.heading", "Give the paragraph that mentions a word a heading style",
   _writer_heading, lambda r: (lambda d: {**d, "pick": r.randrange(len(d["paragraphs"])), "level": r.randint(1, 2)})(_doc(r)),
   ("writer",))


def _writer_bold(p):
  i = p["pick"]
  check = {"type": "docx_style", "path": p["file"], "text": p["paragraphs"][i], "bold": True, "only": True,
           "paragraphs": p["paragraphs"]}
  wrong = (i + 1) % len(p["paragraphs"])
  return package(f"In {p['file']} (open in Writer), make the paragraph about {_key_of(p, i)} bold and save the file in "
                 "Word format.", _docx(p), check, _down(wrong) + [key("shift", "End"), key("ctrl", "b"), SAVE],
                 gui=_down(i) + [key("shift", "End"), key("ctrl", "b"), SAVE],
                 hybrid=_hybrid(_python_docx(p, f"for r in ps[{i}].runs:\n    r.bold = True"), "Bold it with python-docx"),
                 max_steps=MAX_STEPS)


sk("apps.writer.bold_paragraph", "Make the paragraph about a word bold",
   _writer_bold, lambda r: (lambda d: {**d, "pick": r.randrange(len(d["paragraphs"]))})(_doc(r)), ("writer",))


def _writer_delete(p):
  i = p["pick"]
  rest = [x for j, x in enumerate(p["paragraphs"]) if j != i]
  check = {"type": "docx_paragraphs", "path": p["file"], "paragraphs": rest}
  return package(f"In {p['file']} (open in Writer), delete the paragraph that mentions {_key_of(p, i)} and save the file "
                 "in Word format.", _docx(p), check, _down(i - 1) + [key("shift", "Down"), key("Delete"), SAVE],
                 gui=_down(i) + [key("shift", "Down"), key("Delete"), SAVE],
                 hybrid=_hybrid(_python_docx(p, f"e = ps[{i}]._element\ne.getparent().remove(e)"),
                                "Remove it with python-docx"), max_steps=MAX_STEPS)


# not the last paragraph: Shift+Down there selects nothing past it
sk("apps.writer.delete_paragraph", "Delete the paragraph that mentions a word",
   _writer_delete, lambda r: (lambda d: {**d, "pick": r.randint(1, len(d["paragraphs"]) - 2)})(_doc(r)), ("writer",))


def _writer_append(p):
  line = p["line"]
  check = {"type": "docx_paragraphs", "path": p["file"], "paragraphs": p["paragraphs"] + [line]}
  return package(f"In {p['file']} (open in Writer), add a last paragraph that says: {line} Then save the file in Word "
                 "format.", _docx(p), check, [key("ctrl", "End"), key("Return"), type_(line.rsplit(" ", 1)[0]), SAVE],
                 gui=[key("ctrl", "End"), key("Return"), type_(line), SAVE],
                 hybrid=_hybrid(_python_docx(p, f"d.add_paragraph({line!r})"), "Append it with python-docx"),
                 max_steps=MAX_STEPS)


sk("apps.writer.append_paragraph", "Add a given last paragraph to a document",
   _writer_append, lambda r: {**_doc(r), "line": f"Contact {r.choice(NAMES)} in {r.choice(CITIES)} by {r.randint(2, 28)} May."},
   ("writer",))


# ---- Impress --------------------------------------------------------------------------------------
def _deck(r: random.Random) -> dict[str, Any]:
  titles = [f"{a.title()} {b}" for a, b in zip(distinct(r, WORDS, 3), distinct(r, ["Plans", "Budget", "Review", "Goals",
                                                                                     "Risks", "Team", "Timeline"], 3))]
  return {"file": f"{r.choice(WORDS)}_deck.pptx", "titles": titles}


def _pptx_setup(p: dict[str, Any]) -> list[dict[str, Any]]:
  return [{"type": "pptx", "path": p["file"], "slides": [{"title": t, "body": "Notes"} for t in p["titles"]]},
          office("impress", p["file"])]


def _python_pptx(p: dict[str, Any], body: str) -> str:
  return f"from pptx import Presentation\np = Presentation({p['file']!r})\n{body.strip()}\np.save({p['file']!r})"


def _retitle(k: int, text: str) -> list[dict[str, Any]]:
  return [click_at(*THUMB[k], f"slide {k + 1}'s thumbnail"), click_at(*TITLE, "the slide title", "double_click"),
          key("ctrl", "a"), type_(text), key("Escape"), key("Escape"), SAVE]


def _impress_retitle(p):
  k, new = p["pick"], p["new"]
  titles = [new if j == k else t for j, t in enumerate(p["titles"])]
  return package(f"In {p['file']} (open in Impress), change the title of slide {k + 1} from {p['titles'][k]} to {new} and "
                 "save the file in PowerPoint format.", _pptx_setup(p), {"type": "pptx_titles", "path": p["file"], "titles": titles},
                 _retitle((k + 1) % 3, new), gui=_retitle(k, new),
                 hybrid=_hybrid(_python_pptx(p, f"p.slides[{k}].shapes.title.text = {new!r}"), "Retitle with python-pptx"),
                 max_steps=MAX_STEPS)


sk("apps.impress.retitle", "Change one slide's title",
   _impress_retitle, lambda r: {**_deck(r), "pick": r.randint(0, 2), "new": f"{r.choice(CITIES)} {r.choice(['Update', 'Summary', 'Outlook'])}"},
   ("impress",))


def _impress_delete(p):
  k = p["pick"]
  rest = [t for j, t in enumerate(p["titles"]) if j != k]
  return package(f"In {p['file']} (open in Impress), delete the slide titled {p['titles'][k]} and save the file in "
                 "PowerPoint format.", _pptx_setup(p), {"type": "pptx_titles", "path": p["file"], "titles": rest},
                 [click_at(*THUMB[(k + 1) % 3], "another slide's thumbnail"), key("Delete"), SAVE],
                 gui=[click_at(*THUMB[k], f"slide {k + 1}'s thumbnail"), key("Delete"), SAVE],
                 hybrid=_hybrid(_python_pptx(p, f"ids = p.slides._sldIdLst\nsid = ids[{k}]\np.part.drop_rel(sid.rId)\nids.remove(sid)"),
                                "Drop the slide with python-pptx"), max_steps=MAX_STEPS)


sk("apps.impress.delete_slide", "Delete the slide with a given title",
   _impress_delete, lambda r: {**_deck(r), "pick": r.randint(0, 2)}, ("impress",))


def _impress_add(p):
  new = p["new"]
  return package(f"In {p['file']} (open in Impress), add a slide titled {new} after the last slide and save the file in "
                 "PowerPoint format.", _pptx_setup(p), {"type": "pptx_titles", "path": p["file"], "titles": p["titles"] + [new]},
                 add_last_slide(new.split()[0]), gui=add_last_slide(new),
                 hybrid=_hybrid(_python_pptx(p, f"s = p.slides.add_slide(p.slide_layouts[1])\ns.shapes.title.text = {new!r}"),
                                "Add the slide with python-pptx"), max_steps=MAX_STEPS)


sk("apps.impress.add_slide", "Add a titled slide after the last one",
   _impress_add, lambda r: {**_deck(r), "new": f"{r.choice(['Questions', 'Next steps', 'Thanks', 'Contacts'])} {r.choice(CITIES)}"},
   ("impress",))


# ---- GIMP -----------------------------------------------------------------------------------------
PALETTE = {"red": [220, 30, 30], "blue": [0, 0, 255], "green": [0, 160, 0], "white": [255, 255, 255],
           "yellow": [240, 220, 20], "black": [0, 0, 0]}


def _picture(r: random.Random) -> dict[str, Any]:
  """An image with a block in its top-left quarter (so a flip moves it somewhere it was not)."""
  w, h = r.choice([(300, 200), (240, 160), (320, 240)])
  bg, fg = distinct(r, sorted(PALETTE), 2)
  x0, y0 = r.randint(0, w // 8), r.randint(0, h // 8)
  return {"file": f"{r.choice(WORDS)}.png", "size": [w, h], "bg": bg, "fg": fg,
          "rect": [x0, y0, x0 + r.randint(w // 6, w // 3), y0 + r.randint(h // 6, h // 3)], "out": f"{r.choice(WORDS)}_out.png"}


def _png(p: dict[str, Any]) -> list[dict[str, Any]]:
  return [{"type": "png", "path": p["file"], "size": p["size"], "fill": PALETTE[p["bg"]], "rects": [p["rect"] + [PALETTE[p["fg"]]]]},
          office("gimp", p["file"])]


def _gimp_flip(p):
  (w, h), (x0, y0, x1, y1) = p["size"], p["rect"]
  cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
  horizontal = p["direction"] == "horizontally"
  moved = [w - 1 - cx, cy] if horizontal else [cx, h - 1 - cy]
  fg, bg = PALETTE[p["fg"]] + [255], PALETTE[p["bg"]] + [255]
  check = {"type": "image_props", "path": p["out"], "size": [w, h],
           "pixels": [{"at": moved, "rgba": fg}, {"at": [cx, cy], "rgba": bg}, {"at": [w - 1 - cx, h - 1 - cy], "rgba": bg}]}
  op = "mirror" if horizontal else "flip"
  other = "Flip Vertically" if horizontal else "Flip Horizontally"
  return package(f"In GIMP ({p['file']} is open), flip the image {p['direction']} and export it as {p['out']}.", _png(p), check,
                 gimp_action(other, down=1) + export_as(p["out"]),
                 gui=gimp_action(f"Flip {p['direction'].title()}", down=1) + export_as(p["out"]),
                 hybrid=_hybrid(f"from PIL import Image, ImageOps\nImageOps.{op}(Image.open({p['file']!r})).save({p['out']!r})",
                                "Flip with PIL"), max_steps=MAX_STEPS)


sk("apps.gimp.flip_export", "Flip an image horizontally or vertically and export it",
   _gimp_flip, lambda r: {**_picture(r), "direction": r.choice(["horizontally", "vertically"])}, ("gimp",))


def _gray_range(rgb: list[int]) -> tuple[int, int]:
  """(expected gray, tolerance) covering both conversions: PIL's ITU-R 601 luma on the stored values,
  and GIMP's, luminance (Rec. 709) in linear light stored back in sRGB; 12 levels to spare."""
  pil = (299 * rgb[0] + 587 * rgb[1] + 114 * rgb[2]) / 1000
  lin = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
  y = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
  gimp = 255 * (12.92 * y if y <= 0.0031308 else 1.055 * y ** (1 / 2.4) - 0.055)
  return round((pil + gimp) / 2), round(abs(pil - gimp) / 2) + 12


def _gimp_gray(p):
  (w, h), (x0, y0, x1, y1) = p["size"], p["rect"]
  probes = []
  for at, colour in (([(x0 + x1) // 2, (y0 + y1) // 2], p["fg"]), ([w - 1 - x0, h - 1 - y0], p["bg"])):
    g, tol = _gray_range(PALETTE[colour])
    probes.append({"at": at, "rgba": [g, g, g, 255], "tol": tol})
  # a gray file of the right name, size and mode is not enough (a blank one would be): the block
  # must still stand out from the background where it was
  check = {"type": "image_props", "path": p["out"], "size": [w, h], "mode": "L", "pixels": probes}
  return package(f"In GIMP ({p['file']} is open), convert the image to grayscale mode and export it as {p['out']}.",
                 _png(p), check, export_as(p["out"]), gui=gimp_action("Grayscale") + export_as(p["out"]),
                 hybrid=_hybrid(f"from PIL import Image\nImage.open({p['file']!r}).convert('L').save({p['out']!r})",
                                "Convert with PIL"), max_steps=MAX_STEPS)


def _dark_on_light(r: random.Random) -> dict[str, Any]:
  """A dark block on a light background: their grays stay apart under either conversion."""
  return {**_picture(r), "fg": r.choice(["black", "blue", "red"]), "bg": r.choice(["white", "yellow"])}


sk("apps.gimp.grayscale_export", "Convert an image to grayscale and export it", _gimp_gray, _dark_on_light, ("gimp",))


# ---- two applications -----------------------------------------------------------------------------
LOOK = [key("alt", "Tab"), key("alt", "Tab")]   # the GUI looks at the other window and comes back
REGIONS = ["North", "South", "East", "West", "Central", "Coast"]


def _multi_total(p):
  sheet = {**p, "file": p["sheet_file"]}
  total = sum(a for _, a in p["rows"])
  memo = ["Memo", p["memo"]]
  line, wrong = f"Total: {total}", f"Total: {total - p['rows'][-1][1]}"
  code = (f"import docx, openpyxl\nws = openpyxl.load_workbook({p['sheet_file']!r}).active\n"
          "total = sum(r[1] for r in ws.iter_rows(min_row=2, values_only=True))\n"
          f"d = docx.Document({p['file']!r}); d.add_paragraph(f'Total: {{total}}'); d.save({p['file']!r})")
  setup = (_sheet(sheet)[:1] + [{"type": "docx", "path": p["file"], "paragraphs": memo}]
           + [office("calc", p["sheet_file"]), office("writer", p["file"])])

  def append(text):
    return LOOK + [key("ctrl", "End"), key("Return"), type_(text), SAVE]
  return package(f"Add a last paragraph to {p['file']} (open in Writer) that says Total: followed by the sum of the amounts in "
                 f"{p['sheet_file']} (open in Calc), and save the memo in Word format.", setup,
                 {"type": "docx_paragraphs", "path": p["file"], "paragraphs": memo + [line]}, append(wrong),
                 gui=append(line), hybrid=_hybrid(code, "Sum the sheet and append to the memo in Python"), max_steps=MAX_STEPS)


sk("apps.multi.calc_total_to_writer", "Append a spreadsheet's total to a document",
   _multi_total, lambda r: {**_table(r), "sheet_file": f"{r.choice(WORDS)}.xlsx", "file": f"{r.choice(NAMES).lower()}_memo.docx",
                            "memo": f"Supplies for {r.choice(CITIES)} were ordered this month."}, ("calc", "writer"))


def _multi_top(p):
  top = max(p["regions"], key=lambda x: x[1])[0]
  second = sorted(p["regions"], key=lambda x: -x[1])[1][0]
  rows = [["Region", "Sales"]] + p["regions"]
  deck = [{"title": p["titles"][0], "body": "This quarter"}, {"title": "Top region", "body": "Ahead of plan"}]
  code = (f"import openpyxl\nfrom pptx import Presentation\nws = openpyxl.load_workbook({p['sheet_file']!r}).active\n"
          "top = max(ws.iter_rows(min_row=2, values_only=True), key=lambda r: r[1])[0]\n"
          f"p = Presentation({p['file']!r}); p.slides[1].shapes.title.text = top; p.save({p['file']!r})")
  setup = [{"type": "xlsx", "path": p["sheet_file"], "sheets": {"Regions": rows}},
           {"type": "pptx", "path": p["file"], "slides": deck}, office("calc", p["sheet_file"]), office("impress", p["file"])]
  return package(f"Change the title of the second slide of {p['file']} (open in Impress) to the region with the highest sales "
                 f"in {p['sheet_file']} (open in Calc), and save the deck in PowerPoint format.", setup,
                 {"type": "pptx_titles", "path": p["file"], "titles": [p["titles"][0], top]},
                 LOOK + _retitle(1, second), gui=LOOK + _retitle(1, top),
                 hybrid=_hybrid(code, "Find the top region and retitle the slide in Python"), max_steps=MAX_STEPS)


sk("apps.multi.calc_top_to_impress", "Retitle a slide with the top row of a spreadsheet",
   _multi_top, lambda r: {"regions": [[g, v] for g, v in zip(distinct(r, REGIONS, 4), distinct(r, list(range(20, 99)), 4))],
                          "sheet_file": f"{r.choice(WORDS)}.xlsx", "file": f"{r.choice(WORDS)}_deck.pptx",
                          "titles": [f"{r.choice(['Results', 'Numbers', 'Review'])} {r.randint(2020, 2026)}"]},
   ("calc", "impress"))
