"""Small Tk apps for the built-in tasks. Run inside the sandbox:

  python tkapps.py <config.json>

The config names the app `kind`, its `name`, its `out` file and kind-specific
fields. Every app sits at +0+0 (Xvfb has no window manager), places widgets
on a fixed grid and keeps `/tmp/.mage_layout/<name>.json` up to date with the
screen rectangles [x, y, w, h] of its named widgets, so reference solutions
can click real coordinates. State is written to `out` when the user saves.

JSON state keeps the app's history under "events": every save or choice, in order, with the state
it recorded. A checker can then tell "X was chosen" from "every option was tried and X came last"
(checkers.app_state).
"""
import csv
import json
import os
import sys
import tkinter as tk

LAYOUT_DIR = "/tmp/.mage_layout"
ROW_H, PAD = 36, 12
FONT = ("DejaVu Sans", 12)


class App:
  def __init__(self, cfg):
    self.cfg, self.name, self.out = cfg, cfg.get("name", cfg["kind"]), cfg.get("out")
    self.root = tk.Tk()
    self.root.title(cfg.get("title", self.name))
    self.root.geometry(f"{cfg.get('width', 640)}x{cfg.get('height', 480)}+0+0")
    self.root.option_add("*Font", FONT)
    self.widgets = {}
    self.events = []
    self._last_layout = None
    self.y = PAD
    if cfg.get("prompt"):
      self.label(cfg["prompt"], "prompt")

  # layout helpers: one widget per row unless x is given
  def place(self, w, key, x=PAD, width=300, height=ROW_H - 6, advance=True):
    w.place(x=x, y=self.y, width=width, height=height)
    self.widgets[key] = w
    if advance:
      self.y += ROW_H
    return w

  def label(self, text, key, **kw):
    return self.place(tk.Label(self.root, text=text, anchor="w"), key, width=kw.pop("width", 600), **kw)

  def button(self, text, key, command, **kw):
    return self.place(tk.Button(self.root, text=text, command=command), key, width=kw.pop("width", 120), **kw)

  def extra_layout(self):
    return {}

  def write_layout(self):
    self.root.update_idletasks()
    layout = {k: [w.winfo_rootx(), w.winfo_rooty(), w.winfo_width(), w.winfo_height()]
              for k, w in self.widgets.items() if w.winfo_ismapped()}
    layout.update(self.extra_layout())
    if layout != self._last_layout:
      os.makedirs(LAYOUT_DIR, exist_ok=True)
      tmp = f"{LAYOUT_DIR}/.{self.name}.tmp"
      with open(tmp, "w") as f:
        json.dump(layout, f)
      os.replace(tmp, f"{LAYOUT_DIR}/{self.name}.json")
      self._last_layout = layout
    self.root.after(100, self.write_layout)

  def save_json(self, data, action="save"):
    data = json.loads(json.dumps(data))  # a snapshot: later edits must not rewrite the history
    self.events.append({"action": action, "state": data})
    with open(self.out, "w") as f:
      json.dump({**data, "events": self.events}, f, indent=1)

  def run(self):
    self.root.after(50, self.write_layout)
    self.root.mainloop()


class Buttons(App):
  """A row of buttons; clicking one saves {"clicked": label}. Optional `places` {label: [x, y]}
  puts a button anywhere in the window and `colors` {label: Tk colour} paints it (tasks that
  must be solved by looking at the screen: tasks/proof_family.py)."""
  def __init__(self, cfg):
    super().__init__(cfg)
    places, colors, row_y = cfg.get("places", {}), cfg.get("colors", {}), self.y
    for i, text in enumerate(cfg["buttons"]):
      x, self.y = places.get(text, (PAD + i * 140, row_y))
      b = self.button(text, f"button:{text}", lambda t=text: self.save_json({"clicked": t}, "click"),
                      x=x, advance=False)
      if text in colors:
        b.config(bg=colors[text], activebackground=colors[text])
    self.y = row_y


class Form(App):
  """Labelled entries (+ optional checkboxes) and a Save button -> JSON of values."""
  def __init__(self, cfg):
    super().__init__(cfg)
    self.entries, self.checks = {}, {}
    for field in cfg.get("fields", []):
      self.label(field, f"label:{field}", width=180, advance=False)
      self.entries[field] = self.place(tk.Entry(self.root), f"field:{field}", x=200, width=300)
    for box in cfg.get("checkboxes", []):
      var = tk.IntVar(value=0)
      self.checks[box] = var
      self.place(tk.Checkbutton(self.root, text=box, variable=var, anchor="w"), f"check:{box}", width=300)
    self.button("Save", "save", self.save)
    self.root.bind("<Control-s>", lambda e: self.save())

  def save(self):
    data = {k: e.get() for k, e in self.entries.items()}
    data.update({k: bool(v.get()) for k, v in self.checks.items()})
    self.save_json(data)


