"""OSWorld's task-specific Writer checks, re-implemented from their documented semantics (our code).

Documents arrive as bytes (None when absent); unreadable documents score 0. "The texts match" is
document_metrics.compare_docx_files with its defaults, as OSWorld calls its own compare_docx_files.
  contains_page_break        some run holds a page break (w:br type=page)
  has_page_numbers_in_footers  every section's footer's first paragraph holds a digit
  compare_subscript_contains some pair of runs at the same place (paragraph by paragraph, run by run)
                             is subscript in both
  compare_insert_equation    the texts match and some run pair at the same place holds an object (w:object)
  compare_contains_image     no run pair at the same place has a drawing (graphicData) in one only
  compare_docx_images        same number of images, each pair decodes to the same pixels
  compare_docx_lines         the sets of non-blank stripped paragraph texts are equal
  compare_docx_files_and_ignore_new_lines  both .docx; empty paragraphs dropped; with ignore_blanks
                             (default) whitespace-collapsed texts equal, else paragraph by paragraph
  compare_highlighted_text   the sets of texts of highlighted runs (w:highlight not none) are equal
  check_italic_font_size_14  the texts match and every italic run has an explicit 14 pt size
  evaluate_strike_through_last_paragraph  the texts match and every run of the last paragraph is struck
  check_tabstops             non-blank paragraphs pair up; optional word_number_split_by_tabstop/index:
                             the result's text before the index-th tab has that many words; per pair,
                             the same number of tab stops (ignoring clear and left-at-0) with the same
                             alignments; score 1 - mean(sum |position difference| / text width)
  check_highlighted_words    (.odt) the texts match and no span's automatic style has a #ffff00 background
  evaluate_colored_words_in_tables  the texts match and in every table, words starting with a vowel
                             are red and the others blue: CIEDE2000 colour difference <= threshold (3.5)
  compare_references         the paragraphs after the last-found `reference_indicator` paragraph
                             ("References"): none in both scores 1, in one only 0; else same count and
                             the mean fuzzy ratio r rescaled as (r - base) / (1 - base) above base (0.5)
  find_default_font          LibreOffice's registrymodifications.xcu sets Writer's DefaultFont/Standard
                             to rules.font_name
"""
from __future__ import annotations

import io
import re
from typing import Any
from xml.etree import ElementTree
import zipfile

import numpy as np

from mage_jax.tasks.osworld import lo_registry
from mage_jax.tasks.osworld.document_metrics import compare_docx_files, fuzzy_ratio

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _doc(data: bytes | None):
  import docx   # office-format library only for this document type (start-up cost)
  if not data:
    return None
  try:
    return docx.Document(io.BytesIO(data))
  except Exception:
    return None


def _docs(a: bytes | None, b: bytes | None):
  d1, d2 = _doc(a), _doc(b)
  return (d1, d2) if d1 is not None and d2 is not None else (None, None)


def _run_pairs(d1, d2):
  for p1, p2 in zip(d1.paragraphs, d2.paragraphs):
    yield from zip(p1.runs, p2.runs)


def contains_page_break(result: bytes | None, expected: Any = None, **_) -> float:
  d = _doc(result)
  return float(d is not None and any(br.get(f"{W}type") == "page" for p in d.paragraphs for r in p.runs
                                     for br in r.element.iter(f"{W}br")))


def has_page_numbers_in_footers(result: bytes | None, expected: Any = None, **_) -> float:
  d = _doc(result)
  if d is None:
    return 0.0
  for section in d.sections:
    paras = section.footer.paragraphs
    if not any(c.isdigit() for c in (paras[0].text if paras else "")):
      return 0.0
  return 1.0


def compare_subscript_contains(result: bytes | None, expected: bytes | None, **_) -> float:
  d1, d2 = _docs(result, expected)
  return float(d1 is not None and any(r1.font.subscript and r2.font.subscript for r1, r2 in _run_pairs(d1, d2)))


def compare_insert_equation(result: bytes | None, expected: bytes | None, **_) -> float:
  d1, d2 = _docs(result, expected)
  if d1 is None or not compare_docx_files(result, expected):
    return 0.0
  has = lambda r: any(True for _ in r.element.iter(f"{W}object"))
  return float(any(has(r1) and has(r2) for r1, r2 in _run_pairs(d1, d2)))


def compare_contains_image(result: bytes | None, expected: bytes | None, **_) -> float:
  d1, d2 = _docs(result, expected)
  if d1 is None:
    return 0.0
  return float(all(("graphicData" in r1.element.xml) == ("graphicData" in r2.element.xml) for r1, r2 in _run_pairs(d1, d2)))


def _images(d) -> list[bytes]:
  return [rel.target_part.blob for rel in d.part.rels.values() if "image" in rel.reltype]


def compare_docx_images(result: bytes | None, expected: bytes | None, **_) -> float:
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  d1, d2 = _docs(result, expected)
  if d1 is None:
    return 0.0
  i1, i2 = _images(d1), _images(d2)
  if len(i1) != len(i2):
    return 0.0
  try:
    return float(all(Image.open(io.BytesIO(a)).tobytes() == Image.open(io.BytesIO(b)).tobytes() for a, b in zip(i1, i2)))
  except Exception:
    return 0.0


