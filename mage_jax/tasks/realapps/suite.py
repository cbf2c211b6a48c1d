"""Real-application tasks: LibreOffice Calc, Writer, Impress, GIMP, and four tasks across two apps
(16 in all).

Each task opens its file in the real app at setup (preparer `office`, machine/apps.py) and has two
references: a GUI-only one (`computer_use` only: the shortest path a person would take, keyboard
shortcuts allowed) and a hybrid one that does the work from the terminal (openpyxl, python-docx,
python-pptx, PIL, or GIMP's own batch mode), plus a near-miss. The checkers read the saved file.

How the GUI references find coordinates: the desktop is 1280x800 (EnvConfig's default) and openbox
maximizes every LibreOffice window without decorations, so LibreOffice's widgets sit at fixed
pixels (read once off a screenshot: Calc's Name Box, the Insert Chart button, Impress's slide
thumbnails and title placeholder). GIMP opens its single window at a fixed
place with the image at 100% centred on the canvas, so image pixel (x, y) is at a fixed screen
point. Everything else goes through keyboard shortcuts and GIMP's action search ("/"). Tasks that
click fixed pixels are only valid at 1280x800 (`SCREEN`).
"""
from __future__ import annotations

from typing import Any

from mage_jax.actions import schema
from mage_jax.tasks.builtin.suite import DONE, bash, key, type_, wait
from mage_jax.tasks.package import TaskPackage, package_from_dict

SCREEN = (1280, 800)


def click_at(x: int, y: int, what: str, action: str = "left_click") -> dict[str, Any]:
  """A click at screen pixel (x, y) of the 1280x800 desktop."""
  return {"name": "computer_use", "action": f"Click {what}",
          "arguments": {"action": action, "coordinate": [schema.from_pixel(x, SCREEN[0]),
                                                               schema.from_pixel(y, SCREEN[1])]}}


def office(app: str, path: str) -> dict[str, Any]:
  return {"type": "office", "app": app, "path": path}


def py(script: str, action: str) -> dict[str, Any]:
  """A hybrid step: one Python program run from the terminal."""
  return bash(f"cd ~ && python3 - <<'EOF'\n{script.strip()}\nEOF", action)


SAVE = key("ctrl", "s")


def task(id: str, instruction: str, setup: list, checker: dict, gui: list, hybrid: list | None,
         near_miss: list, apps: list[str], skills: list[str]) -> dict[str, Any]:
  refs = [{"channel": "gui", "calls": gui + [DONE]}]
  if hybrid is not None:
    refs.append({"channel": "hybrid", "calls": hybrid + [DONE]})
  return {"id": id, "kind": "gui", "instruction": instruction, "setup": setup, "checker": checker,
          "references": refs, "near_miss": near_miss + [DONE], "apps": apps,
          "skills": ["real_app"] + skills, "channels": ["gui", "terminal"] if hybrid else ["gui"],
          "max_steps": 50}


# ---- Calc -----------------------------------------------------------------------------------------
NAME_BOX, INSERT_CHART = (65, 89), (673, 32)


def cells(ref: str) -> list[dict[str, Any]]:
  """Select a cell or range by typing it into Calc's Name Box."""
  return [click_at(*NAME_BOX, "the Name Box"), type_(ref + "\n")]


BANNER_ROWS = [["Sales 2025"], ["Region", "Jan", "Feb", "Apr", "May"], ["North", 10, 12, 14, 9],
               ["South", 8, 7, 11, 13], ["East", 15, 9, 6, 12], ["West", 5, 10, 8, 7]]
SALES_ROWS = [["Item", "Amount"], ["Paper", 120], ["Ink", 45], ["Toner", 310], ["Pens", 18], ["Folders", 62]]


