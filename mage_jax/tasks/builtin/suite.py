"""The built-in suite: 35 task packages (13 terminal-only, 14 GUI-only, 8 hybrid).

Each is a package dict in the documented format (docs/tasks.md) with a
reference solution and a near-miss solution. GUI references act with
`computer_use` only, on coordinates resolved from the app's live layout
("@app.widget"). Tasks tagged "easy" (short, single-channel) are meant for
tiny-model RL.
"""
from __future__ import annotations

from typing import Any

from mage_jax.tasks.package import TaskPackage, package_from_dict

H = "/home/user"


# ---- call builders ---------------------------------------------------------------------------
def bash(cmd: str, action: str | None = None) -> dict[str, Any]:
  return {"name": "bash", "arguments": {"command": cmd}, "action": action or f"Run `{cmd[:60]}` in the shell"}


def click(ref: str, action: str | None = None) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": "@" + ref},
          "action": action or f"Click {ref.split('.', 1)[1]}"}


def move(ref: str) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "mouse_move", "coordinate": "@" + ref},
          "action": f"Move the pointer to {ref.split('.', 1)[1]}"}


def drag(ref: str) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "left_click_drag", "coordinate": "@" + ref},
          "action": f"Drag to {ref.split('.', 1)[1]}"}


def type_(text: str) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "type", "text": text}, "action": f"Type '{text}'"}


def key(*keys: str) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "key", "keys": list(keys)},
          "action": "Press " + "+".join(keys)}


def scroll(pixels: int) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "scroll", "pixels": pixels},
          "action": f"Scroll {'up' if pixels > 0 else 'down'}"}


def wait(seconds: float) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "wait", "time": seconds}, "action": "Wait"}


DONE = {"name": "computer_use", "arguments": {"action": "terminate", "status": "success"},
        "action": "Finish: the task is complete"}


def app(config: dict[str, Any]) -> dict[str, Any]:
  return {"type": "app", "config": config}


def task(id: str, kind: str, instruction: str, setup: list, checker: dict, reference: list,
         near_miss: list, apps: list[str] = (), skills: list[str] = (), easy: bool = False) -> dict[str, Any]:
  channels = {"terminal": ["terminal"], "gui": ["gui"], "hybrid": ["gui", "terminal"]}[kind]
  return {"id": id, "kind": kind, "instruction": instruction, "setup": setup, "checker": checker,
          "reference": reference + [DONE], "near_miss": near_miss + [DONE], "apps": list(apps),
          "skills": list(skills) + (["easy"] if easy else []), "channels": channels}


def fill(app_name: str, values: dict[str, str]) -> list[dict[str, Any]]:
  out = []
  for field, value in values.items():
    out += [click(f"{app_name}.field:{field}"), type_(value)]
  return out


