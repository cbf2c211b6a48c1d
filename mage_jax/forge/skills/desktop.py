"""Desktop (the built-in Tk apps): click, fill forms, edit grids, manage lists, rename, count, type, scroll, drag.

GUI references act through '@<app>.<widget>' coordinates (resolved from the app's live layout);
where the app's result is a plain file (renamer, editor, grid) a terminal reference solves it too.
"""
from __future__ import annotations

from mage_jax.forge.skills.base import (CITIES, ITEMS, NAMES, WORDS, H, app, bash, capability, click, define, distinct, domain,
                                        drag, fill, key, move, package, py, scroll, type_, wait)

domain("desktop", "The built-in Tk desktop apps driven by mouse and keyboard (and the shell where it helps)")
capability("desktop.click", "Click the right button")
capability("desktop.form", "Fill in form fields and checkboxes")
capability("desktop.grid", "Edit cells of a grid window")
capability("desktop.todo", "Add, complete and delete list items")
capability("desktop.files", "Rename files through a file window")
capability("desktop.widgets", "Counters, text editors, long lists and drag and drop")
TK = ("tk",)


def _state(path, expected):
  return {"type": "app_state", "path": path, "expected": expected}


def sk(id, desc, build, sample, kind="gui", apps=TK):
  define(id, desc, sample, build, kind=kind, apps=apps)


# ---- click -------------------------------------------------------------------------------------
def _buttons(p):
  return app({"kind": "buttons", "name": "buttons", "out": f"{H}/clicked.json", "buttons": p["labels"], "prompt": "Choose one"})


sk("desktop.click.named_button", "Click the button with a given label",
   lambda p: package(f"Click the button labeled {p['labels'][p['pick']]}.", [_buttons(p)],
                     _state("clicked.json", {"clicked": p["labels"][p["pick"]]}),
                     [click(f"buttons.button:{p['labels'][p['pick'] - 1]}")], gui=[click(f"buttons.button:{p['labels'][p['pick']]}")]),
   lambda r: {"labels": [w.title() for w in distinct(r, WORDS, 4)], "pick": r.randint(0, 3)})

sk("desktop.click.button_named_in_file", "Click the button that a text file names",
   lambda p: package("choice.txt names the city to pick. Click the button with that city's name.",
                     [{"type": "text", "path": "choice.txt", "content": f"pick: {p['labels'][p['pick']]}\n"}, _buttons(p)],
                     _state("clicked.json", {"clicked": p["labels"][p["pick"]]}),
                     [bash("cat choice.txt"), click(f"buttons.button:{p['labels'][p['pick'] - 1]}")],
                     hybrid=[bash("cat choice.txt"), click(f"buttons.button:{p['labels'][p['pick']]}")]),
   lambda r: {"labels": distinct(r, CITIES, 4), "pick": r.randint(0, 3)}, kind="hybrid", apps=("tk", "text"))

# ---- form --------------------------------------------------------------------------------------
def _form(fields, boxes=(), prompt=None):
  return app({"kind": "form", "name": "form", "out": f"{H}/form.json", "fields": list(fields), "checkboxes": list(boxes),
              **({"prompt": prompt} if prompt else {})})


def _person(r):
  n = r.choice(NAMES)
  return {"person": {"Name": n, "Email": f"{n.lower()}@{r.choice(WORDS)}.org", "City": r.choice(CITIES)}}


sk("desktop.form.fill_fields", "Type given values into the fields of a form and save",
   lambda p: package(f"In the form, enter city {p['person']['City']}, email {p['person']['Email']} and name "
                     f"{p['person']['Name']}, then click Save.", [_form(p["person"])], _state("form.json", p["person"]),
                     fill("form", {**p["person"], "City": "Paris"}) + [click("form.save")],
                     gui=fill("form", p["person"]) + [click("form.save")]), _person)

sk("desktop.form.fill_from_csv", "Fill a form with a record read from a CSV file",
   lambda p: package("Fill the form window with the person in contact.csv, then click Save.",
                     [{"type": "csv", "path": "contact.csv", "rows": [list(p["person"]), list(p["person"].values())]},
                      _form(p["person"])], _state("form.json", p["person"]),
                     [bash("cat contact.csv")] + fill("form", {**p["person"], "Name": "Bob"}) + [click("form.save")],
                     hybrid=[bash("cat contact.csv")] + fill("form", p["person"]) + [click("form.save")]),
   _person, kind="hybrid", apps=("tk", "csv"))

