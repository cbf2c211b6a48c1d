"""OSWorld's comparisons of plain files, archives, web pages and e-books, re-implemented from their
documented semantics (our code). Files arrive as bytes (None when absent: score 0).
  diff_text_file            difflib's ratio over the two files' lines
  compare_python_pure_text  the two texts equal once all whitespace is removed
  check_pdf_pages           rules {relation: eq|lt|le|gt|ge|ne, ref_value}: the page count relates so
  fuzzy_place_math          rules {expected: [answers]}: the .docx holds exactly 3 words; the mean over
                            them of the best fuzzy ratio against any answer
  compare_zip_files         same member names; PDFs whose extracted texts have a ratio >= 0.95, every
                            other member byte-equal
  compare_htmls             both pages parsed (lxml.html stands in for BeautifulSoup over lxml) and
                            walked in document order, element by element and text by text: elements
                            agree in tag, stripped text and attributes, texts are equal
  compare_conference_city_in_order  rules {expected: [city or [alternatives]]}: cells C2:C22 of the
                            workbook's active sheet each contain their expected city, in order
  compare_epub              both books reduced as OSWorld does (toc.ncx without navPoint lines,
                            content.opf without dc:identifier lines, each .html re-serialised without
                            line breaks), then the product over the sorted parts of diff_text_file
  is_expected_search_query  rules {expect: {pattern}}: the regex is found in the active tab's URL
  run_sqlite3               rules {sql}: the first column of the query's first row over the SQLite
                            database (opened in memory on the host; NULL counts 0)
"""
from __future__ import annotations

import difflib
import io
import operator
import re
import sqlite3
from typing import Any
import zipfile

from mage_jax.tasks.osworld.document_metrics import fuzzy_ratio, pdf_text


def _lines_ratio(a: str, b: str) -> float:
  return difflib.SequenceMatcher(a=a.splitlines(), b=b.splitlines()).ratio()


def diff_text_file(result: bytes | None, expected: bytes | None, **_) -> float:
  if result is None or expected is None:
    return 0.0
  return _lines_ratio(result.decode("utf-8", "replace"), expected.decode("utf-8", "replace"))


def compare_python_pure_text(result: bytes | None, expected: bytes | None, **_) -> float:
  if not result or not expected:
    return 0.0
  squash = lambda b: "".join(b.decode("utf-8", "replace").split())
  return float(squash(result) == squash(expected))


def check_pdf_pages(result: bytes | None, rules: dict, **_) -> float:
  from pypdf import PdfReader   # PDF library only for this document type (start-up cost)
  if result is None:
    return 0.0
  try:
    pages = len(PdfReader(io.BytesIO(result)).pages)
  except Exception:
    return 0.0
  return float(getattr(operator, rules["relation"])(pages, rules["ref_value"]))


def fuzzy_place_math(result: bytes | None, rules: dict, **_) -> float:
  import docx   # office-format library only for this document type (start-up cost)
  if result is None:
    return 0.0
  try:
    words = [w for p in docx.Document(io.BytesIO(result)).paragraphs for w in p.text.split()]
  except Exception:
    return 0.0
  if len(words) != 3:
    return 0.0
  return sum(max((fuzzy_ratio(w, a) for a in rules["expected"]), default=0.0) for w in words) / 3


def compare_zip_files(result: bytes | None, expected: bytes | None, **_) -> float:
  if not result or not expected:
    return 0.0
  try:
    with zipfile.ZipFile(io.BytesIO(result)) as z1, zipfile.ZipFile(io.BytesIO(expected)) as z2:
      if set(z1.namelist()) != set(z2.namelist()):
        return 0.0
      for name in z1.namelist():
        a, b = z1.read(name), z2.read(name)
        if name.lower().endswith(".pdf"):
          if difflib.SequenceMatcher(None, pdf_text(a), pdf_text(b)).ratio() < 0.95:
            return 0.0
        elif a != b:
          return 0.0
  except Exception:   # not an archive, or a member that isn't a PDF
    return 0.0
  return 1.0


