"""OSWorld's document comparisons, re-implemented from their documented semantics (our code).

Files arrive as bytes (None when absent); every metric returns a score in [0, 1] and scores
unreadable or malformed content 0. Where OSWorld uses a library we don't ship, a stand-in is named:
  compare_docx_files  paragraph texts of two .docx (python-docx) or .odt (content.xml) documents.
                      Options: ignore_blanks (default true: whitespace runs collapse, texts compared
                      whole), ignore_case, ignore_order (paragraphs sorted), content_only (a fuzzy
                      ratio of the collapsed texts is the score). Without ignore_blanks: same paragraph
                      count and each paragraph equal.
  compare_docx_tables every table of two .docx: same count, shape and stripped cell texts.
  compare_line_spacing  compare_docx_files (defaults) passes and every paragraph's line spacing equal.
  compare_pptx_files  slide by slide, shape by shape (python-pptx): slide count, background colour,
                      notes, shape geometry, text, paragraph alignment/level, run font name, size, bold,
                      italic, colour, underline, strike-through, bullets; each `examine_<x>` option
                      (default true) turns a comparison off. OSWorld's task-specific position options
                      (examine_title_bottom_position and the like, default false) check what their tasks ask, with OSWorld's
                      thresholds in EMU: see _task_specific.
  compare_pdfs        mean over file pairs of a fuzzy ratio of the pages' text (pypdf's text
                      extraction stands in for PyMuPDF's).
  compare_images      SSIM of the two images in grey, the larger resized to the smaller (7x7 uniform
                      window, sample covariance: scikit-image's defaults, computed with numpy here).
  check_structure_sim SSIM of the two images in colour (per-channel mean) >= 0.9; images of different
                      sizes or modes score 0 (OSWorld's comparison fails on them).
Fuzzy ratio: difflib's SequenceMatcher ratio (2*matches/total length) stands in for rapidfuzz's
fuzz.ratio (2*LCS/total length); equal texts score 1 under both.
"""
from __future__ import annotations

import difflib
import io
import re
from typing import Any
from xml.etree import ElementTree
import zipfile

import numpy as np

_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"


def fuzzy_ratio(a: str, b: str) -> float:
  return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() if (a or b) else 1.0


def _pairs(a: Any, b: Any) -> list[tuple[Any, Any]]:
  return list(zip(a, b)) if isinstance(b, list) else [(a, b)]


# ---- Writer documents --------------------------------------------------------------------------
def paragraphs(data: bytes) -> list[str]:
  """Paragraph texts of a .docx or .odt document."""
  with zipfile.ZipFile(io.BytesIO(data)) as z:
    if "content.xml" in z.namelist():   # OpenDocument text
      root = ElementTree.fromstring(z.read("content.xml"))
      return ["".join(p.itertext()) for p in root.iter(f"{{{_ODF_TEXT}}}p")]
  import docx   # office-format library only for this document type (start-up cost)
  return [p.text for p in docx.Document(io.BytesIO(data)).paragraphs]


def compare_docx_files(result: bytes | None, expected: bytes | None, ignore_blanks: bool = True,
                       ignore_case: bool = False, ignore_order: bool = False, content_only: bool = False,
                       **_) -> float:
  if not result or not expected:
    return 0.0
  try:
    p1, p2 = paragraphs(result), paragraphs(expected)
  except Exception:   # not a document: the agent's file is malformed
    return 0.0
  if ignore_order:
    p1, p2 = sorted(p1), sorted(p2)
  if content_only or ignore_blanks:
    t1, t2 = (re.sub(r"\s+", " ", "\n".join(p)).strip() for p in (p1, p2))
    if ignore_case:
      t1, t2 = t1.lower(), t2.lower()
    return fuzzy_ratio(t1, t2) if content_only else float(t1 == t2)
  if len(p1) != len(p2):
    return 0.0
  fold = str.lower if ignore_case else (lambda s: s)
  return float(all(fold(a) == fold(b) for a, b in zip(p1, p2)))


def _docx_doc(data: bytes):
  import docx   # office-format library only for this document type (start-up cost)
  return docx.Document(io.BytesIO(data))


def compare_docx_tables(result: bytes | None, expected: bytes | None, **_) -> float:
  if not result or not expected:
    return 0.0
  try:
    t1, t2 = _docx_doc(result).tables, _docx_doc(expected).tables
  except Exception:
    return 0.0
  if len(t1) != len(t2):
    return 0.0
  for a, b in zip(t1, t2):
    if (len(a.rows), len(a.columns)) != (len(b.rows), len(b.columns)):
      return 0.0
    if any(a.cell(i, j).text.strip() != b.cell(i, j).text.strip()
           for i in range(len(a.rows)) for j in range(len(a.columns))):
      return 0.0
  return 1.0