def compare_docx_lines(result: bytes | None, expected: bytes | None, **_) -> float:
  d1, d2 = _docs(result, expected)
  lines = lambda d: {p.text.strip() for p in d.paragraphs if p.text.strip()}
  return float(d1 is not None and lines(d1) == lines(d2))


def compare_docx_files_and_ignore_new_lines(result: bytes | None, expected: bytes | None, ignore_blanks: bool = True,
                                            **_) -> float:
  d1, d2 = _docs(result, expected)
  if d1 is None:
    return 0.0
  p1, p2 = ([p.text for p in d.paragraphs if p.text != ""] for d in (d1, d2))
  if ignore_blanks:
    return float(re.sub(r"\s+", " ", "\n".join(p1)).strip() == re.sub(r"\s+", " ", "\n".join(p2)).strip())
  return float(p1 == p2)


def _highlighted(data: bytes) -> set[str]:
  with zipfile.ZipFile(io.BytesIO(data)) as z:
    root = ElementTree.fromstring(z.read("word/document.xml"))
  out = set()
  for run in root.iter(f"{W}r"):
    h, t = run.find(f".//{W}highlight"), run.find(f".//{W}t")
    if h is not None and h.get(f"{W}val") != "none" and t is not None:
      out.add(t.text)
  return out


def compare_highlighted_text(result: bytes | None, expected: bytes | None, **_) -> float:
  if not result or not expected:
    return 0.0
  try:
    return float(_highlighted(result) == _highlighted(expected))
  except Exception:
    return 0.0


def check_italic_font_size_14(result: bytes | None, expected: bytes | None, **_) -> float:
  d = _doc(result)
  if d is None or not compare_docx_files(result, expected):
    return 0.0
  return float(all(r.font.size is not None and r.font.size.pt == 14 for p in d.paragraphs for r in p.runs if r.italic))


def evaluate_strike_through_last_paragraph(result: bytes | None, expected: bytes | None, **_) -> float:
  d = _doc(result)
  if d is None or not d.paragraphs or not compare_docx_files(result, expected):
    return 0.0
  return float(all(r.font.strike for r in d.paragraphs[-1].runs))


def check_tabstops(result: bytes | None, expected: bytes | None, word_number_split_by_tabstop: int | None = None,
                   index: int = 0, **_) -> float:
  from docx.enum.text import WD_TAB_ALIGNMENT   # office-format library only for this document type (start-up cost)
  d1, d2 = _docs(result, expected)
  if d1 is None:
    return 0.0
  p1, p2 = ([p for p in d.paragraphs if p.text.strip()] for d in (d1, d2))
  if len(p1) != len(p2) or not p1:
    return 0.0
  if word_number_split_by_tabstop is not None:
    for p in p1:
      parts = p.text.split("\t")
      if index >= len(parts) or len(parts[index].split()) != word_number_split_by_tabstop:
        return 0.0
  s = d2.sections[0]
  width = s.page_width - s.left_margin - s.right_margin
  keep = lambda t: not (t.alignment == WD_TAB_ALIGNMENT.CLEAR or (t.alignment == WD_TAB_ALIGNMENT.LEFT and t.position == 0))
  minus = 0.0
  for a, b in zip(p1, p2):
    t1, t2 = ([t for t in p.paragraph_format.tab_stops if keep(t)] for p in (a, b))
    if len(t1) != len(t2) or any(x.alignment != y.alignment for x, y in zip(t1, t2)):
      return 0.0
    minus += sum(abs(x.position - y.position) for x, y in zip(t1, t2)) / width
  return 1.0 - minus / len(p1)


_ODF = {"office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
        "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
        "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
        "fo": "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"}


def check_highlighted_words(result: bytes | None, expected: bytes | None, **_) -> float:
  """OSWorld: 1 when the texts match and nothing is highlighted yellow any more."""
  if not result or not expected or not compare_docx_files(result, expected):
    return 0.0
  try:
    with zipfile.ZipFile(io.BytesIO(result)) as z:
      root = ElementTree.fromstring(z.read("content.xml"))
  except Exception:
    return 0.0
  yellow = set()
  for st in root.iterfind("office:automatic-styles/style:style", _ODF):
    for prop in st:
      if any(k.endswith("}background-color") and v.lower() == "#ffff00" for k, v in prop.attrib.items()):
        yellow.add(st.get(f"{{{_ODF['style']}}}name"))
  spans = {s.get(f"{{{_ODF['text']}}}style-name") for s in root.iter(f"{{{_ODF['text']}}}span")}
  return float(not (spans & yellow))