def _calc() -> list[dict[str, Any]]:
  banner_py = """
import openpyxl
from openpyxl.chart import BarChart, Reference
wb = openpyxl.load_workbook("banner.xlsx"); ws = wb.active
for rng, label in (("B1:C1", "Q1"), ("D1:E1", "Q2")):
    ws.merge_cells(rng); ws[rng.split(":")[0]] = label
chart = BarChart()
chart.add_data(Reference(ws, min_col=2, max_col=5, min_row=2, max_row=6), titles_from_data=True)
chart.set_categories(Reference(ws, min_col=1, min_row=3, max_row=6))
ws.add_chart(chart, "G2")
wb.save("banner.xlsx")"""
  banner_check = {"type": "all", "checks": [
      {"type": "xlsx_merged", "path": "banner.xlsx", "range": "B1:C1"},
      {"type": "xlsx_merged", "path": "banner.xlsx", "range": "D1:E1"},
      {"type": "xlsx_values", "path": "banner.xlsx", "cells": {"B1": "Q1", "D1": "Q2", "A3": "North", "E6": 7}},
      {"type": "xlsx_chart", "path": "banner.xlsx"}]}
  # Format > Merge and Unmerge Cells > Merge and Center Cells from the keyboard: the toolbar button
  # is 1 click but LibreOffice enables it late, and under load the click can land while disabled.
  merge = [key("alt", "o"), key("e"), key("Return")]
  banner_gui = (cells("B1:C1") + merge + [type_("Q1\n")] + cells("D1:E1") + merge + [type_("Q2\n")]
                + cells("A2:E6") + [click_at(*INSERT_CHART, "Insert Chart"), key("Return"),
                                    key("Escape"), key("Escape"), SAVE])
  total_check = {"type": "xlsx_values", "path": "sales.xlsx", "cells": {"A7": "Total", "B7": 555, "B4": 310}}
  # one check, not `all` of a format and a data check: the untouched file would earn the data half
  bold_check = {"type": "xlsx_style", "path": "sales.xlsx", "cells": {"A1": {"bold": True}, "B1": {"bold": True},
                                                                       "A2": {"bold": False}}}
  return [
      task("calc_banner_chart",
           "In banner.xlsx (open in Calc), merge the two empty banner ranges above the month columns (B1:C1 "
           "and D1:E1), label them Q1 and Q2, add a bar chart of the table, and save it as .xlsx.",
           [{"type": "xlsx", "path": "banner.xlsx", "sheets": {"Sheet1": BANNER_ROWS}}, office("calc", "banner.xlsx")],
           banner_check, banner_gui, [py(banner_py, "Merge, label and chart the sheet with openpyxl")],
           [py(banner_py.replace("ws.add_chart(chart, \"G2\")", ""), "Merge and label with openpyxl, no chart")],
           ["calc"], ["merge_cells", "chart"]),
      task("calc_sum_total",
           "In sales.xlsx (open in Calc), write Total in A7 and the sum of the amounts in B7, then save the file.",
           [{"type": "xlsx", "path": "sales.xlsx", "sheets": {"Sales": SALES_ROWS}}, office("calc", "sales.xlsx")],
           total_check, cells("A7") + [type_("Total\t=SUM(B2:B6)\n"), SAVE],
           [py("""
import openpyxl
wb = openpyxl.load_workbook("sales.xlsx"); ws = wb.active
ws["A7"] = "Total"; ws["B7"] = sum(ws.cell(r, 2).value for r in range(2, 7))
wb.save("sales.xlsx")""", "Add the total with openpyxl")],
           cells("A7") + [type_("Total\t=SUM(B2:B5)\n"), SAVE], ["calc"], ["formula"]),
      task("calc_bold_header",
           "Make the header row of sales.xlsx (open in Calc) bold and save the file.",
           [{"type": "xlsx", "path": "sales.xlsx", "sheets": {"Sales": SALES_ROWS}}, office("calc", "sales.xlsx")],
           bold_check, cells("A1:B1") + [key("ctrl", "b"), SAVE],
           [py("""
import openpyxl
from openpyxl.styles import Font
wb = openpyxl.load_workbook("sales.xlsx"); ws = wb.active
for c in ws[1]: c.font = Font(bold=True)
wb.save("sales.xlsx")""", "Bold the header row with openpyxl")],
           cells("A1:B2") + [key("ctrl", "b"), SAVE], ["calc"], ["format"]),
  ]


# ---- Writer ---------------------------------------------------------------------------------------
REPORT = ["Quarterly report", "Sales grew in every region.", "The north region led the growth.",
          "Draft notes: remove before sending.", "Next review in March."]


def _docx_py(body: str) -> str:
  return "import docx\nd = docx.Document('report.docx')\nps = [p for p in d.paragraphs if p.text.strip()]\n" \
         + body.strip() + "\nd.save('report.docx')"