sk("desktop.form.tick_boxes", "Tick exactly the listed checkboxes and save",
   lambda p: package("Tick the boxes " + " and ".join(p["on"]) + " (and no others), then click Save.",
                     [_form([], p["boxes"])], _state("form.json", {b: b in p["on"] for b in p["boxes"]}),
                     [click(f"form.check:{p['on'][0]}"), click("form.save")],
                     gui=[click(f"form.check:{b}") for b in p["on"]] + [click("form.save")]),
   lambda r: (lambda boxes: {"boxes": boxes, "on": sorted(r.sample(boxes, 2), key=boxes.index)})(
       [w.title() for w in distinct(r, WORDS, 4)]))

# ---- grid --------------------------------------------------------------------------------------
_COLS = ["item", "qty", "price"]


def _grid_rows(r, n=3):
  return [[i, r.randint(1, 9), r.randint(2, 30)] for i in distinct(r, ITEMS, n)]


def _grid(rows):
  return app({"kind": "grid", "name": "grid", "out": f"{H}/grid.csv", "columns": _COLS, "rows": rows})


def _set_cell(r, c, v):
  return [click(f"grid.cell:{r}:{c}"), key("ctrl", "a"), key("shift", "End"), type_(str(v))]


sk("desktop.grid.edit_cell", "Change one grid cell found by its row label and save",
   lambda p: package(f"In the grid, set the price of {p['rows'][p['pick']][0]} to {p['value']} and click Save.",
                     [_grid(p["rows"])],
                     {"type": "csv_equals", "path": "grid.csv", "rows": [_COLS] + [r if i != p["pick"] else [r[0], r[1], p["value"]]
                                                                                   for i, r in enumerate(p["rows"])]},
                     _set_cell((p["pick"] + 1) % 3, 2, p["value"]) + [click("grid.save")],
                     gui=_set_cell(p["pick"], 2, p["value"]) + [click("grid.save")],
                     terminal=[py("import csv\nrows = " + repr([_COLS] + [r if i != p["pick"] else [r[0], r[1], p["value"]]
                                                                       for i, r in enumerate(p["rows"])])
                                  + "\ncsv.writer(open('grid.csv', 'w', newline='')).writerows(rows)", "Write the grid's file")]),
   lambda r: {"rows": _grid_rows(r), "pick": r.randint(0, 2), "value": r.randint(40, 90)}, kind="hybrid")

sk("desktop.grid.fill_from_csv", "Fill a grid column with totals computed from a CSV file",
   lambda p: package("orders.csv lists item quantities. Enter each item's total qty in the grid's qty column, then Save.",
                     [{"type": "csv", "path": "orders.csv", "rows": [["item", "qty"]] + p["orders"]},
                      app({"kind": "grid", "name": "grid", "out": f"{H}/grid.csv", "columns": ["item", "qty"],
                           "rows": [[i, ""] for i in p["items"]]})],
                     {"type": "csv_equals", "path": "grid.csv", "rows": [["item", "qty"]] + [[i, t] for i, t in zip(p["items"], p["totals"])]},
                     [bash("cat orders.csv")] + [c for r, t in enumerate(p["totals"]) for c in (click(f"grid.cell:{r}:1"), type_(str(t + (r == 0))))]
                     + [click("grid.save")],
                     hybrid=[bash("sort orders.csv")] + [c for r, t in enumerate(p["totals"]) for c in (click(f"grid.cell:{r}:1"), type_(str(t)))]
                     + [click("grid.save")]),
   lambda r: (lambda items, orders: {"items": items, "orders": orders,
                                     "totals": [sum(q for i, q in orders if i == it) for it in items]})(
       *(lambda items: (items, r.sample([[it, r.randint(1, 9)] for it in items for _ in range(2)], 6)))(sorted(distinct(r, ITEMS, 3)))),
   kind="hybrid", apps=("tk", "csv"))