class Grid(App):
  """A spreadsheet-like grid of entries with column headers; Save -> CSV."""
  def __init__(self, cfg):
    super().__init__(cfg)
    cols, rows = cfg["columns"], cfg["rows"]
    self.cells = []
    for c, head in enumerate(cols):
      self.label(head, f"header:{head}", x=PAD + c * 130, width=120, advance=False)
    self.y += ROW_H
    for r, row in enumerate(rows):
      cells = []
      for c in range(len(cols)):
        e = tk.Entry(self.root)
        e.insert(0, str(row[c]) if c < len(row) and row[c] is not None else "")
        cells.append(self.place(e, f"cell:{r}:{c}", x=PAD + c * 130, width=120, advance=False))
      self.cells.append(cells)
      self.y += ROW_H
    self.button("Save", "save", self.save)

  def save(self):
    with open(self.out, "w", newline="") as f:
      w = csv.writer(f)
      w.writerow(self.cfg["columns"])
      for cells in self.cells:
        w.writerow([e.get() for e in cells])


class Todo(App):
  """A todo list: entry + Add, a list, Done/Delete for the selected item, Save -> JSON."""
  def __init__(self, cfg):
    super().__init__(cfg)
    self.items = [{"text": t, "done": False} for t in cfg.get("items", [])]
    self.entry = self.place(tk.Entry(self.root), "entry", width=300, advance=False)
    self.button("Add", "add", self.add, x=330, advance=False)
    self.root.bind("<Return>", lambda e: self.add())
    self.y += ROW_H
    self.listbox = self.place(tk.Listbox(self.root, activestyle="none", exportselection=False), "list",
                              width=440, height=8 * 24, advance=False)
    self.y += 8 * 24 + PAD
    self.button("Done", "done", self.done, advance=False)
    self.button("Delete", "delete", self.delete, x=150, advance=False)
    self.button("Save", "save", lambda: self.save_json({"items": self.items}), x=290)
    self.refresh()

  def refresh(self):
    self.listbox.delete(0, "end")
    for it in self.items:
      self.listbox.insert("end", ("[x] " if it["done"] else "[ ] ") + it["text"])

  def add(self):
    text = self.entry.get().strip()
    if text:
      self.items.append({"text": text, "done": False})
      self.entry.delete(0, "end")
      self.refresh()

  def selected(self):
    sel = self.listbox.curselection()
    return sel[0] if sel else None

  def done(self):
    i = self.selected()
    if i is not None:
      self.items[i]["done"] = True
      self.refresh()

  def delete(self):
    i = self.selected()
    if i is not None:
      del self.items[i]
      self.refresh()

  def extra_layout(self):
    return rows_layout(self.listbox, "item", [it["text"] for it in self.items])


def rows_layout(listbox, prefix, keys):
  """Screen rectangles of the visible listbox rows (they move when the list scrolls)."""
  out = {}
  for i, key in enumerate(keys):
    box = listbox.bbox(i)
    if box:
      out[f"{prefix}:{key}"] = [listbox.winfo_rootx() + box[0], listbox.winfo_rooty() + box[1],
                                max(box[2], 200), box[3]]
  return out


class Renamer(App):
  """Lists the files of a directory; select one, type a new name, click Rename."""
  def __init__(self, cfg):
    super().__init__(cfg)
    self.dir = cfg["directory"]
    self.listbox = self.place(tk.Listbox(self.root, activestyle="none", exportselection=False), "list",
                              width=440, height=8 * 24, advance=False)
    self.y += 8 * 24 + PAD
    self.label("New name:", "label:new", width=120, advance=False)
    self.entry = self.place(tk.Entry(self.root), "entry", x=140, width=300)
    self.button("Rename", "rename", self.rename)
    self.status = self.label("", "status")
    for line in cfg.get("notes", []):
      self.label(line, f"note:{line}")
    self.refresh()

  def refresh(self):
    self.files = sorted(os.listdir(self.dir))
    self.listbox.delete(0, "end")
    for f in self.files:
      self.listbox.insert("end", f)

  def rename(self):
    sel = self.listbox.curselection()
    new = self.entry.get().strip()
    if not sel or not new or "/" in new:
      self.status.config(text="select a file and type a name")
      return
    os.rename(os.path.join(self.dir, self.files[sel[0]]), os.path.join(self.dir, new))
    self.entry.delete(0, "end")
    self.status.config(text=f"renamed to {new}")
    self.refresh()

  def extra_layout(self):
    return rows_layout(self.listbox, "file", self.files)