def _writer() -> list[dict[str, Any]]:
  setup = [{"type": "docx", "path": "report.docx", "paragraphs": REPORT}, office("writer", "report.docx")]
  return [
      task("writer_heading",
           "In report.docx (open in Writer), make the first paragraph a Heading 1 and save the file in Word format.",
           setup, {"type": "docx_style", "path": "report.docx", "text": REPORT[0], "style": "Heading 1", "only": True,
                   "paragraphs": REPORT},
           [key("ctrl", "Home"), key("ctrl", "1"), SAVE],
           [py(_docx_py("ps[0].style = d.styles['Heading 1']"), "Set the style with python-docx")],
           [key("ctrl", "Home"), key("ctrl", "2"), SAVE], ["writer"], ["paragraph_style"]),
      task("writer_bold_paragraph",
           "In report.docx (open in Writer), make the paragraph about the north region bold and save the file "
           "in Word format.",
           setup, {"type": "docx_style", "path": "report.docx", "text": REPORT[2], "bold": True, "only": True,
                   "paragraphs": REPORT},
           [key("ctrl", "Home"), key("Down"), key("Down"), key("shift", "End"), key("ctrl", "b"), SAVE],
           [py(_docx_py("for r in ps[2].runs: r.bold = True"), "Bold the paragraph with python-docx")],
           [key("ctrl", "Home"), key("Down"), key("shift", "End"), key("ctrl", "b"), SAVE],
           ["writer"], ["character_format"]),
      task("writer_delete_paragraph",
           "In report.docx (open in Writer), delete the draft notes paragraph and save the file in Word format.",
           setup, {"type": "docx_paragraphs", "path": "report.docx", "paragraphs": REPORT[:3] + REPORT[4:]},
           [key("ctrl", "Home"), key("Down"), key("Down"), key("Down"), key("shift", "Down"), key("Delete"),
            SAVE],
           [py(_docx_py("e = ps[3]._element; e.getparent().remove(e)"), "Remove the paragraph with python-docx")],
           [key("ctrl", "Home"), key("Down"), key("Down"), key("shift", "Down"), key("Delete"), SAVE], ["writer"], ["edit_text"]),
  ]


# ---- Impress --------------------------------------------------------------------------------------
DECK = [{"title": "Roadmap", "body": "Plans for next year"}, {"title": "Draft slide", "body": "Not for sharing"},
        {"title": "Budget", "body": "Costs and savings"}]
THUMB = [(87, 145), (87, 241), (87, 337)]      # the slide pane's thumbnails 1-3
TITLE = (546, 207)                               # the current slide's title placeholder


def _pptx_py(body: str, path: str = "deck.pptx") -> str:
  return f"from pptx import Presentation\np = Presentation('{path}')\n" + body.strip() + f"\np.save('{path}')"


def add_last_slide(title: str) -> list[dict[str, Any]]:
  """A new slide after the last of DECK's three, titled `title`, saved (Ctrl+M adds after the current)."""
  return [click_at(*THUMB[2], "the last slide's thumbnail"), key("ctrl", "m"),
          click_at(*TITLE, "the new slide's title placeholder"), type_(title), key("Escape"), key("Escape"), SAVE]


def _impress() -> list[dict[str, Any]]:
  setup = [{"type": "pptx", "path": "deck.pptx", "slides": DECK}, office("impress", "deck.pptx")]
  titles = [s["title"] for s in DECK]

  def check(t):
    return {"type": "pptx_titles", "path": "deck.pptx", "titles": t}
  retitle = [click_at(*TITLE, "the slide title", "double_click"), key("ctrl", "a"), type_("Product roadmap"), key("Escape"),
             key("Escape"), SAVE]
  return [
      task("impress_retitle",
           "In deck.pptx (open in Impress), change the first slide's title from Roadmap to Product roadmap and "
           "save the file in PowerPoint format.",
           setup, check(["Product roadmap"] + titles[1:]), retitle,
           [py(_pptx_py("p.slides[0].shapes.title.text = 'Product roadmap'"), "Retitle with python-pptx")],
           [click_at(*TITLE, "the slide title", "double_click"), key("End"), type_(" 2026"), key("Escape"), key("Escape"),
            SAVE], ["impress"], ["edit_text"]),
      task("impress_delete_slide",
           "In deck.pptx (open in Impress), delete the draft slide and save the file in PowerPoint format.",
           setup, check([titles[0], titles[2]]),
           [click_at(*THUMB[1], "the second slide's thumbnail"), key("Delete"), SAVE],
           [py(_pptx_py("ids = p.slides._sldIdLst\nsid = ids[1]\np.part.drop_rel(sid.rId)\nids.remove(sid)"),
               "Drop the second slide with python-pptx")],
           [click_at(*THUMB[2], "the third slide's thumbnail"), key("Delete"), SAVE],
           ["impress"], ["slides"]),
      task("impress_add_slide",
           "In deck.pptx (open in Impress), add a slide titled Questions after the last slide and save the file "
           "in PowerPoint format.",
           setup, check(titles + ["Questions"]), add_last_slide("Questions"),
           [py(_pptx_py("s = p.slides.add_slide(p.slide_layouts[1])\ns.shapes.title.text = 'Questions'"),
               "Add the slide with python-pptx")],
           add_last_slide("Question"), ["impress"], ["slides"]),
  ]