# ---- terminal-only ---------------------------------------------------------------------------
def _terminal() -> list[dict[str, Any]]:
  lines = "\n".join(f"record {i}" for i in range(17)) + "\n"
  names = ["mallory", "alice", "dave", "carol", "bob", "erin"]
  sales = [["category", "amount"], ["fruit", 3], ["veg", 5], ["fruit", 4], ["dairy", 2], ["veg", 1]]
  return [
      task("term_hello_file", "terminal", "Create a file hello.txt in the home directory containing exactly: hello world",
           [], {"type": "file_text", "path": "hello.txt", "equals": "hello world"},
           [bash("echo 'hello world' > hello.txt")], [bash("echo 'hello word' > hello.txt")],
           skills=["files"], easy=True),
      task("term_multiply", "terminal", "Compute 37 * 43 and print just the result in the terminal, as your last command's output.",
           [], {"type": "terminal_answer", "text": "1591"},
           [bash("echo $((37 * 43))")], [bash("echo $((37 * 42))")], skills=["arithmetic"], easy=True),
      task("term_count_lines", "terminal", "Count the lines of data.txt and write the number (digits only) to count.txt.",
           [{"type": "text", "path": "data.txt", "content": lines}],
           {"type": "file_text", "path": "count.txt", "equals": "17"},
           [bash("wc -l < data.txt > count.txt")], [bash("echo 16 > count.txt")], skills=["files"], easy=True),
      task("term_rename_ext", "terminal", "Rename every .txt file in the notes directory to have a .md extension.",
           [{"type": "text", "path": f"notes/{n}.txt", "content": n} for n in "abc"],
           {"type": "dir_listing", "path": "notes", "equals": ["a.md", "b.md", "c.md"]},
           [bash('cd notes && for f in *.txt; do mv "$f" "${f%.txt}.md"; done; cd ..')],
           [bash("mv notes/a.txt notes/a.md; mv notes/b.txt notes/b.md")], skills=["files"]),
      task("term_sort_names", "terminal", "Sort the names in names.txt alphabetically into sorted.txt (one per line).",
           [{"type": "text", "path": "names.txt", "content": "\n".join(names) + "\n"}],
           {"type": "file_text", "path": "sorted.txt", "equals": "\n".join(sorted(names))},
           [bash("sort names.txt > sorted.txt")], [bash("sort -r names.txt > sorted.txt")], skills=["text"]),
      task("term_xlsx_merge_chart", "terminal",
           "In report.xlsx, merge cells A1:C1 and add a bar chart of the values in B3:B6.",
           [{"type": "xlsx", "path": "report.xlsx", "sheets": {"Sheet1": [
               ["Quarterly report", None, None], ["quarter", "value", None],
               ["Q1", 10, None], ["Q2", 14, None], ["Q3", 9, None], ["Q4", 17, None]]}}],
           {"type": "all", "checks": [{"type": "xlsx_merged", "path": "report.xlsx", "range": "A1:C1"},
                                      {"type": "xlsx_chart", "path": "report.xlsx"}]},
           [bash("python - <<'PY'\nimport openpyxl\nfrom openpyxl.chart import BarChart, Reference\n"
                 "wb = openpyxl.load_workbook('report.xlsx'); ws = wb.active\nws.merge_cells('A1:C1')\n"
                 "ch = BarChart(); ch.add_data(Reference(ws, min_col=2, min_row=3, max_row=6))\n"
                 "ws.add_chart(ch, 'D2'); wb.save('report.xlsx')\nPY", "Merge A1:C1 and add a bar chart with openpyxl")],
           [bash("python -c \"import openpyxl; wb = openpyxl.load_workbook('report.xlsx'); "
                 "wb.active.merge_cells('A1:C1'); wb.save('report.xlsx')\"", "Merge A1:C1 with openpyxl")],
           apps=["xlsx"], skills=["spreadsheet"]),
      task("term_xlsx_sum", "terminal",
           "In sales.xlsx, write the sum of B2:B6 as a number (not a formula) into B7.",
           [{"type": "xlsx", "path": "sales.xlsx", "sheets": {"Sales": [
               ["item", "amount"], ["a", 12], ["b", 7], ["c", 30], ["d", 1], ["e", 5]]}}],
           {"type": "xlsx_cells", "path": "sales.xlsx", "cells": {"B7": 55}},
           [bash("python -c \"import openpyxl; wb = openpyxl.load_workbook('sales.xlsx'); ws = wb.active; "
                 "ws['B7'] = sum(ws.cell(r, 2).value for r in range(2, 7)); wb.save('sales.xlsx')\"")],
           [bash("python -c \"import openpyxl; wb = openpyxl.load_workbook('sales.xlsx'); ws = wb.active; "
                 "ws['B7'] = 54; wb.save('sales.xlsx')\"")], apps=["xlsx"], skills=["spreadsheet"]),
      task("term_pptx_add_slide", "terminal", "Add a third slide titled 'Q3 Results' to deck.pptx.",
           [{"type": "pptx", "path": "deck.pptx", "slides": [{"title": "Q1 Results", "body": "up"},
                                                             {"title": "Q2 Results", "body": "flat"}]}],
           {"type": "pptx_titles", "path": "deck.pptx", "titles": ["Q1 Results", "Q2 Results", "Q3 Results"]},
           [bash("python -c \"from pptx import Presentation; p = Presentation('deck.pptx'); "
                 "s = p.slides.add_slide(p.slide_layouts[1]); s.shapes.title.text = 'Q3 Results'; p.save('deck.pptx')\"")],
           [bash("python -c \"from pptx import Presentation; p = Presentation('deck.pptx'); "
                 "s = p.slides.add_slide(p.slide_layouts[1]); s.shapes.title.text = 'Q3 Result'; p.save('deck.pptx')\"")],
           apps=["pptx"], skills=["slides"]),
      task("term_csv_totals", "terminal",
           "From sales.csv, write totals.csv with header 'category,total' and one row per category "
           "(sorted by category) holding the sum of its amounts.",
           [{"type": "csv", "path": "sales.csv", "rows": sales}],
           {"type": "csv_equals", "path": "totals.csv",
            "rows": [["category", "total"], ["dairy", 2], ["fruit", 7], ["veg", 6]]},
           [bash("python -c \"import pandas as pd; d = pd.read_csv('sales.csv'); "
                 "d.groupby('category')['amount'].sum().rename('total').to_csv('totals.csv')\"")],
           [bash("printf 'category,total\\ndairy,2\\nfruit,7\\nveg,5\\n' > totals.csv")], skills=["csv"]),
      task("term_json_config", "terminal", "In config.json set \"debug\" to true and \"port\" to 8080; keep other keys.",
           [{"type": "json", "path": "config.json", "data": {"name": "svc", "debug": False, "port": 80}}],
           {"type": "json_equals", "path": "config.json", "expected": {"name": "svc", "debug": True, "port": 8080}},
           [bash("python -c \"import json; c = json.load(open('config.json')); c.update(debug=True, port=8080); "
                 "json.dump(c, open('config.json', 'w'))\"")],
           [bash("python -c \"import json; c = json.load(open('config.json')); c.update(debug=True, port=8000); "
                 "json.dump(c, open('config.json', 'w'))\"")], skills=["json"]),
      task("term_find_secret", "terminal",
           "One file in docs/ contains the word PINEAPPLE. Write that file's name (just the name) to answer.txt.",
           [{"type": "text", "path": f"docs/{n}.txt", "content": c} for n, c in
            (("alpha", "apple banana"), ("beta", "cherry PINEAPPLE"), ("gamma", "pine apple"))],
           {"type": "file_text", "path": "answer.txt", "equals": "beta.txt"},
           [bash("grep -l PINEAPPLE docs/* | xargs -n1 basename > answer.txt")],
           [bash("echo gamma.txt > answer.txt")], skills=["search"]),
      task("term_pdf_merge", "terminal", "Merge a.pdf and then b.pdf into merged.pdf.",
           [{"type": "pdf", "path": "a.pdf", "pages": 2}, {"type": "pdf", "path": "b.pdf", "pages": 3}],
           {"type": "pdf_pages", "path": "merged.pdf", "pages": 5},
           [bash("python -c \"from pypdf import PdfWriter; w = PdfWriter(); [w.append(f) for f in ('a.pdf', 'b.pdf')]; "
                 "w.write('merged.pdf')\"")], [bash("cp a.pdf merged.pdf")], apps=["pdf"], skills=["pdf"]),
      task("term_project_tree", "terminal",
           "Create project/src/main.py containing print('hi') and an empty project/README.md.",
           [], {"type": "all", "checks": [
               {"type": "file_text", "path": "project/src/main.py", "equals": "print('hi')"},
               {"type": "file_exists", "path": "project/README.md"}]},
           [bash("mkdir -p project/src && echo \"print('hi')\" > project/src/main.py && touch project/README.md")],
           [bash("mkdir -p project/src && echo \"print('hi')\" > project/src/main.py")], skills=["files"]),
  ]


