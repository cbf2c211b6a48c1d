"""Data-file preparer and checker types (Forge skills): SQLite databases, images, archives.

Preparers (registered with tasks.preparers):
  sqlite   {path, tables: {name: {columns: ["name TYPE", ..], rows: [..]}}}
  png      {path, size: [w, h], fill: [r, g, b], rects?: [[x0, y0, x1, y1, [r, g, b]]], format?: "PNG"}
  archive  {path, format: "zip" | "tar.gz", files: {name: text}}
Checkers (registered with tasks.checkers):
  sqlite_query    {path, query, rows}                the query's result rows (cells as stripped strings;
                                                     numbers with 1e-6 tolerance)
  image_size      {path, size: [w, h]}
  image_pixels    {path, points: [[x, y, [r, g, b]]], tol?: 8}   RGB of each point within tol
  image_format    {path, format?, mode?, size?}      PIL's format ("PNG", "JPEG"), mode ("L", "RGB") and
                                                     size, in one check (a copy of the input fails it)
  archive_members {path, names, texts?: {name: text}}   exact member file names (zip or tar, any
                                                     compression); optional member contents
Files are read from the sandbox; a file the library cannot open scores 0 (checkers.score).
"""
from __future__ import annotations

import io
import os
import sqlite3
import tarfile
import tempfile
from typing import Any
import zipfile

from mage_jax.tasks import checkers, preparers
from mage_jax.tasks.doc_types import need_fields, open_file

_ERRORS = ("sqlite3", "PIL", "tarfile", "zipfile", "gzip", "_compression")


# ---- preparers ---------------------------------------------------------------------------------
def sqlite_bytes(tables: dict[str, dict[str, Any]]) -> bytes:
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "db.sqlite")
    con = sqlite3.connect(path)
    for name, t in tables.items():
      con.execute(f"CREATE TABLE {name} ({', '.join(t['columns'])})")
      if t["rows"]:
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(t['columns']))})", t["rows"])
    con.commit()
    con.close()
    with open(path, "rb") as f:
      return f.read()


def png_bytes(size: list[int], fill: list[int], rects: list[list[Any]] = (), fmt: str = "PNG") -> bytes:
  from PIL import Image, ImageDraw   # Pillow only when an image is read or drawn (start-up cost)
  im = Image.new("RGB", tuple(size), tuple(fill))
  draw = ImageDraw.Draw(im)
  for x0, y0, x1, y1, color in rects:
    draw.rectangle([x0, y0, x1 - 1, y1 - 1], fill=tuple(color))
  buf = io.BytesIO()
  im.save(buf, fmt)
  return buf.getvalue()


def archive_bytes(fmt: str, files: dict[str, str]) -> bytes:
  buf = io.BytesIO()
  if fmt == "zip":
    with zipfile.ZipFile(buf, "w") as z:
      for name, text in files.items():
        z.writestr(name, text)
  else:
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
      for name, text in files.items():
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        t.addfile(info, io.BytesIO(data))
  return buf.getvalue()


preparers.register("sqlite", preparers.Extension(
    run=lambda t, s, root: t.write_file(s["path"], sqlite_bytes(s["tables"])), validate=need_fields("path", "tables")))
preparers.register("png", preparers.Extension(
    run=lambda t, s, root: t.write_file(s["path"], png_bytes(s["size"], s["fill"], s.get("rects", []),
                                                            s.get("format", "PNG"))),
    validate=need_fields("path", "size", "fill")))
preparers.register("archive", preparers.Extension(
    run=lambda t, s, root: t.write_file(s["path"], archive_bytes(s["format"], s["files"])),
    validate=need_fields("path", "format", "files")))


# ---- checkers ----------------------------------------------------------------------------------
def query_rows(data: bytes, query: str) -> list[tuple]:
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "db.sqlite")
    with open(path, "wb") as f:
      f.write(data)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
      con.execute("PRAGMA schema_version")  # reads the header: a file that is no database raises here
      return con.execute(query).fetchall()
    finally:
      con.close()


def _sqlite_query(ctx, spec) -> float:
  data = ctx.read_file(spec["path"])
  if not data:
    return 0.0
  got, want = query_rows(data, spec["query"]), spec["rows"]
  return float(len(got) == len(want) and all(
      len(g) == len(w) and all(checkers._same(a, b) for a, b in zip(g, w)) for g, w in zip(got, want)))


def _image(ctx, spec):
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  f = open_file(ctx, spec)
  return None if f is None else Image.open(f)


def _image_size(ctx, spec) -> float:
  im = _image(ctx, spec)
  return float(im is not None and list(im.size) == list(spec["size"]))


def _image_pixels(ctx, spec) -> float:
  im = _image(ctx, spec)
  if im is None:
    return 0.0
  rgb, tol = im.convert("RGB"), spec.get("tol", 8)
  for x, y, color in spec["points"]:
    if not (0 <= x < rgb.width and 0 <= y < rgb.height):
      return 0.0
    if any(abs(a - b) > tol for a, b in zip(rgb.getpixel((x, y)), color)):
      return 0.0
  return 1.0


def _image_format(ctx, spec) -> float:
  im = _image(ctx, spec)
  return float(im is not None and spec.get("format", im.format) == im.format and spec.get("mode", im.mode) == im.mode
               and list(spec.get("size", im.size)) == list(im.size))


def _archive_members(ctx, spec) -> float:
  f = open_file(ctx, spec)
  if f is None:
    return 0.0
  if zipfile.is_zipfile(f):
    with zipfile.ZipFile(f) as z:
      files = {i.filename: z.read(i).decode("utf-8", "replace") for i in z.infolist() if not i.is_dir()}
  else:
    f.seek(0)
    with tarfile.open(fileobj=f) as t:
      files = {m.name.removeprefix("./"): t.extractfile(m).read().decode("utf-8", "replace")
               for m in t.getmembers() if m.isfile()}
  ok = sorted(files) == sorted(spec["names"])
  return float(ok and all(files.get(n, "").strip() == v.strip() for n, v in spec.get("texts", {}).items()))


for _name, _fn, _keys in (
    ("sqlite_query", _sqlite_query, ("path", "query", "rows")), ("image_size", _image_size, ("path", "size")),
    ("image_pixels", _image_pixels, ("path", "points")), ("image_format", _image_format, ("path",)),
    ("archive_members", _archive_members, ("path", "names"))):
  checkers.register(_name, checkers.Extension(score=_fn, validate=need_fields(*_keys), content_errors=_ERRORS))