# ---- GIMP -----------------------------------------------------------------------------------------
# GIMP's single window opens at +200+32 (1024x768) with the image at 100% centred on the canvas:
# a 400x300 image's pixel (0, 0) is at screen (504, 288).
CANVAS_ORIGIN_400x300 = (504, 288)
CYAN, RED, WHITE, BLUE, GREEN = [0, 255, 255], [220, 30, 30], [255, 255, 255], [0, 0, 255], [0, 160, 0]


def gimp_action(name: str, down: int = 0) -> list[dict[str, Any]]:
  """Run a menu command through GIMP's action search ("/"): the `down`-th match (a fresh profile
  has no search history, so the order is fixed; "Flip Horizontally" lists View's flip first)."""
  return [key("slash"), type_(name)] + [key("Down")] * down + [key("Return")]


def gimp_batch(script: str, action: str) -> dict[str, Any]:
  """A hybrid step: GIMP's batch mode from the terminal, on a copy of the GUI's profile (it holds
  the plug-in index, so no first-run plug-in query)."""
  return bash("cd ~ && cp -r /tmp/.mage_profiles/gimp /tmp/gimp-batch && GIMP2_DIRECTORY=/tmp/gimp-batch "
              f"gimp -i -d -f -b '{script}' -b '(gimp-quit 0)' 2>&1 | tail -3", action)


def export_as(name: str) -> list[dict[str, Any]]:
  """File > Export As: the name, Return (the file chooser), wait for the PNG options dialog (it maps
  a second after the chooser greys out), Return (its Export)."""
  return [key("ctrl", "shift", "e"), key("ctrl", "a"), type_(name), key("Return"), wait(2), key("Return")]