# ---- GUI-only --------------------------------------------------------------------------------
def _gui() -> list[dict[str, Any]]:
  out = []
  colors = ["Red", "Green", "Blue"]
  for color, wrong in zip(colors, colors[1:] + colors[:1]):
    out.append(task(f"gui_click_{color.lower()}", "gui", f"Click the button labeled '{color}'.",
                    [app({"kind": "buttons", "name": "buttons", "out": f"{H}/clicked.json", "buttons": colors,
                          "prompt": "Pick a colour"})],
                    {"type": "app_state", "path": "clicked.json", "expected": {"clicked": color}},
                    [click(f"buttons.button:{color}")], [click(f"buttons.button:{wrong}")],
                    apps=["tk"], skills=["click"], easy=True))
  out.append(task("gui_type_word", "gui", "Type the word banana into the Word field and click Save.",
                  [app({"kind": "form", "name": "form", "out": f"{H}/form.json", "fields": ["Word"]})],
                  {"type": "app_state", "path": "form.json", "expected": {"Word": "banana"}},
                  fill("form", {"Word": "banana"}) + [click("form.save")],
                  fill("form", {"Word": "bananas"}) + [click("form.save")], apps=["tk"], skills=["type"], easy=True))
  person = {"Name": "Ada Lovelace", "Email": "ada@example.com", "City": "London"}
  out.append(task("gui_form_fill", "gui",
                  "Fill the form with the person shown at the top of the window (name, email, city), "
                  "tick Subscribe, then Save.",
                  [app({"kind": "form", "name": "form", "out": f"{H}/form.json", "fields": list(person),
                        "checkboxes": ["Subscribe"],
                        "prompt": "Person: " + " / ".join(person[k] for k in ("City", "Email", "Name"))})],
                  {"type": "app_state", "path": "form.json", "expected": {**person, "Subscribe": True}},
                  fill("form", person) + [click("form.check:Subscribe"), click("form.save")],
                  fill("form", {**person, "City": "Paris"}) + [click("form.check:Subscribe"), click("form.save")],
                  apps=["tk"], skills=["form"]))
  cols, rows = ["item", "qty", "price"], [["pen", 2, 3], ["ink", 1, 9], ["pad", 4, 2]]
  grid = {"kind": "grid", "name": "grid", "out": f"{H}/grid.csv", "columns": cols, "rows": rows}
  out.append(task("gui_grid_edit", "gui", "In the grid, set the qty of 'ink' to 42 and click Save.",
                  [app(grid)],
                  {"type": "csv_equals", "path": "grid.csv", "rows": [cols, ["pen", 2, 3], ["ink", 42, 9], ["pad", 4, 2]]},
                  [click("grid.cell:1:1"), key("ctrl", "a"), key("shift", "End"), type_("42"), click("grid.save")],
                  [click("grid.cell:2:1"), key("ctrl", "a"), key("shift", "End"), type_("42"), click("grid.save")],
                  apps=["tk"], skills=["spreadsheet"]))
  todo = {"kind": "todo", "name": "todo", "out": f"{H}/todo.json", "items": ["write report", "call bob", "old task"]}
  items = lambda **done: [{"text": t, "done": done.get(t.replace(" ", "_"), False)} for t in todo["items"]]
  out.append(task("gui_todo_add", "gui", "Add the item 'buy milk' to the todo list and click Save.", [app(todo)],
                  {"type": "app_state", "path": "todo.json", "expected": {"items": items() + [{"text": "buy milk", "done": False}]}},
                  [click("todo.entry"), type_("buy milk"), click("todo.add"), click("todo.save")],
                  [click("todo.entry"), type_("buy silk"), click("todo.add"), click("todo.save")], apps=["tk"], skills=["list"]))
  out.append(task("gui_todo_done", "gui", "Mark 'write report' as done in the todo list and click Save.", [app(todo)],
                  {"type": "app_state", "path": "todo.json", "expected": {"items": items(write_report=True)}},
                  [click("todo.item:write report"), click("todo.done"), click("todo.save")],
                  [click("todo.item:call bob"), click("todo.done"), click("todo.save")], apps=["tk"], skills=["list"]))
  out.append(task("gui_todo_delete", "gui", "Delete 'old task' from the todo list and click Save.", [app(todo)],
                  {"type": "app_state", "path": "todo.json", "expected": {"items": items()[:2]}},
                  [click("todo.item:old task"), click("todo.delete"), click("todo.save")],
                  [click("todo.item:call bob"), click("todo.delete"), click("todo.save")], apps=["tk"], skills=["list"]))
  files = [{"type": "text", "path": f"docs/{n}", "content": n} for n in ("draft.txt", "notes.txt")]
  out.append(task("gui_rename_dialog", "gui", "Using the renamer window, rename draft.txt to final.txt.",
                  files + [app({"kind": "renamer", "name": "renamer", "directory": f"{H}/docs"})],
                  {"type": "dir_listing", "path": "docs", "equals": ["final.txt", "notes.txt"]},
                  [click("renamer.file:draft.txt"), click("renamer.entry"), type_("final.txt"), click("renamer.rename")],
                  [click("renamer.file:draft.txt"), click("renamer.entry"), type_("final.text"), click("renamer.rename")],
                  apps=["tk"], skills=["files"]))
  out.append(task("gui_counter", "gui", "Set the counter to 3 using its + and - buttons, then click Save.",
                  [app({"kind": "counter", "name": "counter", "out": f"{H}/counter.json", "start": 0})],
                  {"type": "app_state", "path": "counter.json", "expected": {"value": 3}},
                  [click("counter.plus")] * 3 + [click("counter.save")],
                  [click("counter.plus")] * 2 + [click("counter.save")], apps=["tk"], skills=["click"], easy=True))
  # the line to add is read off the screen: a spray typed a quoted 'status: done' where it clicked
  notes = "title: report\nowner: ada\nstatus: open\n"
  out.append(task("gui_editor_save", "gui",
                  "In the editor, add a last line 'lines: N' where N is how many lines the text has now, "
                  "then save with Ctrl+S.",
                  [app({"kind": "editor", "name": "editor", "out": f"{H}/notes.txt", "content": notes})],
                  {"type": "file_text", "path": "notes.txt", "equals": notes + "lines: 3"},
                  [click("editor.text"), key("ctrl", "End"), type_("lines: 3"), key("ctrl", "s")],
                  [click("editor.text"), key("ctrl", "End"), type_("lines: 4"), key("ctrl", "s")],
                  apps=["tk"], skills=["keyboard"]))
  fruits = [f"item {i:02d}" for i in range(40)]
  out.append(task("gui_picker_scroll", "gui", "Scroll the list, select 'item 33' and click Choose.",
                  [app({"kind": "picker", "name": "picker", "out": f"{H}/choice.json", "items": fruits})],
                  {"type": "app_state", "path": "choice.json", "expected": {"chosen": "item 33"}},
                  [move("picker.list"), scroll(-1500), wait(0.5), click("picker.item:item 33"), click("picker.choose")],
                  [move("picker.list"), scroll(-1500), wait(0.5), click("picker.item:item 32"), click("picker.choose")],
                  apps=["tk"], skills=["scroll"]))
  board = {"kind": "board", "name": "board", "out": f"{H}/board.json", "box": [80, 80], "target": [450, 200]}
  out.append(task("gui_drag_box", "gui", "Drag the blue box into the green square, then click Save.", [app(board)],
                  {"type": "json_point_in", "path": "board.json", "key": "box", "box": [410, 160, 490, 240]},
                  [move("board.box"), drag("board.target"), click("board.save")],
                  [move("board.box"), drag("board.canvas"), click("board.save")], apps=["tk"], skills=["drag"]))
  return out