def compare_line_spacing(result: bytes | None, expected: bytes | None, **_) -> float:
  if not compare_docx_files(result, expected):
    return 0.0
  try:
    p1, p2 = _docx_doc(result).paragraphs, _docx_doc(expected).paragraphs
  except Exception:
    return 0.0
  return float(len(p1) == len(p2) and all(a.paragraph_format.line_spacing == b.paragraph_format.line_spacing
                                          for a, b in zip(p1, p2)))


# ---- Impress presentations ---------------------------------------------------------------------
def _background(slide) -> Any:
  fill = slide.background.fill
  try:
    return fill.fore_color.rgb if fill.type == 1 else None   # 1: a solid fill
  except (AttributeError, TypeError, ValueError):
    return None


def _notes(slide) -> str:
  return slide.notes_slide.notes_text_frame.text.strip() if slide.has_notes_slide else ""


def _bullets(paragraph) -> tuple:
  """(level, bullet character, bullet colour) of one paragraph from its XML properties."""
  ppr = paragraph._p.pPr
  if ppr is None:
    return (None, None, None)
  ns = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
  char, clr = ppr.find(f"{ns}buChar"), ppr.find(f"{ns}buClr/{ns}srgbClr")
  return (ppr.get("lvl"), None if char is None else char.get("char"), None if clr is None else clr.get("val"))


def _run_props(run, o: dict) -> tuple:
  f = run.font
  try:
    color = f.color.rgb if f.color and f.color.type is not None else None
  except AttributeError:
    color = None
  props = (("font_name", f.name), ("font_size", f.size), ("font_bold", f.bold), ("font_italic", f.italic),
           ("color_rgb", color), ("font_underline", f.underline),
           ("strike_through", f._element.get("strike", "noStrike")))
  return tuple(v for k, v in props if o.get(f"examine_{k}", True))


_TABLE, _PICTURE, _FREEFORM = 19, 13, 5   # python-pptx MSO_SHAPE_TYPE values OSWorld's options test


def _geometry(s) -> tuple:
  return (s.left, s.top, s.width, s.height)


def _task_specific(slide: int, s1, s2, o: dict) -> bool:
  """OSWorld's per-task position options (s1: the agent's shape, s2: the expected one; slide from 1):
  title_bottom_position  the "Product Comparison" title moved below the expected one and 3600000 down;
  table_bottom_position  slide 3's table likewise; right_position  slide 2's text-less shapes right of the
  expected and past 4320000; top_position  slide 2's pictures above the expected and within 1980000;
  shape_for_shift_size  geometry equal except the "Elaborate on what you want to discuss." box;
  image_size  pictures' size equal; modify_height  text-less (or freeform) shapes' height equal. Every
  other shape under these options keeps its geometry."""
  same, text = _geometry(s1) == _geometry(s2), lambda s: getattr(s, "text", None)
  if o.get("examine_title_bottom_position"):
    if text(s1) is not None and text(s1) == text(s2):
      if text(s1) == "Product Comparison" and (s1.top <= s2.top or s1.top < 3600000):
        return False
    elif not same:
      return False
  if o.get("examine_table_bottom_position"):
    if slide == 3 and s1.shape_type == _TABLE and s2.shape_type == _TABLE:
      if s1.top <= s2.top or s1.top < 3600000:
        return False
    elif not same:
      return False
  if o.get("examine_right_position") and slide == 2 and text(s1) is None and text(s2) is None:
    if s1.left <= s2.left or s1.left < 4320000:
      return False
  if o.get("examine_top_position"):
    if slide == 2 and s1.shape_type == _PICTURE and s2.shape_type == _PICTURE:
      if s1.top >= s2.top or s1.top > 1980000:
        return False
    elif not same:
      return False
  if o.get("examine_shape_for_shift_size") and not same:
    if not (text(s1) is not None and text(s1) == text(s2) == "Elaborate on what you want to discuss."):
      return False
  if o.get("examine_image_size"):
    if s1.shape_type == _PICTURE and s2.shape_type == _PICTURE:
      if (s1.width, s1.height) != (s2.width, s2.height):
        return False
    elif not same:
      return False
  if o.get("examine_modify_height"):
    if (text(s1) is None and text(s2) is None) or (s1.shape_type == _FREEFORM and s2.shape_type == _FREEFORM):
      if s1.height != s2.height:
        return False
    elif not same:
      return False
  return True