# ---- todo --------------------------------------------------------------------------------------
def _todo(items):
  return app({"kind": "todo", "name": "todo", "out": f"{H}/todo.json", "items": items})


def _todo_sample(r):
  return {"items": [f"{v} {w}" for v, w in zip(["call", "email", "fix", "buy"], distinct(r, WORDS, 4))], "pick": r.randint(0, 3)}


def _items(items, done=None, drop=None):
  return {"items": [{"text": t, "done": t == done} for t in items if t != drop]}


sk("desktop.todo.add_items", "Add two items to a todo list and save",
   lambda p: package(f"Add the items {p['new'][0]} and then {p['new'][1]} to the todo list, then click Save.",
                     [_todo(p["items"])], _state("todo.json", {"items": _items(p["items"])["items"] + [{"text": t, "done": False} for t in p["new"]]}),
                     [click("todo.entry"), type_(p["new"][0]), click("todo.add"), click("todo.save")],
                     gui=[c for t in p["new"] for c in (click("todo.entry"), type_(t), click("todo.add"))] + [click("todo.save")]),
   lambda r: {**_todo_sample(r), "new": [f"plan {w}" for w in distinct(r, NAMES, 2)]})

sk("desktop.todo.mark_done", "Mark one todo item done and save",
   lambda p: package(f"Mark {p['items'][p['pick']]} as done in the todo list and click Save.", [_todo(p["items"])],
                     _state("todo.json", _items(p["items"], done=p["items"][p["pick"]])),
                     [click(f"todo.item:{p['items'][p['pick'] - 1]}"), click("todo.done"), click("todo.save")],
                     gui=[click(f"todo.item:{p['items'][p['pick']]}"), click("todo.done"), click("todo.save")]), _todo_sample)

sk("desktop.todo.delete_item", "Delete one todo item and save",
   lambda p: package(f"Delete {p['items'][p['pick']]} from the todo list and click Save.", [_todo(p["items"])],
                     _state("todo.json", _items(p["items"], drop=p["items"][p["pick"]])),
                     [click(f"todo.item:{p['items'][p['pick'] - 1]}"), click("todo.delete"), click("todo.save")],
                     gui=[click(f"todo.item:{p['items'][p['pick']]}"), click("todo.delete"), click("todo.save")]), _todo_sample)

# ---- files -------------------------------------------------------------------------------------
sk("desktop.files.rename_in_window", "Rename a file with the renamer window (or the shell)",
   lambda p: package(f"Rename {p['old']} in docs/ to {p['new']} (the renamer window shows docs/).",
                     [{"type": "text", "path": f"docs/{n}", "content": f"draft {i}"} for i, n in enumerate([p["old"]] + p["others"])]
                     + [app({"kind": "renamer", "name": "renamer", "directory": f"{H}/docs"})],
                     {"type": "dir_listing", "path": "docs", "equals": [p["new"]] + p["others"]},
                     [click(f"renamer.file:{p['old']}"), click("renamer.entry"), type_(p["new"].upper()), click("renamer.rename")],
                     gui=[click(f"renamer.file:{p['old']}"), click("renamer.entry"), type_(p["new"]), click("renamer.rename")],
                     terminal=[bash(f"mv docs/{p['old']} docs/{p['new']}")]),
   lambda r: (lambda w: {"old": f"{w[0]}.txt", "new": f"{w[1]}_final.txt", "others": [f"{w[2]}.txt", f"{w[3]}.txt"]})(
       distinct(r, WORDS, 4)), kind="hybrid")

sk("desktop.files.rename_by_notes", "Rename several files as the window's notes say",
   lambda p: package("Rename the files in photos/ as the renamer window's notes say.",
                     [{"type": "text", "path": f"photos/{a}", "content": f"image {i}"} for i, a in enumerate(p["map"])]
                     + [app({"kind": "renamer", "name": "renamer", "directory": f"{H}/photos",
                             "notes": [f"{a} -> {b}" for a, b in p["map"].items()]})],
                     {"type": "dir_listing", "path": "photos", "equals": sorted(p["map"].values())},
                     [bash("cd photos && " + " && ".join(f"mv {a} {b}" for a, b in list(p["map"].items())[:1]) + "; cd ~")],
                     gui=[c for a, b in p["map"].items() for c in (click(f"renamer.file:{a}"), click("renamer.entry"), type_(b),
                                                                   click("renamer.rename"), wait(0.3))],
                     terminal=[bash("cd photos && " + " && ".join(f"mv {a} {b}" for a, b in p["map"].items()) + "; cd ~")]),
   lambda r: {"map": {f"IMG_{i:03d}.jpg": f"{w}.jpg" for i, w in zip(r.sample(range(1, 999), 2), distinct(r, WORDS, 2))}},
   kind="hybrid")