# ---- hybrid ----------------------------------------------------------------------------------
def _hybrid() -> list[dict[str, Any]]:
  person = {"Name": "Grace Hopper", "Email": "grace@navy.mil", "City": "Arlington"}
  form = {"kind": "form", "name": "form", "out": f"{H}/form.json", "fields": list(person)}
  cols = ["item", "total"]
  orders = [["item", "amount"], ["pen", 2], ["ink", 5], ["pen", 3], ["pad", 1], ["ink", 1]]
  todo_lines = ["water plants", "pay rent"]
  photos = {"IMG_001.jpg": "beach.jpg", "IMG_002.jpg": "city.jpg", "IMG_003.jpg": "forest.jpg"}
  return [
      task("hyb_form_from_csv", "hybrid", "Fill the form window with the person in contact.csv, then click Save.",
           [{"type": "csv", "path": "contact.csv", "rows": [list(person), list(person.values())]}, app(form)],
           {"type": "app_state", "path": "form.json", "expected": person},
           [bash("cat contact.csv")] + fill("form", person) + [click("form.save")],
           [bash("cat contact.csv")] + fill("form", {**person, "Email": "grace@navy.com"}) + [click("form.save")],
           apps=["tk", "csv"], skills=["form"]),
      task("hyb_rename_listed", "hybrid", "Rename the files in photos/ as the renamer window's notes say.",
           [{"type": "text", "path": f"photos/{a}", "content": a} for a in photos]
           + [app({"kind": "renamer", "name": "renamer", "directory": f"{H}/photos",
                   "notes": [f"{a} -> {b}" for a, b in photos.items()]})],
           {"type": "dir_listing", "path": "photos", "equals": sorted(photos.values())},
           [bash("cd photos && " + " && ".join(f"mv {a} {b}" for a, b in photos.items()) + "; cd ..")],
           [bash("cd photos && " + " && ".join(f"mv {a} {b}" for a, b in list(photos.items())[:2]) + "; cd ..")],
           apps=["tk"], skills=["files"]),
      task("hyb_grid_totals", "hybrid",
           "orders.csv lists item amounts. Enter each item's total amount in the grid's total column, then Save.",
           [{"type": "csv", "path": "orders.csv", "rows": orders},
            app({"kind": "grid", "name": "grid", "out": f"{H}/grid.csv", "columns": cols,
                 "rows": [["ink", ""], ["pad", ""], ["pen", ""]]})],
           {"type": "csv_equals", "path": "grid.csv", "rows": [cols, ["ink", 6], ["pad", 1], ["pen", 5]]},
           [bash("python -c \"import pandas as pd; print(pd.read_csv('orders.csv').groupby('item').amount.sum())\"")]
           + [c for r, v in enumerate(["6", "1", "5"]) for c in (click(f"grid.cell:{r}:1"), type_(v))] + [click("grid.save")],
           [bash("cat orders.csv")]
           + [c for r, v in enumerate(["6", "1", "4"]) for c in (click(f"grid.cell:{r}:1"), type_(v))] + [click("grid.save")],
           apps=["tk", "csv"], skills=["spreadsheet"]),
      task("hyb_code_on_screen", "hybrid", "The window shows an access code. Write it to code.txt in the home directory.",
           [app({"kind": "buttons", "name": "code", "buttons": [], "prompt": "Access code: 7291-XK"})],
           {"type": "file_text", "path": "code.txt", "equals": "7291-XK"},
           [bash("echo 7291-XK > code.txt")], [bash("echo 7291-KX > code.txt")], apps=["tk"], skills=["read"]),
      # todo.txt holds done items too: typing every line of every file into the window doesn't pass
      task("hyb_todo_from_file", "hybrid",
           "Add the open items of todo.txt (its '- [ ]' lines, without that mark) to the todo window, then Save.",
           [{"type": "text", "path": "todo.txt",
             "content": f"- [ ] {todo_lines[0]}\n- [x] call mom\n- [ ] {todo_lines[1]}\n"},
            app({"kind": "todo", "name": "todo", "out": f"{H}/todo.json", "items": []})],
           {"type": "app_state", "path": "todo.json", "expected": {"items": [{"text": t, "done": False} for t in todo_lines]}},
           [bash("cat todo.txt")] + [c for t in todo_lines for c in (click("todo.entry"), type_(t), click("todo.add"))]
           + [click("todo.save")],
           [bash("cat todo.txt")] + [click("todo.entry"), type_(todo_lines[0]), click("todo.add"), click("todo.save")],
           apps=["tk"], skills=["list"]),
      task("hyb_editor_sum", "hybrid",
           "Save the editor's numbers to numbers.txt with Ctrl+S, then write their sum to sum.txt with the shell.",
           [app({"kind": "editor", "name": "editor", "out": f"{H}/numbers.txt", "content": "4\n8\n15\n16\n23\n42"})],
           {"type": "all", "checks": [{"type": "file_exists", "path": "numbers.txt"},
                                      {"type": "file_text", "path": "sum.txt", "equals": "108"}]},
           [click("editor.text"), key("ctrl", "s"), bash("paste -sd+ numbers.txt | bc > sum.txt")],
           [click("editor.text"), key("ctrl", "s"), bash("echo 107 > sum.txt")], apps=["tk"], skills=["keyboard"]),
      task("hyb_grid_to_xlsx", "hybrid",
           "Set the 'ink' qty in the grid to 99 and Save (it writes grid.csv), then convert grid.csv to grid.xlsx "
           "(same cells, first sheet, numbers as numbers).",
           [app({"kind": "grid", "name": "grid", "out": f"{H}/grid.csv", "columns": ["item", "qty"],
                 "rows": [["pen", 2], ["ink", 1]]})],
           {"type": "xlsx_cells", "path": "grid.xlsx", "cells": {"A1": "item", "A3": "ink", "B2": 2, "B3": 99}},
           [click("grid.cell:1:1"), key("ctrl", "a"), key("shift", "End"), type_("99"), click("grid.save"),
            bash("python -c \"import pandas as pd; pd.read_csv('grid.csv').to_excel('grid.xlsx', index=False)\"")],
           [click("grid.save"),
            bash("python -c \"import pandas as pd; pd.read_csv('grid.csv').to_excel('grid.xlsx', index=False)\"")],
           apps=["tk", "xlsx"], skills=["spreadsheet"]),
      task("hyb_rename_then_list", "hybrid",
           "Rename report.txt to report_final.txt in the renamer window, then write `ls docs` output to listing.txt.",
           [{"type": "text", "path": f"docs/{n}", "content": n} for n in ("report.txt", "zeta.txt")]
           + [app({"kind": "renamer", "name": "renamer", "directory": f"{H}/docs"})],
           {"type": "file_text", "path": "listing.txt", "equals": "report_final.txt\nzeta.txt"},
           [click("renamer.file:report.txt"), click("renamer.entry"), type_("report_final.txt"),
            click("renamer.rename"), bash("ls docs > listing.txt")],
           [bash("ls docs > listing.txt"), click("renamer.file:report.txt"), click("renamer.entry"),
            type_("report_final.txt"), click("renamer.rename")], apps=["tk"], skills=["files"]),
  ]


def builtin_task_dicts() -> list[dict[str, Any]]:
  return _terminal() + _gui() + _hybrid()


def builtin_packages() -> list[TaskPackage]:
  return [package_from_dict(d, source=f"builtin:{d['id']}") for d in builtin_task_dicts()]
