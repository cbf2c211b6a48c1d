"""Setup preparers: create the task's files and start its apps inside the episode's sandbox.

Each preparer is a JSON object with a `type`:
  text   {path, content}                 a text file
  json   {path, data}                    a JSON file
  csv    {path, rows}                    rows of cells
  xlsx   {path, sheets: {name: rows}, merged?: {sheet: [ranges]}}   via openpyxl
  pptx   {path, slides: [{title, body?}]}                            via python-pptx
  pdf    {path, pages}                   blank pages via pypdf
  mkdir  {path}
  script {script | file, timeout?, settle?}   bash, run as the sandbox user in the home dir; with
                                         settle (s, at most) it then waits until the sandbox's
                                         processes stop changing (a job it started with `&`)
  app    {config: {kind, name, out, ...}} a built-in Tk app (tasks/builtin/apps/tkapps.py)
Files are produced on the host and written into the sandbox as the sandbox user.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import time
from typing import Any, Callable, Protocol

from mage_jax.tasks import extensions

TYPES = ("text", "json", "csv", "xlsx", "pptx", "pdf", "mkdir", "script", "app")


class SetupError(RuntimeError):
  pass


# Preparer types defined outside this file (documents, databases, real apps, web replicas): each
# module listed here calls `register` when imported. Add a module with one line.
EXTENSION_MODULES: tuple[str, ...] = ("mage_jax.tasks.doc_types", "mage_jax.tasks.data_types",
                                     "mage_jax.tasks.office_types", "mage_jax.tasks.web.task_types",
                                     "mage_jax.tasks.osworld.task_types")


@dataclasses.dataclass(frozen=True)
class Extension:
  run: Callable[["SetupTarget", dict[str, Any], str | None], None]  # (target, spec, package root)
  validate: Callable[[dict[str, Any], str], None]                  # (spec, where) -> ValueError naming `where`


EXTENSIONS: dict[str, Extension] = {}


def register(type_name: str, ext: Extension) -> None:
  extensions.add(EXTENSIONS, "preparer", type_name, ext, TYPES)


def _load_extensions() -> None:
  extensions.load_once(EXTENSION_MODULES)


class SetupTarget(Protocol):
  def write_file(self, path: str, data: bytes) -> None: ...
  def run_script(self, script: str, timeout: float) -> tuple[int, str]: ...
  def launch_app(self, config: dict[str, Any]) -> None: ...


def validate_spec(spec: dict[str, Any], where: str) -> None:
  _load_extensions()
  t = spec.get("type")
  if t in EXTENSIONS:
    EXTENSIONS[t].validate(spec, where)
    return
  if t not in TYPES:
    raise ValueError(f"{where}: unknown preparer type {t!r}; expected one of {TYPES + tuple(EXTENSIONS)}")
  needs = {"text": ("path", "content"), "json": ("path", "data"), "csv": ("path", "rows"),
           "xlsx": ("path", "sheets"), "pptx": ("path", "slides"), "pdf": ("path", "pages"),
           "mkdir": ("path",), "script": (), "app": ("config",)}[t]
  for key in needs:
    if key not in spec:
      raise ValueError(f"{where}: preparer {t!r} needs field {key!r}")
  if t == "script" and not ("script" in spec or "file" in spec):
    raise ValueError(f"{where}: preparer 'script' needs 'script' or 'file'")
  settle = spec.get("settle", 0)
  if t == "script" and (isinstance(settle, bool) or not isinstance(settle, (int, float))
                        or not 0 <= settle <= MAX_SETTLE):
    raise ValueError(f"{where}: preparer 'script' field 'settle' must be a number of seconds in "
                     f"[0, {MAX_SETTLE:g}]; got {settle!r}")


# A setup line that starts a job in the background (`nohup ./job.sh &`) returns once the job has let
# go of its output, which can be before the job has exec'd its program: an agent acting at once
# then met a half-started process (`pkill -STOP -f job.sh` stopped `nohup ./job.sh`, never the
# script, so a stopped job passed a "not running" check under load). `settle` waits for the
# sandbox's process list to hold still over SETTLE_STABLE polls SETTLE_POLL s apart.
MAX_SETTLE = 30.0
SETTLE_POLL = 0.2
SETTLE_STABLE = 3


def settle_processes(target: "SetupTarget", cap: float) -> bool:
  """Waits (at most `cap` s) until the sandbox's processes (their command lines) are the same on
  SETTLE_STABLE polls in a row; True if they held still, False if the cap ran out."""
  deadline, last, same = time.monotonic() + cap, None, 0
  while time.monotonic() < deadline:
    rc, out = target.run_script("ps -eo args=", 10)
    now = sorted(line for line in out.splitlines() if "ps -eo args=" not in line)
    same = same + 1 if rc == 0 and now == last else 0
    if same + 1 >= SETTLE_STABLE:
      return True
    last = now
    time.sleep(SETTLE_POLL)
  return False


def xlsx_bytes(sheets: dict[str, list[list[Any]]], merged: dict[str, list[str]] | None = None) -> bytes:
  import openpyxl   # office-format library only for this document type (start-up cost)
  wb = openpyxl.Workbook()
  wb.remove(wb.active)
  for name, rows in sheets.items():
    ws = wb.create_sheet(name)
    for row in rows:
      ws.append(row)
    for rng in (merged or {}).get(name, []):
      ws.merge_cells(rng)
  buf = io.BytesIO()
  wb.save(buf)
  return buf.getvalue()


def pptx_bytes(slides: list[dict[str, str]]) -> bytes:
  from pptx import Presentation   # office-format library only for this document type (start-up cost)
  prs = Presentation()
  for s in slides:
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = s["title"]
    if s.get("body"):
      slide.placeholders[1].text = s["body"]
  buf = io.BytesIO()
  prs.save(buf)
  return buf.getvalue()


def pdf_bytes(pages: int) -> bytes:
  from pypdf import PdfWriter   # PDF library only for this document type (start-up cost)
  w = PdfWriter()
  for _ in range(pages):
    w.add_blank_page(width=612, height=792)
  buf = io.BytesIO()
  w.write(buf)
  return buf.getvalue()


def csv_bytes(rows: list[list[Any]]) -> bytes:
  buf = io.StringIO()
  csv.writer(buf, lineterminator="\n").writerows(rows)
  return buf.getvalue().encode()


def run_preparer(target: SetupTarget, spec: dict[str, Any], root: str | None = None) -> None:
  _load_extensions()
  t = spec["type"]
  if t in EXTENSIONS:
    EXTENSIONS[t].run(target, spec, root)
  elif t == "text":
    target.write_file(spec["path"], spec["content"].encode())
  elif t == "json":
    target.write_file(spec["path"], json.dumps(spec["data"], indent=1).encode())
  elif t == "csv":
    target.write_file(spec["path"], csv_bytes(spec["rows"]))
  elif t == "xlsx":
    target.write_file(spec["path"], xlsx_bytes(spec["sheets"], spec.get("merged")))
  elif t == "pptx":
    target.write_file(spec["path"], pptx_bytes(spec["slides"]))
  elif t == "pdf":
    target.write_file(spec["path"], pdf_bytes(int(spec["pages"])))
  elif t == "mkdir":
    rc, out = target.run_script(f"mkdir -p -- {json.dumps(spec['path'])}", 10)
    if rc != 0:
      raise SetupError(f"mkdir {spec['path']}: {out}")
  elif t == "script":
    script = spec.get("script")
    if script is None:
      with open(os.path.join(root or ".", spec["file"])) as f:
        script = f.read()
    rc, out = target.run_script(script, float(spec.get("timeout", 60)))
    if rc != 0:
      raise SetupError(f"setup script exited with {rc}: {out[-500:]}")
    if spec.get("settle", 0):
      settle_processes(target, float(spec["settle"]))
  elif t == "app":
    target.launch_app(spec["config"])
  else:
    raise SetupError(f"unknown preparer type {t!r}")