# ---- widgets -----------------------------------------------------------------------------------
sk("desktop.widgets.counter_to_value", "Step a counter to a target with its + and - buttons and save",
   lambda p: package(f"Set the counter to {p['target']} using its + and - buttons, then click Save.",
                     [app({"kind": "counter", "name": "counter", "out": f"{H}/counter.json", "start": p["start"]})],
                     _state("counter.json", {"value": p["target"]}),
                     [click("counter.plus" if p["target"] > p["start"] else "counter.minus")] * (abs(p["target"] - p["start"]) - 1)
                     + [click("counter.save")],
                     gui=[click("counter.plus" if p["target"] > p["start"] else "counter.minus")] * abs(p["target"] - p["start"])
                     + [click("counter.save")]),
   lambda r: (lambda s: {"start": s, "target": s + r.choice([-3, -2, 2, 3, 4])})(r.randint(0, 9)))

sk("desktop.widgets.editor_append", "Append a line in a text editor window and save with Ctrl+S",
   lambda p: package(f"In the editor, add a last line reading signed {p['who']}, then save with Ctrl+S.",
                     [app({"kind": "editor", "name": "editor", "out": f"{H}/letter.txt", "content": p["text"]})],
                     {"type": "file_text", "path": "letter.txt", "equals": p["text"] + f"\nsigned {p['who']}"},
                     [click("editor.text"), key("ctrl", "End"), type_(f"\nsigned {p['who'].lower()}"), key("ctrl", "s")],
                     gui=[click("editor.text"), key("ctrl", "End"), type_(f"\nsigned {p['who']}"), key("ctrl", "s")],
                     terminal=[py(f"open('letter.txt', 'w').write({p['text'] + chr(10) + 'signed ' + p['who']!r})", "Write the file")]),
   lambda r: {"who": r.choice(NAMES), "text": f"Dear {r.choice(NAMES)},\nthe {r.choice(WORDS)} shipment left {r.choice(CITIES)}."},
   kind="hybrid")

sk("desktop.widgets.scroll_and_choose", "Scroll a long list to an item, select it and choose",
   lambda p: package(f"Scroll the list, select {p['items'][p['pick']]} and click Choose.",
                     [app({"kind": "picker", "name": "picker", "out": f"{H}/choice.json", "items": p["items"]})],
                     _state("choice.json", {"chosen": p["items"][p["pick"]]}),
                     [move("picker.list"), scroll(-1500), wait(0.5), click(f"picker.item:{p['items'][p['pick'] - 1]}"), click("picker.choose")],
                     gui=[move("picker.list"), scroll(-1500), wait(0.5), click(f"picker.item:{p['items'][p['pick']]}"), click("picker.choose")]),
   lambda r: {"items": [f"{w} {i:02d}" for i, w in enumerate(r.choices(WORDS, k=40))], "pick": r.randint(34, 38)})

sk("desktop.widgets.drag_to_target", "Drag a box onto a target square and save",
   lambda p: package("Drag the blue box into the green square, then click Save.",
                     [app({"kind": "board", "name": "board", "out": f"{H}/board.json", "box": p["box"], "target": p["target"]})],
                     {"type": "json_point_in", "path": "board.json", "key": "box",
                      "box": [p["target"][0] - 40, p["target"][1] - 40, p["target"][0] + 40, p["target"][1] + 40]},
                     [move("board.box"), drag("board.canvas"), click("board.save")],
                     gui=[move("board.box"), drag("board.target"), click("board.save")]),
   lambda r: {"box": [r.randint(40, 150), r.randint(40, 120)], "target": [r.randint(350, 540), r.randint(120, 240)]})
