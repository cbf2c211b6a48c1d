"""The document/data preparer and checker types (tasks/doc_types.py, tasks/data_types.py), scored on
files built here with the libraries directly; malformed agent files score 0, bad specs name the field."""
import io
import sqlite3
import zipfile

import pytest

from mage_jax.tasks import checkers, preparers
from mage_jax.tasks.data_types import archive_bytes, png_bytes, sqlite_bytes
from mage_jax.tasks.doc_types import docx_bytes, pdf_text_bytes


class Files:
  def __init__(self, files):
    self.files, self.terminal_outputs = files, []

  def read_file(self, path):
    return self.files.get(path)

  def list_dir(self, path):
    return None


def score(files, spec):
  checkers.validate_spec(spec, "t")
  return checkers.score(Files(files), spec)


def test_docx_checkers_read_what_python_docx_wrote():
  import docx
  d = docx.Document()
  d.add_heading("Title", 1)
  d.add_paragraph("")
  p = d.add_paragraph()
  p.add_run("all bold").bold = True
  t = d.add_table(rows=2, cols=2)
  for i, v in enumerate(["a", "1", "b", "2"]):
    t.cell(i // 2, i % 2).text = v
  buf = io.BytesIO()
  d.save(buf)
  f = {"x.docx": buf.getvalue()}
  assert score(f, {"type": "docx_paragraphs", "path": "x.docx", "paragraphs": ["Title", "all bold"]}) == 1
  assert score(f, {"type": "docx_paragraphs", "path": "x.docx", "paragraphs": ["Title"]}) == 0
  assert score(f, {"type": "docx_table", "path": "x.docx", "rows": [["a", 1], ["b", 2]]}) == 1
  assert score(f, {"type": "docx_table", "path": "x.docx", "rows": [["a", 1]]}) == 0
  assert score(f, {"type": "docx_style", "path": "x.docx", "text": "Title", "style": "Heading 1"}) == 1
  assert score(f, {"type": "docx_style", "path": "x.docx", "text": "all bold", "bold": True}) == 1
  assert score(f, {"type": "docx_style", "path": "x.docx", "text": "Title", "bold": True}) == 0


def test_docx_style_only_and_paragraphs_refuse_blind_formatting_hacks():
  """A task about one paragraph: styling or bolding every paragraph, or deleting the others, is not it."""
  paras = ["Intro line", "The north region led.", "Next review in May."]

  def doc(heading=(), bold=(), keep=(0, 1, 2)):
    return {"x.docx": docx_bytes([{"text": paras[i], **({"style": "Heading 1"} if i in heading else {}),
                                   **({"bold": True} if i in bold else {})} for i in keep])}
  head = {"type": "docx_style", "path": "x.docx", "text": paras[1], "style": "Heading 1", "only": True, "paragraphs": paras}
  bold = {"type": "docx_style", "path": "x.docx", "text": paras[1], "bold": True, "only": True, "paragraphs": paras}
  assert score(doc(heading=[1]), head) == 1 and score(doc(bold=[1]), bold) == 1
  assert score(doc(), head) == 0 and score(doc(), bold) == 0                        # untouched
  assert score(doc(heading=[0, 1, 2]), head) == 0 and score(doc(bold=[0, 1, 2]), bold) == 0   # everything
  assert score(doc(heading=[1], keep=[1]), head) == 0 and score(doc(bold=[1], keep=[1]), bold) == 0  # the rest deleted
  assert score(doc(heading=[0, 1, 2]), {**head, "only": False, "paragraphs": paras}) == 1   # without `only`, it passes


def test_preparer_bytes_open_with_the_reading_libraries():
  import docx
  from PIL import Image
  from pypdf import PdfReader
  d = docx.Document(io.BytesIO(docx_bytes(["one", {"text": "two", "style": "Heading 1"}], [[["k", "v"]]])))
  assert [p.text for p in d.paragraphs] == ["one", "two"] and d.paragraphs[1].style.name == "Heading 1"
  r = PdfReader(io.BytesIO(pdf_text_bytes(["alpha 1", "beta\n2"], title="T", author="A")))
  assert [p.extract_text().split() for p in r.pages] == [["alpha", "1"], ["beta", "2"]] and r.metadata.author == "A"
  im = Image.open(io.BytesIO(png_bytes([20, 10], [255, 255, 255], [[0, 0, 5, 5, [255, 0, 0]]])))
  assert im.size == (20, 10) and im.getpixel((4, 4)) == (255, 0, 0) and im.getpixel((5, 5)) == (255, 255, 255)
  with zipfile.ZipFile(io.BytesIO(archive_bytes("zip", {"a.txt": "x"}))) as z:
    assert z.read("a.txt") == b"x"


def test_sqlite_query_and_image_and_archive_checkers():
  db = sqlite_bytes({"t": {"columns": ["a TEXT", "b INTEGER"], "rows": [["x", 1], ["y", 2]]}})
  f = {"d.db": db, "p.png": png_bytes([20, 10], [0, 0, 255]), "a.tgz": archive_bytes("tar.gz", {"d/a.txt": "hi"})}
  q = {"type": "sqlite_query", "path": "d.db", "query": "SELECT a, b FROM t ORDER BY a"}
  assert score(f, {**q, "rows": [["x", 1], ["y", 2]]}) == 1
  assert score(f, {**q, "rows": [["x", 1]]}) == 0
  assert score(f, {**q, "query": "SELECT * FROM missing", "rows": []}) == 0   # no such table: 0, not a crash
  assert score(f, {"type": "image_size", "path": "p.png", "size": [20, 10]}) == 1
  assert score(f, {"type": "image_pixels", "path": "p.png", "points": [[3, 3, [0, 0, 250]]]}) == 1
  assert score(f, {"type": "image_pixels", "path": "p.png", "points": [[30, 3, [0, 0, 255]]]}) == 0  # off the image
  assert score(f, {"type": "image_format", "path": "p.png", "format": "PNG", "size": [20, 11]}) == 0
  assert score(f, {"type": "archive_members", "path": "a.tgz", "names": ["d/a.txt"], "texts": {"d/a.txt": "hi"}}) == 1
  assert score(f, {"type": "archive_members", "path": "a.tgz", "names": ["d/a.txt"], "texts": {"d/a.txt": "ho"}}) == 0


@pytest.mark.parametrize("spec", [
    {"type": "docx_paragraphs", "path": "bad", "paragraphs": ["x"]},
    {"type": "docx_table", "path": "bad", "rows": [["x"]]},
    {"type": "pdf_page_texts", "path": "bad", "pages": ["x"]},
    {"type": "pdf_meta", "path": "bad", "title": "x"},
    {"type": "xlsx_rows", "path": "bad", "rows": [["x"]]},
    {"type": "pptx_bodies", "path": "bad", "bodies": ["x"]},
    {"type": "sqlite_query", "path": "bad", "query": "SELECT 1", "rows": [[1]]},
    {"type": "image_size", "path": "bad", "size": [1, 1]},
    {"type": "archive_members", "path": "bad", "names": ["x"]},
    {"type": "csv_equals", "path": "bad", "rows": [["x"]]},
])
def test_a_malformed_agent_file_scores_zero(spec):
  junk = bytes(range(256)) * 4 + b"\n\"unterminated,\x00"
  assert score({"bad": junk}, spec) == 0
  assert score({}, spec) == 0


def test_bad_specs_name_the_field():
  with pytest.raises(ValueError, match=r"setup\[0\]: sqlite needs field 'tables'"):
    preparers.validate_spec({"type": "sqlite", "path": "d.db"}, "setup[0]")
  with pytest.raises(ValueError, match=r"checker: sqlite_query needs field 'query'"):
    checkers.validate_spec({"type": "sqlite_query", "path": "d.db", "rows": []}, "checker")
  assert sqlite3.sqlite_version  # the stdlib module the checker needs