class Picker(App):
  """A long scrollable list; select an item and click Choose -> JSON."""
  def __init__(self, cfg):
    super().__init__(cfg)
    self.items = cfg["items"]
    self.listbox = self.place(tk.Listbox(self.root, activestyle="none", exportselection=False), "list",
                              width=440, height=8 * 24, advance=False)
    self.y += 8 * 24 + PAD
    for it in self.items:
      self.listbox.insert("end", it)
    self.button("Choose", "choose", self.choose)

  def choose(self):
    sel = self.listbox.curselection()
    if sel:
      self.save_json({"chosen": self.items[sel[0]]}, "choose")

  def extra_layout(self):
    return rows_layout(self.listbox, "item", self.items)


class Counter(App):
  """A number with - and + buttons; Save -> JSON."""
  def __init__(self, cfg):
    super().__init__(cfg)
    self.value = cfg.get("start", 0)
    self.shown = self.label(str(self.value), "value", width=120)
    self.button("-", "minus", lambda: self.bump(-1), width=60, advance=False)
    self.button("+", "plus", lambda: self.bump(1), x=90, width=60)
    self.button("Save", "save", lambda: self.save_json({"value": self.value}))

  def bump(self, d):
    self.value += d
    self.shown.config(text=str(self.value))


class Editor(App):
  """A text area; Ctrl+S saves its content to `out` (no button: keyboard only)."""
  def __init__(self, cfg):
    super().__init__(cfg)
    self.text = self.place(tk.Text(self.root), "text", width=600, height=300)
    self.text.insert("1.0", cfg.get("content", ""))
    self.text.bind("<Control-s>", self.save)

  def save(self, event=None):
    with open(self.out, "w") as f:
      f.write(self.text.get("1.0", "end-1c"))
    return "break"


class Board(App):
  """A canvas with a draggable box and a target zone; Save -> the box position."""
  def __init__(self, cfg):
    super().__init__(cfg)
    self.canvas = self.place(tk.Canvas(self.root, bg="white"), "canvas", width=600, height=300, advance=False)
    self.y += 300 + PAD
    tx, ty = cfg["target"]
    self.canvas.create_rectangle(tx - 40, ty - 40, tx + 40, ty + 40, outline="green", width=3)
    bx, by = cfg["box"]
    self.box = self.canvas.create_rectangle(bx - 20, by - 20, bx + 20, by + 20, fill="blue")
    self.drag_from = None
    self.canvas.tag_bind(self.box, "<ButtonPress-1>", self.press)
    self.canvas.bind("<B1-Motion>", self.motion)
    self.canvas.bind("<ButtonRelease-1>", lambda e: setattr(self, "drag_from", None))
    self.button("Save", "save", self.save)

  def press(self, e):
    self.drag_from = (e.x, e.y)

  def motion(self, e):
    if self.drag_from:
      self.canvas.move(self.box, e.x - self.drag_from[0], e.y - self.drag_from[1])
      self.drag_from = (e.x, e.y)

  def center(self):
    x0, y0, x1, y1 = self.canvas.coords(self.box)
    return (x0 + x1) / 2, (y0 + y1) / 2

  def save(self):
    x, y = self.center()
    self.save_json({"box": [round(x), round(y)]})

  def extra_layout(self):
    ox, oy = self.canvas.winfo_rootx(), self.canvas.winfo_rooty()
    x, y = self.center()
    tx, ty = self.cfg["target"]
    return {"box": [ox + x - 20, oy + y - 20, 40, 40], "target": [ox + tx - 40, oy + ty - 40, 80, 80]}


KINDS = {"buttons": Buttons, "form": Form, "grid": Grid, "todo": Todo, "renamer": Renamer,
         "picker": Picker, "counter": Counter, "editor": Editor, "board": Board}

if __name__ == "__main__":
  with open(sys.argv[1]) as f:
    config = json.load(f)
  KINDS[config["kind"]](config).run()
