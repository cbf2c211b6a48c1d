"""Document preparer and checker types (Forge skills): docx, text PDFs, and office read-backs.

Preparers (registered with tasks.preparers):
  docx      {path, paragraphs: [str | {text, style?, bold?}], tables?: [rows]}  via python-docx
  pdf_text  {path, pages: [text], title?, author?}   a PDF whose pages hold text (fpdf2; pypdf reads it)
Checkers (registered with tasks.checkers):
  docx_paragraphs {path, paragraphs: [..]}          the non-empty paragraphs' texts, in order
  docx_table      {path, rows, table?: 0}           one table's cells (stripped strings)
  docx_style      {path, text, style? , bold?,      the paragraph whose text is `text` has that style /
                   only?, paragraphs?}              every run bold; only: no other paragraph has it;
                                                    paragraphs: the texts are these (nothing else went)
  pdf_page_texts  {path, pages: [substring]}        exactly len(pages) pages; page i contains pages[i]
  pdf_meta        {path, title? , author?}          document info fields
  pdf_rotation    {path, rotations: [deg]}          each page's /Rotate (mod 360)
  xlsx_rows       {path, rows, sheet?}              every non-empty row of a sheet (numbers 1e-6)
  xlsx_sheetnames {path, names}                     sheet names in order
  xlsx_style      {path, cells: {ref: {bold?, number_format?}}, sheet?}
  pptx_bodies     {path, bodies: [..]}              each slide's body placeholder text ("" if none)
  pptx_notes      {path, notes: [..]}               each slide's notes text ("" if none)
  pptx_text       {path, slide, contains}           some shape on slide `slide` (0-based) holds it
All read the file from the sandbox; malformed agent files score 0 (checkers.score).
"""
from __future__ import annotations

import io
from typing import Any

from mage_jax.tasks import checkers, preparers

_ERRORS = ("docx", "pptx", "openpyxl", "pypdf", "fpdf", "lxml")


def need_fields(*keys: str):
  def validate(spec: dict[str, Any], where: str) -> None:
    for k in keys:
      if k not in spec:
        raise ValueError(f"{where}: {spec['type']} needs field {k!r}")
  return validate


# ---- preparers ---------------------------------------------------------------------------------
def docx_bytes(paragraphs: list[Any], tables: list[list[list[Any]]] = ()) -> bytes:
  import docx   # office-format library only for this document type (start-up cost)
  d = docx.Document()
  for p in paragraphs:
    p = {"text": p} if isinstance(p, str) else p
    para = d.add_paragraph(style=p.get("style"))
    run = para.add_run(p["text"])
    run.bold = p.get("bold") or None
  for rows in tables:
    t = d.add_table(rows=len(rows), cols=len(rows[0]))
    for r, row in enumerate(rows):
      for c, v in enumerate(row):
        t.cell(r, c).text = str(v)
  buf = io.BytesIO()
  d.save(buf)
  return buf.getvalue()


def pdf_text_bytes(pages: list[str], title: str | None = None, author: str | None = None) -> bytes:
  from fpdf import FPDF   # PDF library only for this document type (start-up cost)
  pdf = FPDF()
  pdf.set_font("Helvetica", size=12)
  if title:
    pdf.set_title(title)
  if author:
    pdf.set_author(author)
  for text in pages:
    pdf.add_page()
    for line in text.split("\n"):
      pdf.cell(0, 8, line, new_x="LMARGIN", new_y="NEXT")
  return bytes(pdf.output())


preparers.register("docx", preparers.Extension(
    run=lambda t, s, root: t.write_file(s["path"], docx_bytes(s["paragraphs"], s.get("tables", []))),
    validate=need_fields("path", "paragraphs")))
preparers.register("pdf_text", preparers.Extension(
    run=lambda t, s, root: t.write_file(s["path"], pdf_text_bytes(s["pages"], s.get("title"), s.get("author"))),
    validate=need_fields("path", "pages")))


# ---- readers -----------------------------------------------------------------------------------
def open_file(ctx, spec):
  data = ctx.read_file(spec["path"])
  return None if data is None else io.BytesIO(data)


def docx_texts(doc) -> list[str]:
  return [p.text.strip() for p in doc.paragraphs if p.text.strip()]


def _docx(ctx, spec):
  import docx   # office-format library only for this document type (start-up cost)
  f = open_file(ctx, spec)
  return None if f is None else docx.Document(f)


def _docx_paragraphs(ctx, spec) -> float:
  d = _docx(ctx, spec)
  return float(d is not None and docx_texts(d) == [str(p).strip() for p in spec["paragraphs"]])


def _docx_table(ctx, spec) -> float:
  d = _docx(ctx, spec)
  i = spec.get("table", 0)
  if d is None or len(d.tables) <= i:
    return 0.0
  got = [[c.text.strip() for c in row.cells] for row in d.tables[i].rows]
  return float(got == [[str(v).strip() for v in row] for row in spec["rows"]])


