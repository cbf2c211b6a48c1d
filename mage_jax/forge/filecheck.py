"""The file-level gate: prepare a package's files on the host, open each with its library, and
look for the values the skill's `mentions` names.

Readers by file extension (what "opens" means, and the text the values are looked up in):
  .xlsx openpyxl (every cell value)   .docx python-docx (paragraphs + table cells)
  .pptx python-pptx (shape text)      .pdf  pypdf (extracted page text)
  .png/.jpg/.gif Pillow (verify; text is "<w>x<h> <mode>" plus the hex colours of up to 64
        distinct pixels, e.g. "#ff0000")
  .sqlite/.db sqlite3 (table names and every row's values)
  .zip zipfile, .tar/.tar.gz/.tgz tarfile (member names, and the text of UTF-8 members)
  .csv  csv module (cells)   .json json (the dumped value)   other: UTF-8 text
A file written by the `text` preparer is read as UTF-8 whatever its extension (a skill may write
a placeholder "photo.jpg" for a renaming task; its library is plain text).
A value is found when it is a substring of that text (numbers also as their float form, so a
cell 3.0 holds "3"). Preparers that need the sandbox (script, app, mkdir) are skipped here.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import sqlite3
import tarfile
import tempfile
from typing import Any
import zipfile

from mage_jax.tasks import preparers

TEXT_LIMIT = 200_000


class HostTarget:
  """A `preparers.SetupTarget` that writes files under a host directory and runs nothing."""

  def __init__(self, root: str):
    self.root, self.written, self.preparer = root, [], ""

  def write_file(self, path: str, data: bytes) -> None:
    full = os.path.join(self.root, path.lstrip("/").removeprefix("home/user/"))
    os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
    with open(full, "wb") as f:
      f.write(data)
    self.written.append((path, full, self.preparer))

  def run_script(self, script: str, timeout: float) -> tuple[int, str]:
    return 0, ""

  def launch_app(self, config: dict[str, Any]) -> None:
    pass


SANDBOX_ONLY = ("script", "app", "mkdir", "office", "web_replica", "browser")   # need the desktop or its network


def _cells(rows) -> str:
  return "\n".join("\t".join("" if v is None else str(v) for v in row) for row in rows)


def _archive_text(names_and_bytes) -> str:
  out = []
  for name, data in names_and_bytes:
    out.append(name)
    if data is not None:
      try:
        out.append(data.decode("utf-8"))
      except UnicodeDecodeError:
        pass
  return "\n".join(out)


def read_text(path: str, preparer: str = "") -> str:
  """The file's content as text, through the library that owns its format (raises if it
  does not open)."""
  ext = os.path.splitext(path)[1].lower()
  if preparer == "text":
    ext = ext if ext in (".csv", ".json") else ".txt"
  if ext == ".zip":
    with zipfile.ZipFile(path) as z:
      return _archive_text((i.filename, None if i.is_dir() else z.read(i)) for i in z.infolist())
  if ext in (".tar", ".gz", ".tgz", ".bz2", ".xz"):
    with tarfile.open(path) as t:
      return _archive_text((m.name, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers())
  if ext == ".xlsx":
    import openpyxl   # office-format library only for this document type (start-up cost)
    wb = openpyxl.load_workbook(path)
    return "\n".join(f"[{ws.title}]\n" + _cells(ws.iter_rows(values_only=True)) for ws in wb.worksheets)
  if ext == ".docx":
    import docx   # office-format library only for this document type (start-up cost)
    d = docx.Document(path)
    parts = [p.text for p in d.paragraphs]
    parts += [c.text for t in d.tables for row in t.rows for c in row.cells]
    return "\n".join(parts)
  if ext == ".pptx":
    import pptx   # office-format library only for this document type (start-up cost)
    prs = pptx.Presentation(path)
    return "\n".join(sh.text_frame.text for s in prs.slides for sh in s.shapes if sh.has_text_frame)
  if ext == ".pdf":
    import pypdf   # PDF library only for this document type (start-up cost)
    return "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(path).pages)
  if ext in (".png", ".jpg", ".jpeg", ".gif", ".bmp"):
    from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
    with Image.open(path) as im:
      im.verify()
    with Image.open(path) as im:
      rgb = im.convert("RGB")
      colours = rgb.getcolors(maxcolors=64) or []
      return f"{im.width}x{im.height} {im.mode}\n" + " ".join(
          "#%02x%02x%02x" % c for _, c in sorted(colours, reverse=True))
  if ext in (".sqlite", ".db", ".sqlite3"):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
      out = []
      for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        out.append(f"[{name}]")
        out.append(_cells(con.execute(f'SELECT * FROM "{name}"')))
      return "\n".join(out)
    finally:
      con.close()
  with open(path, encoding="utf-8") as f:
    text = f.read()
  if ext == ".csv":
    return _cells(csv.reader(io.StringIO(text)))
  if ext == ".json":
    return json.dumps(json.loads(text), ensure_ascii=False)
  return text


def prepare_and_open(setup: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
  """{sandbox path: {"text": ..., "error": None | why it did not open}} for every file the
  file-writing preparers produce."""
  out: dict[str, dict[str, Any]] = {}
  with tempfile.TemporaryDirectory(prefix="forge_files_") as tmp:
    target = HostTarget(tmp)
    for i, spec in enumerate(setup):
      if spec.get("type") in SANDBOX_ONLY:
        continue
      target.preparer = spec.get("type", "")
      try:
        preparers.run_preparer(target, spec)
      except Exception as e:  # noqa: BLE001 - a preparer that cannot build its file fails the gate
        out[str(spec.get("path", f"setup[{i}]"))] = {"text": "", "error": f"preparer failed: {type(e).__name__}: {e}"}
    for path, full, preparer in target.written:
      try:
        out[path] = {"text": read_text(full, preparer)[:TEXT_LIMIT], "error": None}
      except Exception as e:  # noqa: BLE001 - a file its own library cannot open fails the gate
        out[path] = {"text": "", "error": f"does not open: {type(e).__name__}: {e}"}
  return out


def _forms(value: Any) -> list[str]:
  forms = [str(value)]
  try:
    f = float(value)
    forms += [repr(f), f"{f:g}"] + ([str(int(f))] if f.is_integer() else [])
  except (TypeError, ValueError):
    pass
  return forms


def check_mentions(files: dict[str, dict[str, Any]], mentions: dict[str, list[Any]]) -> str | None:
  """None when every file opened and holds its mentioned values; else the first problem."""
  for path, info in files.items():
    if info["error"]:
      return f"{path}: {info['error']}"
  norm = {p.lstrip("/").removeprefix("home/user/"): info for p, info in files.items()}
  for path, values in mentions.items():
    info = norm.get(path.lstrip("/").removeprefix("home/user/"))
    if info is None:
      return f"{path}: mentioned but no preparer writes it"
    for v in values:
      if not any(form in info["text"] for form in _forms(v)):
        return f"{path}: does not hold the mentioned value {v!r}"
  return None


_LITERAL = re.compile(r"'([^']+)'|\"([^\"]+)\"|`([^`]+)`|(\b[\w.-]+\.[A-Za-z0-9]{1,5}\b)|(-?\d+(?:\.\d+)?)")


def literal_values(text: str) -> list[str]:
  """Quoted strings, file names and numbers of an instruction (what a rewording must keep)."""
  out = []
  for m in _LITERAL.finditer(text):
    v = next(g for g in m.groups() if g)
    if v not in out:
      out.append(v)
  return out