def _same_shape(s1, s2, o: dict) -> bool:
  if o.get("examine_shape", True) and (s1.left, s1.top, s1.width, s1.height) != (s2.left, s2.top, s2.width, s2.height):
    return False
  if not (s1.has_text_frame and s2.has_text_frame):
    return True
  if o.get("examine_text", True) and s1.text_frame.text.strip() != s2.text_frame.text.strip():
    return False
  for q1, q2 in zip(s1.text_frame.paragraphs, s2.text_frame.paragraphs):
    if o.get("examine_alignment", True) and q1.alignment != q2.alignment:
      return False
    if o.get("examine_text", True) and q1.text != q2.text:
      return False
    if o.get("examine_indent", True) and q1.level != q2.level:
      return False
    if o.get("examine_bullets", True) and _bullets(q1) != _bullets(q2):
      return False
    if any(_run_props(r1, o) != _run_props(r2, o) for r1, r2 in zip(q1.runs, q2.runs)):
      return False
  return True


def compare_pptx_files(result: bytes | None, expected: bytes | None, **options) -> float:
  if not result or not expected:
    return 0.0
  from pptx import Presentation   # office-format library only for this document type (start-up cost)
  try:
    prs1, prs2 = Presentation(io.BytesIO(result)), Presentation(io.BytesIO(expected))
  except Exception:
    return 0.0
  o = options
  if o.get("examine_number_of_slides", True) and len(prs1.slides) != len(prs2.slides):
    return 0.0
  for n, (a, b) in enumerate(zip(prs1.slides, prs2.slides), 1):
    if not all(_task_specific(n, s1, s2, o) for s1, s2 in zip(a.shapes, b.shapes)):
      return 0.0
    if o.get("examine_background_color", True) and _background(a) != _background(b):
      return 0.0
    if o.get("examine_note", True) and _notes(a) != _notes(b):
      return 0.0
    if not all(_same_shape(s1, s2, o) for s1, s2 in zip(a.shapes, b.shapes)):
      return 0.0
  return 1.0


# ---- PDFs and images ---------------------------------------------------------------------------
def pdf_text(data: bytes) -> str:
  import pypdf   # PDF library only for this document type (start-up cost)
  return "".join(page.extract_text() or "" for page in pypdf.PdfReader(io.BytesIO(data)).pages).strip()


def compare_pdfs(result: Any, expected: Any, **_) -> float:
  pairs = _pairs(result, expected)
  total = 0.0
  for a, b in pairs:
    try:
      total += fuzzy_ratio(pdf_text(a), pdf_text(b)) if a and b else 0.0
    except Exception:   # a malformed PDF scores 0 for its pair
      pass
  return total / len(pairs) if pairs else 0.0


def _uniform7(x: np.ndarray) -> np.ndarray:
  """Means over every full 7x7 window (the 'valid' part scikit-image keeps after cropping)."""
  c = np.pad(x, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
  return (c[7:, 7:] - c[:-7, 7:] - c[7:, :-7] + c[:-7, :-7]) / 49.0


def ssim(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
  a, b = a.astype(np.float64), b.astype(np.float64)
  if min(a.shape) < 7:
    raise ValueError(f"images of {a.shape} are smaller than the 7x7 SSIM window")
  cov = 49.0 / 48.0   # sample covariance
  ma, mb = _uniform7(a), _uniform7(b)
  va, vb = cov * (_uniform7(a * a) - ma * ma), cov * (_uniform7(b * b) - mb * mb)
  vab = cov * (_uniform7(a * b) - ma * mb)
  c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
  s = ((2 * ma * mb + c1) * (2 * vab + c2)) / ((ma * ma + mb * mb + c1) * (va + vb + c2))
  return float(s.mean())


def compare_images(result: bytes | None, expected: bytes | None, **_) -> float:
  if not result or not expected:
    return 0.0
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  try:
    i1, i2 = Image.open(io.BytesIO(result)).convert("L"), Image.open(io.BytesIO(expected)).convert("L")
  except Exception:
    return 0.0
  size = min(i1.size, i2.size)   # OSWorld takes the smaller (width, height) tuple, compared as a tuple
  i1, i2 = i1.resize(size, Image.Resampling.LANCZOS), i2.resize(size, Image.Resampling.LANCZOS)
  try:
    return max(0.0, ssim(np.asarray(i1), np.asarray(i2)))
  except ValueError:
    return 0.0


def check_structure_sim(result: bytes | None, expected: bytes | None, **_) -> float:
  if not result or not expected:
    return 0.0
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  try:
    a, b = np.asarray(Image.open(io.BytesIO(result))), np.asarray(Image.open(io.BytesIO(expected)))
  except Exception:
    return 0.0
  if a.shape != b.shape:
    return 0.0
  if a.ndim == 2:
    a, b = a[..., None], b[..., None]
  try:
    sim = float(np.mean([ssim(a[..., c], b[..., c]) for c in range(a.shape[-1])]))
  except ValueError:
    return 0.0
  return float(sim >= 0.9)