def _docx_style(ctx, spec) -> float:
  d = _docx(ctx, spec)
  paras = [] if d is None else [p for p in d.paragraphs if p.text.strip() == spec["text"].strip()]
  if not paras:
    return 0.0
  p = paras[0]

  def styled(q) -> bool:
    return (("style" not in spec or q.style.name == spec["style"])
            and (not spec.get("bold") or all(r.bold for r in q.runs if r.text.strip())))
  if not styled(p):
    return 0.0
  if "paragraphs" in spec and docx_texts(d) != [str(x).strip() for x in spec["paragraphs"]]:
    return 0.0
  # "style every paragraph" must not pass a task about one of them (a blind hack)
  return float(not spec.get("only") or not any(styled(q) for q in d.paragraphs if q._element is not p._element and q.text.strip()))


def _pdf(ctx, spec):
  from pypdf import PdfReader   # PDF library only for this document type (start-up cost)
  f = open_file(ctx, spec)
  return None if f is None else PdfReader(f)


def _pdf_page_texts(ctx, spec) -> float:
  r = _pdf(ctx, spec)
  if r is None or len(r.pages) != len(spec["pages"]):
    return 0.0
  return float(all(want in (page.extract_text() or "") for page, want in zip(r.pages, spec["pages"])))


def _pdf_meta(ctx, spec) -> float:
  r = _pdf(ctx, spec)
  meta = None if r is None else r.metadata
  if meta is None:
    return 0.0
  return float(all((getattr(meta, k) or "") == spec[k] for k in ("title", "author") if k in spec))


def _pdf_rotation(ctx, spec) -> float:
  r = _pdf(ctx, spec)
  return float(r is not None and [p.rotation % 360 for p in r.pages] == [d % 360 for d in spec["rotations"]])


def _wb(ctx, spec):
  import openpyxl   # office-format library only for this document type (start-up cost)
  f = open_file(ctx, spec)
  return None if f is None else openpyxl.load_workbook(f)


def _xlsx_rows(ctx, spec) -> float:
  wb = _wb(ctx, spec)
  if wb is None:
    return 0.0
  ws = wb[spec["sheet"]] if spec.get("sheet") else wb.worksheets[0]
  got = [list(r) for r in ws.iter_rows(values_only=True) if any(v is not None and str(v).strip() for v in r)]
  want = spec["rows"]
  if len(got) != len(want):
    return 0.0
  for g, w in zip(got, want):
    g = list(g) + [None] * max(0, len(w) - len(g))
    if any(v is not None for v in g[len(w):]) or not all(checkers._same(a, b) for a, b in zip(g, w)):
      return 0.0
  return 1.0


def _xlsx_sheetnames(ctx, spec) -> float:
  wb = _wb(ctx, spec)
  return float(wb is not None and wb.sheetnames == spec["names"])


def _xlsx_style(ctx, spec) -> float:
  wb = _wb(ctx, spec)
  if wb is None:
    return 0.0
  ws = wb[spec["sheet"]] if spec.get("sheet") else wb.worksheets[0]
  for ref, want in spec["cells"].items():
    c = ws[ref]
    if "bold" in want and bool(c.font.b) != want["bold"]:
      return 0.0
    if "number_format" in want and c.number_format != want["number_format"]:
      return 0.0
  return 1.0


def _prs(ctx, spec):
  from pptx import Presentation   # office-format library only for this document type (start-up cost)
  f = open_file(ctx, spec)
  return None if f is None else Presentation(f)


def slide_body(slide) -> str:
  for ph in slide.placeholders:
    if ph.placeholder_format.idx == 1 and ph.has_text_frame:
      return ph.text_frame.text.strip()
  return ""


def _pptx_bodies(ctx, spec) -> float:
  p = _prs(ctx, spec)
  return float(p is not None and [slide_body(s) for s in p.slides] == [b.strip() for b in spec["bodies"]])


def _pptx_notes(ctx, spec) -> float:
  p = _prs(ctx, spec)
  got = None if p is None else [s.notes_slide.notes_text_frame.text.strip() if s.has_notes_slide else ""
                                for s in p.slides]
  return float(got == [n.strip() for n in spec["notes"]])


def _pptx_text(ctx, spec) -> float:
  p = _prs(ctx, spec)
  if p is None or len(p.slides) <= spec["slide"]:
    return 0.0
  shapes = list(p.slides[spec["slide"]].shapes)
  return float(any(s.has_text_frame and spec["contains"] in s.text_frame.text for s in shapes))


for _name, _fn, _keys in (
    ("docx_paragraphs", _docx_paragraphs, ("path", "paragraphs")), ("docx_table", _docx_table, ("path", "rows")),
    ("docx_style", _docx_style, ("path", "text")), ("pdf_page_texts", _pdf_page_texts, ("path", "pages")),
    ("pdf_meta", _pdf_meta, ("path",)), ("pdf_rotation", _pdf_rotation, ("path", "rotations")),
    ("xlsx_rows", _xlsx_rows, ("path", "rows")), ("xlsx_sheetnames", _xlsx_sheetnames, ("path", "names")),
    ("xlsx_style", _xlsx_style, ("path", "cells")), ("pptx_bodies", _pptx_bodies, ("path", "bodies")),
    ("pptx_notes", _pptx_notes, ("path", "notes")), ("pptx_text", _pptx_text, ("path", "slide", "contains"))):
  checkers.register(_name, checkers.Extension(score=_fn, validate=need_fields(*_keys), content_errors=_ERRORS))