def _lab(rgb) -> np.ndarray:
  """sRGB (0-255) to CIELAB (D65), as scikit-image's rgb2lab."""
  c = np.asarray(rgb, dtype=np.float64) / 255.0
  c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
  xyz = np.array([[0.412453, 0.357580, 0.180423], [0.212671, 0.715160, 0.072169],
                  [0.019334, 0.119193, 0.950227]]) @ c / np.array([0.95047, 1.0, 1.08883])
  f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16.0 / 116.0)
  return np.array([116.0 * f[1] - 16.0, 500.0 * (f[0] - f[1]), 200.0 * (f[1] - f[2])])


def delta_e_2000(lab1, lab2) -> float:
  """CIEDE2000 colour difference (Sharma, Wu and Dalal 2005), kL = kC = kH = 1."""
  L1, a1, b1 = lab1
  L2, a2, b2 = lab2
  cbar = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
  g = 0.5 * (1 - np.sqrt(cbar ** 7 / (cbar ** 7 + 25.0 ** 7)))
  a1p, a2p = (1 + g) * a1, (1 + g) * a2
  c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
  h1p, h2p = np.degrees(np.arctan2(b1, a1p)) % 360, np.degrees(np.arctan2(b2, a2p)) % 360
  dL, dC = L2 - L1, c2p - c1p
  dh = 0.0 if c1p * c2p == 0 else (h2p - h1p if abs(h2p - h1p) <= 180 else h2p - h1p - 360 * np.sign(h2p - h1p))
  dH = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
  Lbar, cbarp = (L1 + L2) / 2, (c1p + c2p) / 2
  if c1p * c2p == 0:
    hbar = h1p + h2p
  elif abs(h1p - h2p) <= 180:
    hbar = (h1p + h2p) / 2
  else:
    hbar = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
  t = (1 - 0.17 * np.cos(np.radians(hbar - 30)) + 0.24 * np.cos(np.radians(2 * hbar))
       + 0.32 * np.cos(np.radians(3 * hbar + 6)) - 0.20 * np.cos(np.radians(4 * hbar - 63)))
  sl = 1 + 0.015 * (Lbar - 50) ** 2 / np.sqrt(20 + (Lbar - 50) ** 2)
  sc, sh = 1 + 0.045 * cbarp, 1 + 0.015 * cbarp * t
  rt = -2 * np.sqrt(cbarp ** 7 / (cbarp ** 7 + 25.0 ** 7)) * np.sin(np.radians(60 * np.exp(-((hbar - 275) / 25) ** 2)))
  return float(np.sqrt((dL / sl) ** 2 + (dC / sc) ** 2 + (dH / sh) ** 2 + rt * (dC / sc) * (dH / sh)))


def evaluate_colored_words_in_tables(result: bytes | None, expected: bytes | None, threshold: float = 3.5, **_) -> float:
  d = _doc(result)
  if d is None or not compare_docx_files(result, expected):
    return 0.0
  red, blue = _lab((255, 0, 0)), _lab((0, 0, 255))
  for table in d.tables:
    for row in table.rows:
      for cell in row.cells:
        for p in cell.paragraphs:
          for r in p.runs:
            if not r.text:
              continue
            rgb = r.font.color.rgb if r.font.color is not None and r.font.color.type is not None else None
            if rgb is None:   # no explicit colour (automatic: black) is not the colour asked for
              return 0.0
            want = red if r.text[0].lower() in "aeiou" else blue
            if delta_e_2000(_lab(tuple(rgb)), want) > threshold:
              return 0.0
  return 1.0


def compare_references(result: bytes | None, expected: bytes | None, reference_indicator: str = "References",
                       reference_base_result: float = 0.5, **_) -> float:
  d1, d2 = _docs(result, expected)
  if d1 is None:
    return 0.0
  p1, p2 = ([p.text for p in d.paragraphs] for d in (d1, d2))
  i1 = p1.index(reference_indicator) if reference_indicator in p1 else -1
  i2 = p2.index(reference_indicator) if reference_indicator in p2 else -1
  if i1 == -1 and i2 == -1:
    return 1.0
  if i1 == -1 or i2 == -1:
    return 0.0
  r1, r2 = [p for p in p1[i1 + 1:] if p.strip()], [p for p in p2[i2 + 1:] if p.strip()]
  if len(r1) != len(r2):
    return 0.0
  if not r1:
    return 1.0
  mean = sum(fuzzy_ratio(a, b) for a, b in zip(r1, r2)) / len(r1)
  return (mean - reference_base_result) / (1 - reference_base_result) if mean >= reference_base_result else 0.0


def find_default_font(result: bytes | None, rules: dict, **_) -> float:
  return float(lo_registry.registry_value(result, "/org.openoffice.Office.Writer/DefaultFont", "Standard") == rules["font_name"])


NAMES = ("contains_page_break", "has_page_numbers_in_footers", "compare_subscript_contains", "compare_insert_equation",
         "compare_contains_image", "compare_docx_images", "compare_docx_lines", "compare_docx_files_and_ignore_new_lines",
         "compare_highlighted_text", "check_italic_font_size_14", "evaluate_strike_through_last_paragraph",
         "check_tabstops", "check_highlighted_words", "evaluate_colored_words_in_tables", "compare_references",
         "find_default_font")