def _gimp() -> list[dict[str, Any]]:
  ox, oy = CANVAS_ORIGIN_400x300
  cyan_setup = [{"type": "png", "path": "cyan.png", "size": [400, 300], "fill": CYAN,
                 "rects": [[100, 75, 300, 225, RED]]}, office("gimp", "cyan.png")]
  cyan_check = {"type": "image_props", "path": "cyan.xcf", "size": [280, 210], "alpha": True,
                "pixels": [{"at": [2, 2], "rgba": [0, 0, 0, 0]}, {"at": [277, 207], "rgba": [0, 0, 0, 0]},
                           {"at": [140, 105], "rgba": RED + [255]}]}
  # the waits: GIMP draws nothing while it scales, so the settle wait (0.5 s still) ends early, and
  # the Save dialog maps a second after Ctrl+S; at load ~20 the Return landed before it twice
  cyan_gui = (gimp_action("Add Alpha Channel") + [key("u"), click_at(ox + 4, oy + 4, "the cyan background"),
                                                   key("Delete"), key("ctrl", "shift", "a")]
              + gimp_action("Scale Image") + [key("ctrl", "a"), type_("280\t"), key("alt", "s"), wait(2)]
              + [key("ctrl", "s"), wait(2), key("Return")])
  cyan_batch = ('(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE "cyan.png" "cyan.png"))) '
                '(layer (car (gimp-image-get-active-layer img)))) (gimp-layer-add-alpha layer) '
                '(gimp-image-select-contiguous-color img CHANNEL-OP-REPLACE layer 2 2) '
                '(gimp-drawable-edit-clear layer) (gimp-selection-none img) (gimp-image-scale img SIZE) '
                '(gimp-file-save RUN-NONINTERACTIVE img layer "cyan.xcf" "cyan.xcf"))')
  photo_setup = [{"type": "png", "path": "photo.png", "size": [300, 200], "fill": WHITE,
                  "rects": [[0, 0, 150, 200, BLUE], [0, 0, 40, 40, GREEN]]}, office("gimp", "photo.png")]
  # single checks: in an `all`, a size or format part alone pays a copy of the input (blind exploit)
  flip_check = {"type": "image_props", "path": "flipped.png", "size": [300, 200],
                "pixels": [{"at": at, "rgba": c + [255]} for at, c in
                           (([20, 100], WHITE), ([280, 100], BLUE), ([280, 20], GREEN), ([280, 180], BLUE))]}
  gray_setup = [{"type": "png", "path": "colors.png", "size": [200, 100], "fill": WHITE,
                 "rects": [[100, 0, 200, 100, BLUE]]}, office("gimp", "colors.png")]
  # mode, size and the two halves' grays (PIL's 601 luma and GIMP's linear-light 709 luminance both
  # inside each range): a blank gray PNG of that name no longer passes; white | blue keep apart
  gray_check = {"type": "image_props", "path": "gray.png", "size": [200, 100], "mode": "L",
                "pixels": [{"at": [50, 50], "rgba": [255, 255, 255, 255], "tol": 12},
                           {"at": [150, 50], "rgba": [53, 53, 53, 255], "tol": 35}]}
  return [
      task("gimp_alpha_cyan_scale",
           "In GIMP (cyan.png is open), add an alpha channel, clear the cyan background to transparency, scale "
           "the image to 280x210 and save it as cyan.xcf.",
           cyan_setup, cyan_check, cyan_gui,
           [gimp_batch(cyan_batch.replace("SIZE", "280 210"), "Do it all in GIMP's batch mode")],
           [gimp_batch(cyan_batch.replace("SIZE", "300 225"), "Batch mode, scaled to the wrong size")],
           ["gimp"], ["alpha", "select", "scale"]),
      task("gimp_flip_export",
           "In GIMP (photo.png is open), flip the image horizontally and export it as flipped.png.",
           photo_setup, flip_check, gimp_action("Flip Horizontally", down=1) + export_as("flipped.png"),
           [py("from PIL import Image, ImageOps\nImageOps.mirror(Image.open('photo.png')).save('flipped.png')",
               "Mirror with PIL")],
           gimp_action("Flip Vertically", down=1) + export_as("flipped.png"), ["gimp"], ["transform", "export"]),
      task("gimp_grayscale_export",
           "In GIMP (colors.png is open), convert the image to grayscale mode and export it as gray.png.",
           gray_setup, gray_check, gimp_action("Grayscale") + export_as("gray.png"),
           [py("from PIL import Image\nImage.open('colors.png').convert('L').save('gray.png')",
               "Convert with PIL")],
           export_as("gray.png"), ["gimp"], ["color_mode", "export"]),
  ]


# ---- across two applications ----------------------------------------------------------------------
# Both documents open in one LibreOffice; the one opened last has the focus, Alt+Tab (openbox)
# switches. The GUI references look at the spreadsheet first (Alt+Tab there and back).
MEMO = ["Memo", "Supplies were ordered this month."]
REGIONS = [["Region", "Sales"], ["North", 40], ["South", 75], ["East", 52]]
SCORES = [["Name", "Score"], ["Ann", 82], ["Ben", 90], ["Cal", 75], ["Dee", 93]]