def _html_nodes(el):
  """Elements and texts in document order (BeautifulSoup's recursiveChildGenerator over the tree)."""
  if isinstance(el.tag, str):
    yield ("element", el.tag, el.text_content().strip(), dict(el.attrib))
  else:   # a comment or processing instruction: a string in BeautifulSoup
    yield ("text", el.text or "")
  if el.text and isinstance(el.tag, str):
    yield ("text", el.text)
  for child in el:
    yield from _html_nodes(child)
    if child.tail:
      yield ("text", child.tail)


def compare_htmls(result: bytes | None, expected: bytes | None, **_) -> float:
  import lxml.html   # lxml only for HTML comparisons (start-up cost)
  if not result or not expected:
    return 0.0
  try:
    r, e = lxml.html.document_fromstring(result), lxml.html.document_fromstring(expected)
  except Exception:
    return 0.0
  return float(all(a == b for a, b in zip(_html_nodes(r), _html_nodes(e))))


def compare_conference_city_in_order(result: bytes | None, rules: dict, **_) -> float:
  import openpyxl   # office-format library only for this document type (start-up cost)
  if not result:
    return 0.0
  try:
    sheet = openpyxl.load_workbook(io.BytesIO(result)).active
    actual = [c.value for row in sheet["C2:C22"] for c in row]
    for i, cell in enumerate(actual):
      want = rules["expected"][i]
      options = [want] if isinstance(want, str) else want
      if not any(o in cell for o in options):
        return 0.0
  except (IndexError, TypeError, KeyError):   # a missing row or an empty cell
    return 0.0
  except Exception:   # not a workbook
    return 0.0
  return 1.0


def _epub_parts(data: bytes) -> list[tuple[str, str]]:
  import lxml.html   # lxml only for HTML comparisons (start-up cost)
  parts = []
  try:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
      for name, drop in (("toc.ncx", "navPoint"), ("content.opf", "dc:identifier")):
        lines = z.read(name).decode().splitlines()
        parts.append((name, "".join(l + "\n" for l in lines if drop not in l)))
      for name in z.namelist():
        if name.endswith(".html"):
          flat = "".join(ch for ch in z.read(name).decode() if ch not in "\r\n")
          parts.append((name, lxml.html.tostring(lxml.html.fromstring(flat.encode()), pretty_print=True, encoding="unicode")))
  except zipfile.BadZipFile:
    return []
  return sorted(parts)


def compare_epub(result: bytes | None, expected: bytes | None, **_) -> float:
  if result is None or expected is None:
    return 0.0
  try:
    r, e = _epub_parts(result), _epub_parts(expected)
  except Exception:   # a book without toc.ncx or content.opf
    return 0.0
  score = 1.0
  for (_, a), (_, b) in zip(r, e):
    score *= _lines_ratio(a, b)
  return score


def is_expected_search_query(result: Any, rules: dict, **_) -> float:
  url = (result or {}).get("url") if isinstance(result, dict) else None
  return float(url is not None and re.search(rules["expect"]["pattern"], url) is not None)


def run_sqlite3(result: bytes | None, rules: dict, **_) -> float:
  if not result:
    return 0.0
  db = sqlite3.connect(":memory:")
  try:
    db.deserialize(result)
    row = db.execute(rules["sql"]).fetchone()
  except sqlite3.DatabaseError:   # not a database, or the query doesn't fit it
    return 0.0
  finally:
    db.close()
  return float((row[0] if row else 0) or 0)


NAMES = ("run_sqlite3", "diff_text_file", "compare_python_pure_text", "check_pdf_pages", "fuzzy_place_math", "compare_zip_files",
         "compare_htmls", "compare_conference_city_in_order", "compare_epub", "is_expected_search_query")