def _multi() -> list[dict[str, Any]]:
  look = [key("alt", "Tab"), key("alt", "Tab")]
  memo_py = """
import docx, openpyxl
ws = openpyxl.load_workbook("sales.xlsx").active
total = sum(r[1] for r in ws.iter_rows(min_row=2, values_only=True))
d = docx.Document("memo.docx"); d.add_paragraph(f"Total: {total}"); d.save("memo.docx")"""
  top_py = """
import openpyxl
from pptx import Presentation
ws = openpyxl.load_workbook("regions.xlsx").active
top = max(ws.iter_rows(min_row=2, values_only=True), key=lambda r: r[1])[0]
p = Presentation("deck.pptx"); p.slides[1].shapes.title.text = top; p.save("deck.pptx")"""
  summary_py = """
import docx, openpyxl
rows = list(openpyxl.load_workbook("scores.xlsx").active.iter_rows(min_row=2, values_only=True))
best = max(rows, key=lambda r: r[1])[0]
mean = sum(r[1] for r in rows) / len(rows)
d = docx.Document("memo.docx"); d.add_paragraph(f"{len(rows)} scores, average {mean:g}, best {best}")
d.save("memo.docx")"""
  heading_py = """
import docx
from pptx import Presentation
title = next(p.text for p in docx.Document("report.docx").paragraphs if p.text.strip())
p = Presentation("deck.pptx"); s = p.slides.add_slide(p.slide_layouts[1]); s.shapes.title.text = title
p.save("deck.pptx")"""
  deck = [{"title": "Results", "body": "This quarter"}, {"title": "Top region", "body": "Ahead of plan"}]

  def calc_to_memo(task_id, instruction, sheet, line, wrong_line, python, skills):
    """A value read in Calc, appended to the Writer memo as a last paragraph (GUI: look at the
    sheet, type the line at the memo's end; near-miss: the wrong line)."""
    path, name, rows = sheet
    append = lambda text: look + [key("ctrl", "End"), key("Return"), type_(text), SAVE]
    return task(task_id, instruction,
                [{"type": "xlsx", "path": path, "sheets": {name: rows}},
                 {"type": "docx", "path": "memo.docx", "paragraphs": MEMO},
                 office("calc", path), office("writer", "memo.docx")],
                {"type": "docx_paragraphs", "path": "memo.docx", "paragraphs": MEMO + [line]},
                append(line), [python], append(wrong_line), ["calc", "writer"], ["multi_app", *skills])

  retitle2 = [click_at(*THUMB[1], "the second slide's thumbnail"),
              click_at(*TITLE, "the slide title", "double_click"), key("ctrl", "a")]
  return [
      calc_to_memo("multi_calc_total_to_writer",
                   "Add a last paragraph to memo.docx (open in Writer) that says Total: followed by the sum of "
                   "the amounts in sales.xlsx (open in Calc), and save the memo in Word format.",
                   ("sales.xlsx", "Sales", SALES_ROWS), "Total: 555", "Total: 435",
                   py(memo_py, "Sum the sheet and append to the memo in Python"), ["read_value"]),
      task("multi_calc_top_to_impress",
           "Change the title of the second slide of deck.pptx (open in Impress) to the region with the highest "
           "sales in regions.xlsx (open in Calc), and save the deck in PowerPoint format.",
           [{"type": "xlsx", "path": "regions.xlsx", "sheets": {"Regions": REGIONS}},
            {"type": "pptx", "path": "deck.pptx", "slides": deck},
            office("calc", "regions.xlsx"), office("impress", "deck.pptx")],
           {"type": "pptx_titles", "path": "deck.pptx", "titles": ["Results", "South"]},
           look + retitle2 + [type_("South"), key("Escape"), key("Escape"), SAVE],
           [py(top_py, "Find the top region and retitle the slide in Python")],
           look + retitle2 + [type_("East"), key("Escape"), key("Escape"), SAVE],
           ["calc", "impress"], ["multi_app", "read_value"]),
      calc_to_memo("multi_calc_summary_to_writer",
                   "Summarise the scores in scores.xlsx (open in Calc) as a last paragraph of memo.docx (open in "
                   "Writer) in the form: N scores, average M, best NAME (the count, the mean score, the name with "
                   "the highest score), and save the memo in Word format.",
                   ("scores.xlsx", "Scores", SCORES), "4 scores, average 85, best Dee",
                   "4 scores, average 85, best Ben",
                   py(summary_py, "Summarise the sheet into the memo in Python"), ["read_value", "aggregate"]),
      task("multi_writer_heading_to_impress",
           "Add a slide after the last slide of deck.pptx (open in Impress) whose title is the first paragraph "
           "of report.docx (open in Writer), and save the deck in PowerPoint format.",
           [{"type": "docx", "path": "report.docx", "paragraphs": REPORT},
            {"type": "pptx", "path": "deck.pptx", "slides": DECK},
            office("writer", "report.docx"), office("impress", "deck.pptx")],
           {"type": "pptx_titles", "path": "deck.pptx", "titles": [s["title"] for s in DECK] + [REPORT[0]]},
           look + add_last_slide(REPORT[0]),
           [py(heading_py, "Copy the heading into a new slide in Python")],
           look + add_last_slide(REPORT[0].split()[0]),
           ["writer", "impress"], ["multi_app", "read_value", "slides"]),
  ]


def realapp_task_dicts() -> list[dict[str, Any]]:
  return _calc() + _writer() + _impress() + _gimp() + _multi()


def realapp_packages() -> list[TaskPackage]:
  return [package_from_dict(d, source=f"realapps:{d['id']}") for d in realapp_task_dicts()]
