"""OSWorld evaluators, getters and protocol pieces (mage_jax/tasks/osworld): every metric against
hand-made documents that should and should not match, the local file cache and its placeholders,
pyautogui steps as our actions, relative dates, infeasible scoring, the per-domain table, and the
DevTools client against a real headless Chromium on loopback."""
import datetime as dt
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import types
import zipfile

import numpy as np
import pytest

from mage_jax.tasks.osworld import (browser_getters, cache, document_metrics, importer, leaderboard, pyautogui_steps,
                                    relative_time, rule_metrics, table_metrics, task_types)

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "osworld")


# ---- Writer --------------------------------------------------------------------------------------
def _docx(*paras):
  import docx
  d = docx.Document()
  for p in paras:
    d.add_paragraph(p)
  buf = io.BytesIO()
  d.save(buf)
  return buf.getvalue()


def _odt(*paras):
  body = "".join(f"<text:p>{p}</text:p>" for p in paras)
  xml = ('<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
         'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
         f'{body}</office:text></office:body></office:document-content>')
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z:
    z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
    z.writestr("content.xml", xml)
  return buf.getvalue()


def test_compare_docx_files():
  f = document_metrics.compare_docx_files
  assert f(_docx("Title", "Body  text"), _docx("Title", "Body text")) == 1.0          # blanks collapse
  assert f(_docx("Title", "Body"), _docx("Title", "Bodies")) == 0.0
  assert f(_docx("A", "B"), _docx("B", "A")) == 0.0
  assert f(_docx("A", "B"), _docx("B", "A"), ignore_order=True) == 1.0
  assert f(_docx("ABC"), _docx("abc"), ignore_case=True) == 1.0
  assert f(_docx("A", "B"), _docx("A B"), ignore_blanks=False) == 0.0                # paragraph count differs
  assert 0.5 < f(_docx("hello world"), _docx("hello word"), content_only=True) < 1.0  # fuzzy ratio
  assert f(_odt("One", "Two"), _odt("One", "Two")) == 1.0
  assert f(_odt("One", "Two"), _odt("One", "Three")) == 0.0
  assert f(None, _docx("A")) == 0.0 and f(b"not a zip", _docx("A")) == 0.0


# ---- Impress -------------------------------------------------------------------------------------
def _pptx(title="Plan", size=24, bold=False, left=None, notes="", top=None):
  from pptx import Presentation
  from pptx.util import Emu, Pt
  prs = Presentation()
  s = prs.slides.add_slide(prs.slide_layouts[1])
  s.shapes.title.text = title
  run = s.placeholders[1].text_frame.paragraphs[0].add_run()
  run.text, run.font.size, run.font.bold = "point one", Pt(size), bold
  if left is not None:
    s.shapes.title.left = Emu(left)
  if top is not None:
    s.shapes.title.top = Emu(top)
  if notes:
    s.notes_slide.notes_text_frame.text = notes
  buf = io.BytesIO()
  prs.save(buf)
  return buf.getvalue()


def test_compare_pptx_files():
  f = document_metrics.compare_pptx_files
  assert f(_pptx(), _pptx()) == 1.0
  assert f(_pptx(title="Plan B"), _pptx()) == 0.0
  assert f(_pptx(size=30), _pptx()) == 0.0
  assert f(_pptx(size=30), _pptx(), examine_font_size=False) == 1.0
  assert f(_pptx(bold=True), _pptx()) == 0.0
  assert f(_pptx(left=12345), _pptx()) == 0.0
  assert f(_pptx(left=12345), _pptx(), examine_shape=False) == 1.0
  assert f(_pptx(notes="say hi"), _pptx()) == 0.0
  assert f(None, _pptx()) == 0.0 and f(b"junk", _pptx()) == 0.0
  # OSWorld's task-specific options: the "Product Comparison" title must move below the original, past 3600000 EMU
  moved = dict(examine_shape=False, examine_title_bottom_position=True)
  assert f(_pptx("Product Comparison", top=4000000), _pptx("Product Comparison"), **moved) == 1.0
  assert f(_pptx("Product Comparison", top=3000000), _pptx("Product Comparison"), **moved) == 0.0
  assert f(_pptx(left=12345), _pptx(), examine_shape=False, examine_shape_for_shift_size=True) == 0.0


# ---- PDFs and images -----------------------------------------------------------------------------
def _pdf(text):
  from fpdf import FPDF
  p = FPDF()
  p.add_page()
  p.set_font("helvetica", size=12)
  p.cell(text=text)
  return bytes(p.output())


def test_compare_pdfs():
  f = document_metrics.compare_pdfs
  assert f(_pdf("Invoice 2312 total 42"), _pdf("Invoice 2312 total 42")) == 1.0
  assert f(_pdf("Invoice 2312 total 42"), _pdf("Completely different words")) < 0.6
  assert f([_pdf("a b c"), _pdf("x")], [_pdf("a b c"), _pdf("x")]) == 1.0      # multi: mean over pairs
  assert f([_pdf("a b c"), None], [_pdf("a b c"), _pdf("x")]) == 0.5
  assert f(b"not a pdf", _pdf("x")) == 0.0


def _naive_ssim(a, b, data_range=255.0):
  """SSIM written directly from its definition, window by window (independent of ssim())."""
  a, b = a.astype(float), b.astype(float)
  c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
  vals = []
  for i in range(a.shape[0] - 6):
    for j in range(a.shape[1] - 6):
      x, y = a[i:i + 7, j:j + 7].ravel(), b[i:i + 7, j:j + 7].ravel()
      mx, my = x.mean(), y.mean()
      vx, vy = x.var(ddof=1), y.var(ddof=1)
      cxy = ((x - mx) * (y - my)).sum() / (x.size - 1)
      vals.append(((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2)))
  return float(np.mean(vals))


def _png(arr):
  from PIL import Image
  buf = io.BytesIO()
  Image.fromarray(arr.astype(np.uint8)).save(buf, "PNG")
  return buf.getvalue()


def test_compare_images_ssim():
  rng = np.random.default_rng(0)
  a = rng.integers(0, 256, (20, 24)).astype(np.float64)
  b = np.clip(a + rng.normal(0, 40, a.shape), 0, 255)
  assert document_metrics.ssim(a, b) == pytest.approx(_naive_ssim(a, b), abs=1e-9)
  img = (np.add.outer(np.arange(40), np.arange(50)) * 2) % 256
  assert document_metrics.compare_images(_png(img), _png(img)) == pytest.approx(1.0)
  assert document_metrics.compare_images(_png(img), _png(255 - img)) < 0.5
  assert document_metrics.compare_images(None, _png(img)) == 0.0


# ---- rules, JSON, URLs, config files -------------------------------------------------------------
def test_rule_metrics():
  j = rule_metrics.check_direct_json_object
  assert j("{'a': 1, 'b': 'x'}", {"expected": {"a": 1}}) == 1.0
  assert j({"a": 2}, {"expected": {"a": 1}}) == 0.0
  assert j({"from": "New York, NY", "tags": ["x", "y"]},
           {"expected": {"from": "New York", "tags": ["z", "y"]}, "expect_in_result": True}) == 1.0
  assert j({"from": "Boston"}, {"expected": {"from": "New York"}, "expect_in_result": True}) == 0.0
  assert j("not json", {"expected": {}}) == 0.0
  u = rule_metrics.is_expected_url_pattern_match
  assert u({"url": "https://www.example.com/search?q=cats"}, {"expected": [r"q=cats", r"example\.com"]}) == 1.0
  assert u("https://www.example.com/search?q=dogs", {"expected": [r"q=cats"]}) == 0.0
  t = rule_metrics.is_expected_active_tab
  assert t({"url": "https://WWW.Example.com/"}, {"type": "url", "url": "https://example.com"}) == 1.0
  assert t("https://example.com/a", {"type": "url", "url": "https://example.com/b"}) == 0.0
  e = rule_metrics.is_extension_installed
  assert e("ms-python.python\nfoo.bar\n", {"type": "contain", "expected": "ms-python.python"}) == 1.0
  assert e("foo.bar\n", {"type": "contain", "expected": "ms-python.python"}) == 0.0
  assert e("foo.bar\n", {"type": "not_contain", "expected": "ms-python.python"}) == 1.0
  c = rule_metrics.check_config_status
  gimprc = b"# GIMP gimprc\n(undo-levels 5)\n(theme \"Dark\")\n(default-image (width 640) (height 400))\n"
  assert c(gimprc, {"key": "undo-levels", "value": "5"}) == 1.0
  assert c(gimprc, {"key": "undo-levels", "value": "100"}) == 0.0
  assert c(b"(default-view (show-menubar no))\n", {"key": ["default-view", "(show-menubar"], "value": "no"}) == 1.0
  assert c(None, {"key": "undo-levels", "value": "5"}) == 0.0


def _book(rows, title="Sheet1"):
  import openpyxl
  wb = openpyxl.Workbook()
  wb.active.title = title
  for r in rows:
    wb.active.append(r)
  buf = io.BytesIO()
  wb.save(buf)
  return buf.getvalue()


def test_compare_table_rules():
  f = table_metrics.compare_table
  rules = [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
  assert f(_book([["x", 1.000001]]), _book([["x", 1.0]]), rules=rules) == 1.0          # 4-decimal precision
  assert f(_book([["x", 1.1]]), _book([["x", 1.0]]), rules=rules) == 0.0
  assert f(_book([["x"]], "Data"), _book([["x"]]), rules=[{"type": "sheet_name"}]) == 0.0
  assert f(_book([["x"]]), _book([["x"]]), rules=[{"type": "sheet_data", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]) == 1.0
  assert f(_book([["x"]]), _book([["x"]]), rules=[{"type": "sheet_data", "sheet_idx0": "RNNope", "sheet_idx1": "EI0"}]) == 0.0
  with pytest.raises(ValueError, match="sparkline"):
    f(_book([["x"]]), _book([["x"]]), rules=[{"type": "sparkline"}])


def test_relative_time_follows_osworld_day_rules():
  wed = dt.datetime(2026, 12, 2)   # a Wednesday
  r = relative_time.rules({"rules": {"relativeTime": {"from": "next Monday", "to": "next Friday"},
                                     "expected": {"from": "{DoW}, {Month} {DayD}", "to": "{Year}-{Month0D}-{Day0D}"}}}, wed)
  assert r["expected"] == {"from": "Mon, Dec 7", "to": "2026-12-11"}
  r = relative_time.rules({"rules": {"relativeTime": {"from": "10th next month"},
                                     "expected": {"time": "{MonthFull} {DayD} {Year}"}}}, wed)
  assert r["expected"]["time"] == "January 10 2027"
  assert relative_time.resolve("tomorrow", wed).day == 3
  assert relative_time.resolve("this Saturday", wed).day == 5
  with pytest.raises(ValueError, match="relative day"):
    relative_time.resolve("someday", wed)


# ---- pyautogui steps -----------------------------------------------------------------------------
def test_pyautogui_plain_sequences_become_actions():
  code = ("import pyautogui; import time; pyautogui.click(960, 540); time.sleep(0.5); "
          "pyautogui.hotkey([\"shift\", \"ctrl\", \"e\"]); pyautogui.write('report.pdf'); pyautogui.press('enter')")
  assert pyautogui_steps.parse(code) == [
      {"action": "left_click", "coordinate": [500, 500]}, {"action": "wait", "time": 0.5},
      {"action": "key", "keys": ["shift", "ctrl", "e"]}, {"action": "type", "text": "report.pdf"},
      {"action": "key", "keys": ["enter"]}]
  assert pyautogui_steps.code_of({"command": ["python3", "-c", "import pyautogui"]}) == "import pyautogui"
  for bad in ("import os; os.remove('x')", "x = pyautogui.locateOnScreen('a.png')", "pyautogui.click()",
              "for i in range(3): pyautogui.press('tab')", "pyautogui.hotkey('ctrl', 'nosuchkey')"):
    with pytest.raises(ValueError):
      pyautogui_steps.parse(bad)


def test_pyautogui_steps_run_through_the_desktop_action_path():
  calls = []
  desk = types.SimpleNamespace(execute=lambda c: calls.append(c))
  pyautogui_steps.run(desk, [{"action": "key", "keys": ["ctrl", "s"]}, {"action": "wait", "time": 0.01},
                             {"action": "type", "text": "a"}])
  assert calls == [{"action": "key", "keys": ["ctrl", "s"]}, {"action": "type", "text": "a"}]


# ---- the local file cache ------------------------------------------------------------------------
def _task(tid, url="https://host/x.xlsx?id=1", gold="https://host/gold?id=2"):
  return {"id": tid, "snapshot": "libreoffice_calc", "instruction": "fill the blanks", "related_apps": ["libreoffice_calc"],
          "config": [{"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/x.xlsx"}]}},
                     {"type": "open", "parameters": {"path": "/home/user/x.xlsx"}}],
          "evaluator": {"func": "compare_table", "result": {"type": "vm_file", "path": "/home/user/x.xlsx", "dest": "x.xlsx"},
                        "expected": {"type": "cloud_file", "path": gold, "dest": "x_gold.xlsx"},
                        "postconfig": [{"type": "execute", "parameters": {"command": [
                            "python", "-c", "import pyautogui; pyautogui.hotkey(\"ctrl\", \"s\")"]}}]}}


def test_cache_lists_needs_and_placeholders_make_the_task_importable(tmp_path):
  src = tmp_path / "examples" / "libreoffice_calc"
  src.mkdir(parents=True)
  (src / "t1.json").write_text(json.dumps(_task("t1")))
  (src / "t2.json").write_text(json.dumps(_task("t2", gold="https://host/gold?id=3")))
  (tmp_path / "examples" / "Windows").mkdir()
  (tmp_path / "examples" / "Windows" / "w.json").write_text(json.dumps(_task("w")))
  tasks, bad = importer.load_tasks(str(tmp_path / "examples"))
  assert [t["id"] for _, t in tasks] == ["t1", "t2"] and not bad     # the Windows folder is skipped
  rows = cache.needed(tasks)
  assert sorted((r["url"], r["tasks"]) for r in rows) == [
      ("https://host/gold?id=2", ["t1"]), ("https://host/gold?id=3", ["t2"]), ("https://host/x.xlsx?id=1", ["t1", "t2"])]
  empty = importer.import_dir(str(tmp_path / "examples"), str(tmp_path / "out0"))
  assert not empty["imported"] and all(any("local file cache" in r for r in x["reasons"]) for x in empty["refused"])
  assert cache.make_placeholders(rows, str(tmp_path / "ph")) == 3
  assert cache.make_placeholders(rows, str(tmp_path / "ph")) == 0    # present files are kept
  full = importer.import_dir(str(tmp_path / "examples"), str(tmp_path / "out1"), str(tmp_path / "ph"))
  assert [r["id"] for r in full["imported"]] == ["t1", "t2"] and full["by_domain"] == {
      "libreoffice_calc": {"imported": 2, "refused": 0}}
  pkg = json.loads((tmp_path / "out1" / "osworld_t1" / "task.json").read_text())
  gold = pkg["checker"]["metrics"][0]["expected"]
  assert gold["src"] == f"files/expected/{cache.cache_name('https://host/gold?id=2', 'x_gold.xlsx')}"
  assert (tmp_path / "out1" / "osworld_t1" / gold["src"]).read_bytes() == cache.PLACEHOLDER
  assert pkg["checker"]["postconfig"] == [{"type": "gui_actions", "actions": [{"action": "key", "keys": ["ctrl", "s"]}]}]
  assert "osworld_domain:libreoffice_calc" in pkg["skills"]


def test_cli_lists_needs_and_imports_from_the_cache(tmp_path):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  src = tmp_path / "examples" / "libreoffice_calc"
  src.mkdir(parents=True)
  (src / "t1.json").write_text(json.dumps(_task("t1")))
  env = {**os.environ, "PYTHONPATH": root}
  run = lambda *a: subprocess.run([sys.executable, "-m", "launch.import_tasks", "--format=osworld",
                                   f"--src={tmp_path / 'examples'}", *a], cwd=root, env=env, capture_output=True, text=True)
  p = run(f"--list_needed={tmp_path / 'needs.tsv'}", f"--make_placeholders={tmp_path / 'ph'}")
  assert p.returncode == 0, p.stderr
  lines = (tmp_path / "needs.tsv").read_text().splitlines()
  assert len(lines) == 2 and all(len(l.split("\t")) == 3 for l in lines)
  p = run(f"--out={tmp_path / 'out'}", f"--osworld_cache={tmp_path / 'ph'}")
  assert p.returncode == 0, p.stderr
  assert "1 imported, 0 refused" in p.stdout


def test_refusals_name_unsupported_options_and_vs_code():
  t = _task("t")
  t["evaluator"]["options"] = {"rules": [{"type": "sparkline", "sheet_idx0": 0, "sheet_idx1": "EI0"}]}
  res = importer.convert(t, "libreoffice_calc/t.json")
  assert any("compare_table rule 'sparkline'" in r for r in res.reasons)
  t = _task("v")
  t["related_apps"] = ["vscode"]
  assert any("VS Code is not packaged by Debian" in r for r in importer.convert(t, "vs_code/v.json").reasons)


# ---- scoring: infeasible tasks, OSWorld's combination, getters -----------------------------------
class _Ctx:
  def __init__(self, files=None, status=None, root=None):
    self.files, self.terminate_status, self.terminal_outputs = files or {}, status, []
    self.sandbox = object()
    self.task = types.SimpleNamespace(root=root)

  def read_file(self, path):
    return self.files.get(path)

  def list_dir(self, path):
    return None


def test_infeasible_scores_one_only_when_the_agent_gives_up():
  spec = {"type": "osworld", "infeasible": True, "metrics": []}
  task_types.validate(spec, "checker")
  assert task_types.score(_Ctx(status="failure"), spec) == 1.0
  assert task_types.score(_Ctx(status="success"), spec) == 0.0
  assert task_types.score(_Ctx(status=None), spec) == 0.0
  feasible = {"type": "osworld", "metrics": [{"func": "exact_match", "result": {"type": "rule", "rules": "x"},
                                              "expected": {"type": "rule", "rules": {"expected": "x"}}}]}
  assert task_types.score(_Ctx(), feasible) == 1.0
  assert task_types.score(_Ctx(status="failure"), feasible) == 0.0   # FAIL on a feasible task scores 0


def test_combination_and_file_getters(tmp_path):
  assert task_types.combine([0.5], "and") == 0.5
  assert task_types.combine([1.0, 0.5], "and") == 0.75 and task_types.combine([1.0, 0.0], "and") == 0.0
  assert task_types.combine([0.2, 0.5], "or") == 0.5 and task_types.combine([0.2, 1.0], "or") == 1.0
  (tmp_path / "files" / "expected").mkdir(parents=True)
  (tmp_path / "files" / "expected" / "gold.docx").write_bytes(_docx("Hello"))
  ctx = _Ctx({"/home/user/a.docx": _docx("Hello"), "/home/user/.config/vlc/vlcrc": b"[qt]\nqt-minimal-view=1\n"},
             root=str(tmp_path))
  spec = {"type": "osworld", "metrics": [{"func": "compare_docx_files",
                                          "result": {"type": "vm_file", "path": "/home/user/a.docx"},
                                          "expected": {"type": "cloud_file", "src": "files/expected/gold.docx"}}]}
  assert task_types.score(ctx, spec) == 1.0
  ctx.files["/home/user/a.docx"] = _docx("Goodbye")
  assert task_types.score(ctx, spec) == 0.0
  assert task_types.get(ctx, {"type": "vlc_config", "dest": "vlcrc"}) == b"[qt]\nqt-minimal-view=1\n"
  assert task_types.get(ctx, {"type": "cache_file", "path": "w.out"}, {"w.out": b"x"}) == b"x"


def test_leaderboard_table_means_runs_per_domain():
  R = lambda tid, run, score, dom: types.SimpleNamespace(episode_id=f"{tid}-r{run}", score=score,
                                                         skills=["osworld:x", f"osworld_domain:{dom}"])
  rows = [R("a", 0, 1.0, "os"), R("b", 0, 0.0, "os"), R("c", 0, 0.5, "chrome"),
          R("a", 1, 1.0, "os"), R("b", 1, 1.0, "os"), R("c", 1, 0.0, "chrome")]
  t = leaderboard.table(rows)
  assert t["runs"] == 2
  assert t["domains"]["os"] == {"tasks": 2, "per_run": [50.0, 100.0], "mean": 75.0}
  assert t["domains"]["chrome"]["per_run"] == [50.0, 0.0]
  assert list(t["domains"]) == ["chrome", "os"]                     # OSWorld's column order
  assert t["overall"]["per_run"] == pytest.approx([50.0, 200 / 3]) and t["overall"]["tasks"] == 3
  text = leaderboard.format_table(t)
  assert "overall" in text and "75.00" in text


# ---- DevTools client against a real Chromium on loopback -----------------------------------------
CHROMIUM = "/usr/lib/chromium/chromium"


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed (make system-deps)")
def test_devtools_client_reads_tabs_and_the_dom_of_a_real_chromium(tmp_path):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  page = tmp_path / "flight.html"
  page.write_text("<title>Flights</title><p class='city'>Boston</p><p class='city'>Denver</p>"
                  "<div><span>Depart: Mon, Dec 7</span></div><input id='q' value=' cats '>"
                  f"<p id='big'>{'x' * 70000}</p>")
  url = f"file://{page}?from=BOS&to=DEN"
  proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
                           f"--user-data-dir={tmp_path / 'profile'}", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    run = lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    browser_getters.DEVTOOLS_PORT, old = port, browser_getters.DEVTOOLS_PORT
    try:
      deadline = time.monotonic() + 30
      while browser_getters.get(run, {"type": "open_tabs_info"}) in (None, []) and time.monotonic() < deadline:
        time.sleep(0.3)
      info = browser_getters.get(run, {"type": "active_tab_info"})
      assert info["title"] == "Flights" and info["url"] == url and "Denver" in info["content"]
      assert len(info["content"]) > 70000   # a message longer than 64 KiB: 8-byte WebSocket length
      assert browser_getters.get(run, {"type": "active_url_from_accessTree", "goto_prefix": "x:"}) == f"x:{page}?from=BOS&to=DEN"
      assert browser_getters.get(run, {"type": "active_tab_url_parse", "parse_keys": ["from", "to"],
                                       "replace": {"to": "dest"}}) == {"from": "BOS", "dest": "DEN"}
      assert browser_getters.get(run, {"type": "active_tab_html_parse", "category": "class", "class_singleObject": {},
                                       "class_multiObject": {"city": {"0": "start", "1": "end"}}}) == {"start": "Boston", "end": "Denver"}
      assert browser_getters.get(run, {"type": "active_tab_html_parse", "category": "xpath",
                                       "xpathObject": {"/html/body/div/span": "depart"}}) == {"depart": "Depart: Mon, Dec 7"}
      assert browser_getters.get(run, {"type": "active_tab_html_parse", "category": "input",
                                       "inputObject": {"//input[@id='q']": "q"}}) == {"q": "cats"}
      assert browser_getters.get(run, {"type": "active_tab_html_parse", "category": "label",
                                       "labelObject": {"Depart:": "d"}}) == {"d": "Depart: Mon, Dec 7"}
    finally:
      browser_getters.DEVTOOLS_PORT = old
  finally:
    proc.kill()
    proc.wait()
  # no browser listening: the getter reads nothing (the metric then scores 0), no crash
  assert browser_getters.get(run, {"type": "active_tab_info"}) is None


def _chart_book(kind="bar", title="Sales", legend="r"):
  import openpyxl
  from openpyxl.chart import BarChart, LineChart, Reference
  wb = openpyxl.Workbook()
  ws = wb.active
  for r in [["month", "sales"], ["Jan", 1], ["Feb", 2]]:
    ws.append(r)
  ch = BarChart() if kind == "bar" else LineChart()
  ch.add_data(Reference(ws, min_col=2, min_row=1, max_row=3), titles_from_data=True)
  ch.set_categories(Reference(ws, min_col=1, min_row=2, max_row=3))
  ch.title, ch.legend.position = title, legend
  ws.add_chart(ch, "D2")
  buf = io.BytesIO()
  wb.save(buf)
  return buf.getvalue()


def test_compare_table_chart_rule():
  rules = [{"type": "chart", "sheet_idx0": 0, "sheet_idx1": "EI0", "chart_props": ["type", "title", "legend"]}]
  f = table_metrics.compare_table
  assert f(_chart_book(), _chart_book(), rules=rules) == 1.0
  assert f(_chart_book("line"), _chart_book(), rules=rules) == 0.0
  assert f(_chart_book(title="Costs"), _chart_book(), rules=rules) == 0.0
  assert f(_chart_book(legend="b"), _chart_book(), rules=rules) == 0.0
  assert f(_chart_book(legend="b"), _chart_book(), rules=[{**rules[0], "chart_props": ["type"]}]) == 1.0
  assert f(_book([["month", "sales"], ["Jan", 1], ["Feb", 2]]), _chart_book(), rules=rules) == 0.0   # no chart


def _pivot_book(row=0, data=1, subtotal="sum"):
  """A workbook with one pivot table over Data!A1:C3 built from openpyxl's pivot objects."""
  import openpyxl
  from openpyxl.pivot.cache import CacheDefinition, CacheField, CacheSource, SharedItems, WorksheetSource
  from openpyxl.pivot.table import DataField, FieldItem, Location, PivotField, RowColField, TableDefinition
  wb = openpyxl.Workbook()
  ws = wb.active
  ws.title = "Data"
  for r in [["m", "k", "v"], ["a", "x", 1], ["b", "y", 2]]:
    ws.append(r)
  pt = TableDefinition(name="P1", cacheId=1, dataCaption="Values",
                       location=Location(ref="A1:B4", firstHeaderRow=1, firstDataRow=1, firstDataCol=1),
                       pivotFields=[PivotField(axis="axisRow", items=[FieldItem(x=0), FieldItem(x=1), FieldItem(t="default")]),
                                    PivotField(), PivotField(dataField=True)],
                       rowFields=[RowColField(x=row)], dataFields=[DataField(name="Sum of v", fld=data, subtotal=subtotal)])
  pt.cache = CacheDefinition(cacheSource=CacheSource(type="worksheet", worksheetSource=WorksheetSource(ref="A1:C3", sheet="Data")),
                             cacheFields=[CacheField(name=n, sharedItems=SharedItems()) for n in "mkv"])
  wb.create_sheet("Pivot")._pivots.append(pt)
  buf = io.BytesIO()
  wb.save(buf)
  return buf.getvalue()


def test_compare_table_pivot_rule():
  rules = [{"type": "pivot_table", "sheet_idx0": "RNPivot", "sheet_idx1": "ENPivot",
            "pivot_props": ["col_fields", "data_fields", "filter", "row_fields"]}]
  f = table_metrics.compare_table
  assert f(_pivot_book(), _pivot_book(), rules=rules) == 1.0
  assert f(_pivot_book(subtotal="average"), _pivot_book(), rules=rules) == 0.0
  assert f(_pivot_book(data=2), _pivot_book(), rules=rules) == 0.0
  assert f(_pivot_book(row=1), _pivot_book(), rules=rules) == 0.0
  import openpyxl
  got = table_metrics.pivots(openpyxl.load_workbook(io.BytesIO(_pivot_book()))["Pivot"], rules[0]["pivot_props"])
  assert got == {"worksheet;(1, 1):(3, 1);Data": {"selection": [{(None, 0), (None, 1)}], "filter_fields": set(),
                                                  "col_fields": [], "row_fields": [0], "data_fields": ["1;;sum;normal"]}}


def _docx_table(cells, spacing=None):
  import docx
  d = docx.Document()
  p = d.add_paragraph("Report")
  if spacing is not None:
    p.paragraph_format.line_spacing = spacing
  t = d.add_table(rows=len(cells), cols=len(cells[0]))
  for i, row in enumerate(cells):
    for j, v in enumerate(row):
      t.cell(i, j).text = v
  buf = io.BytesIO()
  d.save(buf)
  return buf.getvalue()


def test_docx_tables_and_line_spacing():
  f, g = document_metrics.compare_docx_tables, document_metrics.compare_line_spacing
  assert f(_docx_table([["a", "b"], ["1", "2"]]), _docx_table([["a", "b"], ["1", " 2 "]])) == 1.0
  assert f(_docx_table([["a", "b"], ["1", "3"]]), _docx_table([["a", "b"], ["1", "2"]])) == 0.0
  assert f(_docx_table([["a", "b"]]), _docx_table([["a", "b"], ["1", "2"]])) == 0.0
  assert g(_docx_table([["a"]], 2.0), _docx_table([["a"]], 2.0)) == 1.0
  assert g(_docx_table([["a"]], 1.5), _docx_table([["a"]], 2.0)) == 0.0


def test_structure_sim_tabs_and_csv():
  img = ((np.add.outer(np.arange(30), np.arange(40)) * 3) % 256).astype(np.uint8)
  rgb = np.stack([img, 255 - img, img // 2], -1)
  s = document_metrics.check_structure_sim
  assert s(_png(rgb), _png(rgb)) == 1.0
  assert s(_png(rgb), _png(rgb[::-1].copy())) == 0.0
  assert s(_png(rgb), _png(rgb[:20])) == 0.0        # a different size
  tabs = [{"title": "a", "url": "https://www.github.com/"}, {"title": "b", "url": "https://docs.python.org/3/"}]
  rule = {"type": "url", "urls": ["https://github.com", "https://docs.python.org/3/"]}
  assert rule_metrics.is_expected_tabs(tabs, rule) == 1.0
  assert rule_metrics.is_expected_tabs(tabs[:1], rule) == 0.0
  assert rule_metrics.is_expected_tabs(tabs + tabs[:1], rule) == 0.0
  c = rule_metrics.check_csv
  data = b"name,city\nAnn,Oslo\nBo,Rome\n"
  assert c(data, {"expect": [{"name": "Ann", "city": "Oslo"}], "unexpect": [{"city": "Paris"}]}) == 1.0
  assert c(data, {"expect": [{"name": "Ann", "city": "Rome"}]}) == 0.0
  assert c(data, {"expect": [], "unexpect": [{"name": "Bo"}]}) == 0.0


def test_url_dash_part():
  run = lambda argv: json.dumps([{"type": "page", "url": "https://www.recreation.gov/camping/campgrounds/232447?id=9"}]) \
      if argv[-2] == "list" else "null"
  spec = {"type": "url_dashPart", "goto_prefix": "https://www.", "partIndex": -1, "needDeleteId": True,
          "returnType": "json", "key": "id"}
  assert browser_getters.get(run, spec) == {"id": "232447"}
  assert browser_getters.get(run, {**spec, "returnType": "string", "needDeleteId": False, "partIndex": 3}) == "camping"


def test_compare_table_freeze_zoom_and_cell_rules():
  import openpyxl
  def book(freeze=None, zoom=None, value=3.14159):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["total", value])
    ws.freeze_panes, ws.sheet_view.zoomScale = freeze, zoom
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()
  f = table_metrics.compare_table
  freeze = [{"type": "freeze", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
  assert f(book("B2"), book("B2"), rules=freeze) == 1.0 and f(book(None), book("B2"), rules=freeze) == 0.0
  zoom = [{"type": "zoom", "sheet_idx": 0, "method": "ge", "ref": 150}]
  assert f(book(zoom=200), None, rules=zoom) == 1.0 and f(book(), None, rules=zoom) == 0.0   # unset zoom is 100
  cell = lambda method, ref: [{"type": "check_cell", "sheet_idx": 0, "coordinate": "B1",
                               "props": {"value": {"method": method, "ref": ref}}}]
  assert f(book(), None, rules=cell("approx:0.01", 3.14)) == 1.0
  assert f(book(), None, rules=cell("approx:0.001", 3.14)) == 0.0
  assert f(book(value="N/A"), None, rules=cell("approx:0.1", 3.14)) == 0.0    # not a number
  assert f(book(value="Total: 12"), None, rules=cell("re.I", r"total: \d+")) == 1.0
  assert f(book(value=None), None, rules=cell("gt", 2)) == 0.0                # an empty cell compares false
  t = _task("t")
  t["evaluator"]["options"] = {"rules": [{"type": "check_cell", "sheet_idx": 0, "coordinate": "A1",
                                          "props": {"font_strike": {"method": "eq", "ref": True}}}]}
  assert any("check_cell property 'font_strike'" in r for r in importer.convert(t, "x/t.json").reasons)


def test_compare_table_sheet_fuzzy_rule():
  rule = lambda **kw: [{"type": "sheet_fuzzy", "sheet_idx0": 0, "sheet_idx1": "EI0", "rules": [{"range": ["A1:B2"], **kw}]}]
  f = table_metrics.compare_table
  got, want = _book([[" Apple Inc.", "$1,200"], ["x", "y"]]), _book([["apple inc", "1200"], ["x", "y"]])
  assert f(got, want, rules=rule(type="exact_match")) == 0.0
  assert f(got, want, rules=rule(type="exact_match", ignore_case=True, trim_leadings=" $", trim_trailings=".",
                                 ignore_chars=",")) == 1.0
  assert f(got, want, rules=rule(type="exact_match", ignore_case=True, normalization=[[" ", ""], [".", ""], ["$", ""], [",", ""]])) == 1.0
  assert f(_book([["Apple Incorporated", "y"], ["x", "y"]]), _book([["Apple Inc", "y"], ["x", "y"]]),
           rules=rule(type="includes")) == 1.0
  assert f(_book([["Apple", "y"], ["x", "y"]]), _book([["Apple Inc", "y"], ["x", "y"]]), rules=rule(type="includes")) == 0.0
  assert f(_book([["colour", "y"], ["x", "y"]]), _book([["color", "y"], ["x", "y"]]), rules=rule(type="fuzzy_match")) == 1.0
  assert f(_book([["red", "y"], ["x", "y"]]), _book([["blue", "y"], ["x", "y"]]), rules=rule(type="fuzzy_match")) == 0.0


def test_check_json_compare_config_and_bookmarks():
  c = rule_metrics.check_json
  xul = json.dumps({"messenger": {"folderTree": {"mode": "smart,favorite"}}, "n": 3}).encode()
  expect = lambda **r: {"expect": [{"key": ["messenger", "folderTree", "mode"], "method": "re", "ref": r"\bsmart\b", **r}]}
  assert c(xul, expect()) == 1.0
  assert c(xul, expect(ref=r"\ball\b")) == 0.0
  assert c(xul, {"expect": [{"key": ["missing"], "method": "eq", "ref": 1}]}) == 0.0
  assert c(xul, {"expect": [], "unexpect": [{"key": ["n"], "method": "ge", "ref": 3}]}) == 0.0
  assert c(xul, {"expect": [], "unexpect": [{"key": ["gone"], "method": "eq", "ref": 3}]}) == 1.0
  assert c(b"{not json", expect()) == 0.0
  assert rule_metrics.compare_config(b"[ui]\ntheme=dark\n", {"expected": "[ui]\ntheme=dark\n"}) == 1.0
  assert rule_metrics.compare_config(b"[ui]\ntheme=light\n", {"expected": "[ui]\ntheme=dark\n"}) == 0.0
  roots = {"bookmark_bar": {"children": [
      {"type": "folder", "name": "Favorites", "children": []},
      {"type": "folder", "name": "Liked Authors", "children": [{"type": "url", "url": "https://a.org"},
                                                               {"type": "url", "url": "https://b.org/me"}]},
      {"type": "url", "name": "News", "url": "https://news.example"}]}}
  b = rule_metrics.is_expected_bookmarks
  assert b(roots, {"type": "bookmark_bar_folders_names", "names": ["Liked Authors", "Favorites"]}) == 1.0
  assert b(roots, {"type": "bookmark_bar_folders_names", "names": ["Favorites"]}) == 0.0
  assert b(roots, {"type": "bookmark_bar_websites_urls", "urls": ["https://news.example"]}) == 1.0
  liked = {"type": "liked_authors_websites_urls", "urls": ["https://a.org", ["https://b.org", "https://b.org/me"]]}
  assert b(roots, liked) == 1.0
  assert b(roots, {**liked, "urls": ["https://a.org", "https://b.org"]}) == 0.0
  assert b([], liked) == 0.0
  ctx = _Ctx({task_types.CHROME_BOOKMARKS: json.dumps({"roots": roots}).encode()})
  assert task_types.get(ctx, {"type": "bookmarks"}) == roots and task_types.get(_Ctx(), {"type": "bookmarks"}) == []
  t = _task("y")
  t["evaluator"].update(func="check_json", options={"is_yaml": True})
  assert any("is_yaml" in r for r in importer.convert(t, "x/y.json").reasons)


def test_check_thunderbird_prefs():
  prefs = (b'// Mozilla User Preferences\nuser_pref("mail.identity.id1.auto_quote", false);\n'
           b'user_pref("mail.identity.id1.htmlSigText", "Anonym\\nXYZ Lab");\n')
  f = rule_metrics.check_thunderbird_prefs
  assert f(prefs, {"expect": {"mail.identity.id1.auto_quote": {"method": "eq", "ref": False}}}) == 1.0
  assert f(prefs, {"expect": {"mail.identity.id1.htmlSigText": {"method": "re.S", "ref": "Anonym.+XYZ Lab"}}}) == 1.0
  assert f(prefs, {"expect": {"mail.identity.id1.auto_quote": {"method": "eq", "ref": True}}}) == 0.0
  assert f(prefs, {"expect": {"absent.key": {"method": "eq", "ref": 1}}}) == 0.0
  assert f(prefs, {"unexpect": {"mail.identity.id1.auto_quote": {"method": "eq", "ref": False}}}) == 0.0


@pytest.mark.timeout(180)
def test_close_window_closes_the_named_window_on_a_real_desktop():
  from _agent_helpers import SANDBOX_REASON, local_env
  if SANDBOX_REASON is not None:
    pytest.skip(f"sandbox unavailable: {SANDBOX_REASON}")
  from mage_jax.machine import apps
  from mage_jax.tasks.package import package_from_dict
  task = package_from_dict({"id": "t", "kind": "gui", "instruction": "x", "checker": {"type": "file_exists", "path": "o"},
                            "setup": [{"type": "app", "config": {"kind": "form", "name": "form", "out": "/home/user/o.json",
                                                                 "fields": ["A"]}}]})
  env = local_env()
  try:
    env.reset(task)
    (cls, title, _), = [w for w in apps.client_windows(env.desktop) if w[1]]
    assert task_types.close_window(env.desktop, "no such window", strict=True, by_class=False) == 0
    assert task_types.close_window(env.desktop, title[:-1], strict=True, by_class=False) == 0   # strict: whole title
    assert task_types.close_window(env.desktop, cls.replace(" ", "."), strict=True, by_class=True) == 1
    assert not [w for w in apps.client_windows(env.desktop) if w[1] == title]
  finally:
    env.close()


@pytest.mark.timeout(240)
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed (make system-deps)")
def test_tab_getters_read_the_sandboxed_chromium_through_its_devtools_port(tmp_path):
  """The whole path: the osworld_browser preparer starts Chromium in the episode sandbox with the
  DevTools port, and the checker's getters run devtools.py inside that sandbox to read the tabs."""
  from _agent_helpers import SANDBOX_REASON, local_env
  if SANDBOX_REASON is not None:
    pytest.skip(f"sandbox unavailable: {SANDBOX_REASON}")
  from mage_jax.tasks.package import package_from_dict
  page = "data:text/html,<title>Flights</title><p class='city'>Oslo</p>"
  task = package_from_dict({"id": "t", "kind": "gui", "instruction": "x", "checker": {"type": "file_exists", "path": "o"},
                            "setup": [{"type": "osworld_browser", "urls": [page]}]})
  env = local_env()
  try:
    env.reset(task)
    info = task_types.get(env, {"type": "active_tab_info"})
    assert info["title"] == "Flights" and info["url"] == page and "Oslo" in info["content"]
    assert task_types.get(env, {"type": "active_tab_html_parse", "category": "class", "class_singleObject": {"city": "c"}}) == {"c": "Oslo"}
    spec = {"type": "osworld", "metrics": [{"func": "is_expected_url_pattern_match", "result": {"type": "active_tab_info"},
                                            "expected": {"type": "rule", "rules": {"expected": ["Oslo"]}}}]}
    assert task_types.score(env, spec) == 1.0
    spec["metrics"][0]["expected"]["rules"]["expected"] = ["Paris"]
    assert task_types.score(env, spec) == 0.0
    # OSWorld's `open` of a text file, as the importer maps it: a second launch hands the file to the
    # running browser, which shows it in a new tab
    from mage_jax.tasks import preparers
    preparers.run_preparer(env, {"type": "text", "path": "Desktop/my notes.txt", "content": "remember Oslo"})
    viewed = importer.convert({"id": "v", "instruction": "x", "config": [{"type": "open", "parameters": {
        "path": "/home/user/Desktop/my notes.txt"}}], "evaluator": {"func": "infeasible"}}, "v.json").package["setup"][-1]
    preparers.run_preparer(env, viewed)
    tabs = task_types.get(env, {"type": "open_tabs_info"})
    assert sorted(t["url"] for t in tabs) == sorted([page, "file:///home/user/Desktop/my%20notes.txt"])
    assert "remember Oslo" in task_types.get(env, {"type": "active_tab_info"})["content"]
    # OSWorld's chrome_close_tabs closes the first tab matching each URL (unmatched URLs close nothing)
    step = importer._setup_step({"type": "chrome_close_tabs", "parameters": {"urls_to_close": [
        "file:///home/user/Desktop/my%20notes.txt", "https://elsewhere.org"]}}, 0, importer.Result("c", "c.json"), None)
    preparers.run_preparer(env, step)
    assert [t["url"] for t in task_types.get(env, {"type": "open_tabs_info"})] == [page]
  finally:
    env.close()


def _zip(files):
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z:
    for name, data in files.items():
      z.writestr(name, data)
  return buf.getvalue()


def test_compare_archive():
  f = task_types.METRICS["compare_archive"]
  slides = {"lecture/a.pdf": _pdf("Week one"), "lecture/b.pdf": _pdf("Week two"), "other.txt": b"x"}
  assert f(_zip(slides), _zip(slides), file_path="lecture", file_type="pdf") == 1.0
  assert f(_zip({**slides, "lecture/b.pdf": _pdf("Totally unrelated text here")}), _zip(slides),
           file_path="lecture", file_type="pdf") < 1.0
  assert f(_zip({"lecture/a.pdf": _pdf("Week one")}), _zip(slides), file_path="lecture", file_type="pdf") == 0.0
  import tarfile
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as t:
    info = tarfile.TarInfo("notes.txt")
    info.size = 3
    t.addfile(info, io.BytesIO(b"hi\n"))
  assert f(buf.getvalue(), _zip({"notes.txt": b"hi\n"})) == 1.0                # text by default, tar vs zip
  assert f(_zip({"notes.txt": b"ho\n"}), _zip({"notes.txt": b"hi\n"})) == 0.0
  assert f(b"not an archive", _zip({"notes.txt": b"hi\n"})) == 0.0
  t = _task("z")
  t["evaluator"].update(func="compare_archive", options={"file_type": "audio"})
  assert any("compare_archive of 'audio'" in r for r in importer.convert(t, "x/z.json").reasons)


def test_compare_table_sheet_print_reads_the_csv_exports():
  rules = [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]
  f = table_metrics.compare_table
  book = _book([["1.5", "x"]])
  names = dict(result_csv_sheets=["Sheet1"], expected_csv_sheets=["Sheet1"])
  assert f([book, b"1.5,x\n\n"], [book, b"1.5,x\n"], rules=rules, **names) == 1.0
  assert f([book, b"1,5,x\n"], [book, b"1.5,x\n"], rules=rules, **names) == 0.0          # printed with a comma
  assert f([book, b"A,x\n"], [book, b"a,x\n"], rules=[{**rules[0], "ignore_case": True}], **names) == 1.0
  assert f([book, None], [book, b"1.5,x\n"], rules=rules, **names) == 0.0               # no export written
  assert table_metrics.csv_sheet("Set_Dot.xlsx", "Set_Dot-Sheet1.csv") == "Sheet1"
  t = _task("p")
  t["evaluator"].update(result={"type": "vm_file", "multi": True, "path": ["/home/user/B.xlsx", "/home/user/B-Sheet1.csv"],
                                "dest": ["B.xlsx", "B-Sheet1.csv"]}, options={"rules": rules})
  m = importer.convert(t, "libreoffice_calc/p.json", None)
  assert not any("sheet_print" in r for r in m.reasons)
  assert importer._checker(t["evaluator"], importer.Result("p", "s"), importer.cache_lib.Cache(None))["metrics"][0][
      "options"]["result_csv_sheets"] == ["Sheet1"]


# ---- GIMP image checks (image_metrics) ------------------------------------------------------------
def _scene(h=32, w=40):
  """A colour test picture with structure (gradients and a block), values well inside 0..255."""
  y, x = np.mgrid[0:h, 0:w]
  img = np.stack([40 + 3 * x, 60 + 4 * y, 120 + 2 * x - y], -1).astype(np.float64)
  img[8:20, 10:25] = (200, 30, 30)
  return img


def test_image_metrics_brightness_saturation_contrast_and_structure():
  from PIL import Image
  from mage_jax.tasks.osworld import image_metrics as im
  base = _scene()
  darker, brighter = _png(base * 0.7), _png(np.clip(base * 1.2, 0, 255))
  assert im.check_brightness_decrease_and_structure_sim(darker, _png(base)) == 1.0
  assert im.check_brightness_decrease_and_structure_sim(brighter, _png(base)) == 0.0
  assert im.check_brightness_decrease_and_structure_sim(_png(base[::-1] * 0.7), _png(base)) == 0.0  # other picture
  grey = base.mean(-1, keepdims=True)
  assert im.check_saturation_increase_and_structure_sim(_png(np.clip(grey + (base - grey) * 1.4, 0, 255)), _png(base)) == 1.0
  assert im.check_saturation_increase_and_structure_sim(_png(grey + (base - grey) * 0.6), _png(base)) == 0.0
  mid = base.mean()
  assert im.check_contrast_increase_and_structure_sim(_png(np.clip(mid + (base - mid) * 1.3, 0, 255)), _png(base)) == 1.0
  assert im.check_contrast_increase_and_structure_sim(_png(mid + (base - mid) * 0.7), _png(base)) == 0.0
  assert im.check_file_exists_and_structure_sim(_png(base), _png(base)) == 1.0
  assert im.check_file_exists_and_structure_sim(None, _png(base)) == 0.0
  assert im.check_file_exists_and_structure_sim(_png(base[:, ::-1]), _png(base)) == 0.0
  assert im.check_image_mirror(_png(base[:, ::-1]), _png(base)) == 1.0
  assert im.check_image_mirror(_png(base), _png(base)) == 0.0
  half = np.asarray(Image.fromarray(base.astype(np.uint8)).resize((20, 16)))
  assert im.check_structure_sim_resized(_png(half), _png(base)) == 1.0
  assert im.check_structure_sim_resized(_png(half[::-1]), _png(base)) == 0.0
  assert im.check_image_size(_png(half), {"height": 16}) == 1.0 and im.check_image_size(_png(half), {"height": 32}) == 0.0
  assert im.check_image_file_size(_png(half), {"max_size": 10 ** 6}) == 1.0
  assert im.check_image_file_size(_png(half), {"max_size": 10}) == 0.0
  buf = io.BytesIO()
  Image.fromarray(base.astype(np.uint8)).quantize(colors=256).save(buf, "PNG")
  assert Image.open(io.BytesIO(buf.getvalue())).mode == "P"
  assert im.check_palette_and_structure_sim(buf.getvalue(), _png(base)) == 1.0
  assert im.check_palette_and_structure_sim(_png(base), _png(base)) == 0.0   # RGB, not a palette
  assert im.compare_image_list([_png(base), _png(half)], [_png(base), _png(half)]) == 1.0
  assert im.compare_image_list([_png(base), _png(half)], [_png(base), _png(half + 1)]) == 0.0


def test_image_metrics_shapes_and_backgrounds():
  from mage_jax.tasks.osworld import image_metrics as im
  canvas = np.full((40, 40, 3), 255)
  centred, corner = canvas.copy(), canvas.copy()
  for r in range(10):                 # a yellow triangle, rows 15..24
    centred[15 + r, 20 - r:21 + r] = (255, 220, 0)
    corner[r, 0:r + 1] = (255, 220, 0)
  assert im.check_triangle_position(_png(centred)) == 1.0
  assert im.check_triangle_position(_png(corner)) == 0.0
  text_left, text_right = canvas.copy(), canvas.copy()
  text_left[10:14, 1:12], text_right[10:14, 25:36] = 0, 0
  assert im.check_textbox_on_leftside(_png(text_left)) == 1.0
  assert im.check_textbox_on_leftside(_png(text_right)) == 0.0
  mask = np.zeros((30, 20, 3))        # the object (black) on a background (white), not square
  mask[:10, :] = 255
  green, red = np.zeros((30, 20, 3)), np.zeros((30, 20, 3))
  green[..., 1], red[..., 0] = 200, 200
  green[10:] = red[10:] = 90          # the object's own pixels are not checked
  assert im.check_green_background(_png(green), _png(mask)) == 1.0
  assert im.check_green_background(_png(red), _png(mask)) == 0.0


# ---- Writer task checks (writer_metrics) ----------------------------------------------------------
def _doc_bytes(build):
  import docx
  d = docx.Document()
  build(d)
  buf = io.BytesIO()
  d.save(buf)
  return buf.getvalue()


def _runs(*runs, **fmt):
  """One paragraph per (text, {font attribute: value}) pair."""
  def build(d):
    for text, attrs in runs:
      r = d.add_paragraph().add_run(text)
      for k, v in {**fmt, **attrs}.items():
        setattr(r.font, k, v)
  return _doc_bytes(build)


def test_writer_metrics_run_formatting():
  from docx.enum.text import WD_BREAK, WD_COLOR_INDEX
  from docx.shared import Pt, RGBColor
  from mage_jax.tasks.osworld import writer_metrics as wm
  plain = _runs(("H2O", {}), ("last line", {}))
  assert wm.compare_subscript_contains(_runs(("H2O", {"subscript": True})), _runs(("H2O", {"subscript": True}))) == 1.0
  assert wm.compare_subscript_contains(plain, _runs(("H2O", {"subscript": True}))) == 0.0
  assert wm.check_italic_font_size_14(_runs(("a", {"italic": True, "size": Pt(14)}), ("b", {})), _runs(("a", {}), ("b", {}))) == 1.0
  assert wm.check_italic_font_size_14(_runs(("a", {"italic": True, "size": Pt(12)}), ("b", {})), _runs(("a", {}), ("b", {}))) == 0.0
  assert wm.check_italic_font_size_14(_runs(("a", {"italic": True, "size": Pt(14)})), _runs(("other", {}))) == 0.0  # text differs
  assert wm.evaluate_strike_through_last_paragraph(_runs(("H2O", {}), ("last line", {"strike": True})), plain) == 1.0
  assert wm.evaluate_strike_through_last_paragraph(_runs(("H2O", {"strike": True}), ("last line", {})), plain) == 0.0
  hl = lambda *marks: _runs(*[(t, {"highlight_color": WD_COLOR_INDEX.YELLOW} if t in marks else {}) for t in ("one", "two")])
  assert wm.compare_highlighted_text(hl("two"), hl("two")) == 1.0
  assert wm.compare_highlighted_text(hl("one"), hl("two")) == 0.0
  table = lambda colours: _doc_bytes(lambda d: [setattr(c.paragraphs[0].add_run(w).font.color, "rgb", RGBColor(*rgb))
                                                for c, (w, rgb) in zip(d.add_table(1, 2).rows[0].cells, colours)])
  good = table([("apple", (255, 0, 0)), ("pear", (0, 0, 255))])
  assert wm.evaluate_colored_words_in_tables(good, good) == 1.0
  assert wm.evaluate_colored_words_in_tables(table([("apple", (250, 5, 0)), ("pear", (0, 0, 250))]), good) == 1.0
  assert wm.evaluate_colored_words_in_tables(table([("apple", (0, 0, 255)), ("pear", (0, 0, 255))]), good) == 0.0
  broken = _doc_bytes(lambda d: d.add_paragraph().add_run("x").add_break(WD_BREAK.PAGE))
  assert wm.contains_page_break(broken) == 1.0 and wm.contains_page_break(plain) == 0.0


def test_ciede2000_matches_published_reference_pairs():
  """Sharma, Wu and Dalal (2005), table 1: pairs 1, 7 and 17 of the CIEDE2000 test data."""
  from mage_jax.tasks.osworld.writer_metrics import delta_e_2000
  assert delta_e_2000((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485)) == pytest.approx(2.0425, abs=1e-4)
  assert delta_e_2000((50.0, 0.0, 0.0), (50.0, -1.0, 2.0)) == pytest.approx(2.3669, abs=1e-4)
  assert delta_e_2000((50.0, 2.5, 0.0), (73.0, 25.0, -18.0)) == pytest.approx(27.1492, abs=1e-4)


def test_writer_metrics_structure():
  from docx.enum.text import WD_TAB_ALIGNMENT
  from docx.shared import Inches
  from mage_jax.tasks.osworld import writer_metrics as wm

  def footer(text):
    return _doc_bytes(lambda d: (d.add_paragraph("body"), setattr(d.sections[0].footer.paragraphs[0], "text", text)))
  assert wm.has_page_numbers_in_footers(footer("Page 1")) == 1.0
  assert wm.has_page_numbers_in_footers(footer("Draft")) == 0.0
  assert wm.compare_docx_lines(_docx("b", "", "a "), _docx("a", "b")) == 1.0
  assert wm.compare_docx_lines(_docx("a", "c"), _docx("a", "b")) == 0.0
  assert wm.compare_docx_files_and_ignore_new_lines(_docx("a", "", "b"), _docx("a", "b")) == 1.0
  assert wm.compare_docx_files_and_ignore_new_lines(_docx("a", "", "b"), _docx("a", "b c")) == 0.0
  refs = lambda *r: _docx("Intro", "References", *r)
  assert wm.compare_references(refs("Doe 2020. A paper.", "Roe 2021."), refs("Doe 2020. A paper.", "Roe 2021.")) == 1.0
  assert wm.compare_references(refs("Doe 2020."), refs("Doe 2020.", "Roe 2021.")) == 0.0   # count differs
  assert wm.compare_references(_docx("Intro"), refs("Doe 2020.")) == 0.0
  assert wm.compare_references(_docx("Intro"), _docx("Other")) == 1.0                    # neither has references

  def tabs(pos, text="Name\tValue"):
    def build(d):
      p = d.add_paragraph(text)
      p.paragraph_format.tab_stops.add_tab_stop(Inches(pos), WD_TAB_ALIGNMENT.RIGHT)
    return _doc_bytes(build)
  assert wm.check_tabstops(tabs(3), tabs(3)) == 1.0
  assert 0.9 < wm.check_tabstops(tabs(3.2), tabs(3)) < 1.0
  assert wm.check_tabstops(tabs(3), tabs(3), word_number_split_by_tabstop=1, index=0) == 1.0
  assert wm.check_tabstops(tabs(3, "First Name\tValue"), tabs(3, "First Name\tValue"), word_number_split_by_tabstop=1) == 0.0
  png = _png(np.full((8, 8, 3), 100))
  pic = lambda data: _doc_bytes(lambda d: d.add_paragraph().add_run().add_picture(io.BytesIO(data)))
  assert wm.compare_docx_images(pic(png), pic(png)) == 1.0
  assert wm.compare_docx_images(pic(png), pic(_png(np.full((8, 8, 3), 101)))) == 0.0
  assert wm.compare_contains_image(pic(png), pic(png)) == 1.0
  assert wm.compare_contains_image(_runs(("text, no picture", {})), pic(png)) == 0.0

  def equation(with_object):
    import docx.oxml
    def build(d):
      d.add_paragraph("E = mc2")
      r = d.paragraphs[0].runs[0]._r
      if with_object:
        r.append(docx.oxml.parse_xml('<w:object xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"/>'))
    return _doc_bytes(build)
  assert wm.compare_insert_equation(equation(True), equation(True)) == 1.0
  assert wm.compare_insert_equation(equation(False), equation(True)) == 0.0


def test_writer_metrics_odt_highlight_and_default_font():
  from mage_jax.tasks.osworld import writer_metrics as wm

  def odt(highlight):
    colour = "#ffff00" if highlight else "transparent"
    xml = ('<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
           'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
           'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"><office:automatic-styles>'
           f'<style:style style:name="T1" style:family="text"><style:text-properties fo:background-color="{colour}"/></style:style>'
           '</office:automatic-styles><office:body><office:text><text:p>one <text:span text:style-name="T1">two</text:span></text:p>'
           '</office:text></office:body></office:document-content>')
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
      z.writestr("content.xml", xml)
    return buf.getvalue()
  assert wm.check_highlighted_words(odt(False), odt(True)) == 1.0
  assert wm.check_highlighted_words(odt(True), odt(True)) == 0.0
  xcu = lambda font: (f'<oor:items xmlns:oor="http://openoffice.org/2001/registry"><item oor:path="/org.openoffice.Office.Writer/DefaultFont">'
                      f'<prop oor:name="Standard" oor:op="fuse"><value>{font}</value></prop></item></oor:items>').encode()
  assert wm.find_default_font(xcu("Times New Roman"), {"font_name": "Times New Roman"}) == 1.0
  assert wm.find_default_font(xcu("Liberation Serif"), {"font_name": "Times New Roman"}) == 0.0
  assert wm.find_default_font(None, {"font_name": "Times New Roman"}) == 0.0


# ---- Impress task checks (impress_metrics) --------------------------------------------------------
def _deck(build, width=None, height=None):
  from pptx import Presentation
  prs = Presentation()
  if width:
    prs.slide_width, prs.slide_height = width, height
  build(prs)
  buf = io.BytesIO()
  prs.save(buf)
  return buf.getvalue()


def _zip_with(data, name, text):
  """A copy of a zip (a .pptx) with one member's text replaced."""
  src, buf = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
  with zipfile.ZipFile(buf, "w") as out:
    for item in src.infolist():
      out.writestr(item, text(src.read(item).decode()) if item.filename == name else src.read(item))
  return buf.getvalue()


def test_impress_metrics():
  from pptx.dml.color import RGBColor
  from pptx.util import Emu, Inches
  from mage_jax.tasks.osworld import impress_metrics as imp
  blank = lambda prs: prs.slides.add_slide(prs.slide_layouts[6])
  assert imp.check_slide_orientation_Portrait(_deck(blank, Inches(7.5), Inches(10))) == 1.0
  assert imp.check_slide_orientation_Portrait(_deck(blank)) == 0.0
  deck = _deck(blank)
  dissolve = _zip_with(deck, "ppt/slides/slide1.xml", lambda x: x.replace(
      "</p:sld>", '<p:transition><p:dissolve/></p:transition></p:sld>'))
  assert imp.check_transition(dissolve, {"slide_idx": 0, "transition_type": "dissolve"}) == 1.0
  assert imp.check_transition(dissolve, {"slide_idx": 0, "transition_type": "fade"}) == 0.0
  assert imp.check_transition(deck, {"slide_idx": 0, "transition_type": "dissolve"}) == 0.0
  assert imp.check_transition(dissolve, {"slide_idx": 3, "transition_type": "dissolve"}) == 0.0

  def filled(rgb):
    def build(prs):
      for _ in range(2):
        f = blank(prs).background.fill
        f.solid()
        f.fore_color.rgb = RGBColor(*rgb)
    return _deck(build)
  assert imp.evaluate_presentation_fill_to_rgb_distance(filled((0, 0, 255)), {"rgb": [0, 0, 255]}) == 1.0
  assert imp.evaluate_presentation_fill_to_rgb_distance(filled((255, 255, 0)), {"rgb": [0, 0, 255]}) < 0.5

  png = _png(np.full((10, 20, 3), 70))

  def picture(left, top, width, height):
    return _deck(lambda prs: blank(prs).shapes.add_picture(io.BytesIO(png), Emu(left), Emu(top), Emu(width), Emu(height)))
  original = picture(Inches(1), Inches(1), Inches(2), Inches(1))
  assert imp.check_image_stretch_and_center(picture(0, 0, Inches(10), Inches(7.5)), original) == 1.0
  assert imp.check_image_stretch_and_center(original, original) == 0.0

  def master_colours(*vals):
    fills = "".join(f'<a:solidFill><a:srgbClr val="{v}"/></a:solidFill>' for v in vals)
    return _zip_with(deck, "ppt/slideMasters/slideMaster1.xml", lambda x: x.replace(
        "</p:sldMaster>", f'<p:extLst xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main">{fills}</p:extLst></p:sldMaster>'))
  assert imp.check_page_number_colors(master_colours("E01010", "000000"), {"color": "red"}) == 1.0
  assert imp.check_page_number_colors(master_colours("1010E0", "000000"), {"color": "red"}) == 0.0

  def xcu(path, name, value):
    return (f'<oor:items xmlns:oor="http://openoffice.org/2001/registry"><item oor:path="{path}">'
            f'<prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item></oor:items>').encode()
  presenter = "/org.openoffice.Office.Impress/Misc/Start"
  assert imp.check_presenter_console_disable(xcu(presenter, "EnablePresenterScreen", "false")) == 1.0
  assert imp.check_presenter_console_disable(xcu(presenter, "EnablePresenterScreen", "true")) == 0.0
  assert imp.check_presenter_console_disable(None) == 0.0
  save = "/org.openoffice.Office.Common/Save/Document"
  assert imp.check_auto_saving_time(xcu(save, "AutoSaveTimeIntervall", "3"), {"minutes": 3}) == 1.0
  assert imp.check_auto_saving_time(xcu(save, "AutoSaveTimeIntervall", "10"), {"minutes": 3}) == 0.0


# ---- plain files, archives, pages and books (file_metrics) -----------------------------------------
def test_file_metrics():
  from mage_jax.tasks.osworld import file_metrics as fm
  assert fm.diff_text_file(b"a\nb\nc\nd", b"a\nb\nc\nd") == 1.0
  assert fm.diff_text_file(b"a\nb\nc\nd", b"a\nb\nx\ny") == 0.5
  assert fm.diff_text_file(None, b"a") == 0.0
  assert fm.compare_python_pure_text(b"def f( x ):\n  return x\n", b"def f(x):\n    return x") == 1.0
  assert fm.compare_python_pure_text(b"def f(x): return x", b"def f(x): return y") == 0.0
  assert fm.check_pdf_pages(_pdf("one page"), {"relation": "eq", "ref_value": 1}) == 1.0
  assert fm.check_pdf_pages(_pdf("one page"), {"relation": "gt", "ref_value": 1}) == 0.0
  places = {"expected": ["Beijing Road 1", "Shanghai Street 2", "Shenzhen Lane 3"]}
  assert fm.fuzzy_place_math(_docx("Beijing", "Shanghai", "Shenzhen"), places) > 0.4
  assert fm.fuzzy_place_math(_docx("Beijing Shanghai"), places) == 0.0    # two words, not three
  pdf = _pdf("report text")
  assert fm.compare_zip_files(_zip({"a.txt": "x", "r.pdf": pdf}), _zip({"a.txt": "x", "r.pdf": _pdf("report text")})) == 1.0
  assert fm.compare_zip_files(_zip({"a.txt": "x", "r.pdf": pdf}), _zip({"a.txt": "y", "r.pdf": pdf})) == 0.0
  assert fm.compare_zip_files(_zip({"a.txt": "x"}), _zip({"a.txt": "x", "b.txt": ""})) == 0.0
  page = b'<html><body><table class="t"><tr><td>1</td><td>2</td></tr></table></body></html>'
  assert fm.compare_htmls(page, page) == 1.0
  assert fm.compare_htmls(page, page.replace(b"<td>2", b"<td>3")) == 0.0
  assert fm.compare_htmls(page, page.replace(b'class="t"', b'class="u"')) == 0.0
  assert fm.is_expected_search_query({"url": "https://www.google.com/search?q=Nereida&hl=en"},
                                     {"expect": {"pattern": r"www\.google\.com.*?/search\?q=Nereida&"}}) == 1.0
  assert fm.is_expected_search_query({"url": "https://www.bing.com/search?q=Nereida&"},
                                     {"expect": {"pattern": r"www\.google\.com.*?/search\?q=Nereida&"}}) == 0.0


def test_conference_cities_and_epub():
  import openpyxl
  from mage_jax.tasks.osworld import file_metrics as fm

  def book(cities):
    wb = openpyxl.Workbook()
    for i, c in enumerate(cities, start=2):
      wb.active.cell(row=i, column=3, value=c)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()
  want = {"expected": [f"City{i}" for i in range(20)] + [["Montreal", "Montréal"]]}
  cities = [f"City{i}, Country" for i in range(20)]
  assert fm.compare_conference_city_in_order(book(cities + ["Montréal, Canada"]), want) == 1.0
  assert fm.compare_conference_city_in_order(book(cities + ["Toronto"]), want) == 0.0
  assert fm.compare_conference_city_in_order(book(cities), want) == 0.0    # C22 empty

  def epub(chapter, ident="id-1"):
    return _zip({"toc.ncx": "<ncx>\n<navPoint id='x'/>\n</ncx>", "content.opf": f"<package>\n<dc:identifier>{ident}</dc:identifier>\n</package>",
                 "ch1.html": f"<html><body><p>{chapter}</p>\n<p>end</p></body></html>"})
  assert fm.compare_epub(epub("Once upon a time", "id-1"), epub("Once upon a time", "id-2")) == 1.0   # identifiers ignored
  assert fm.compare_epub(epub("Once upon a time"), epub("Something else")) < 1.0
  assert fm.compare_epub(None, epub("x")) == 0.0


def test_vlc_settings_checks():
  from mage_jax.tasks.osworld import vlc_metrics as vm
  rc = (b"[qt]\n# Show background cone (boolean)\n#qt-bgcone=1\nqt-bgcone=0\n#qt-max-volume=125\n"
        b"qt-minimal-view=1\nglobal-key-play-pause=Ctrl+p\nqt-slider-colours=10;20;30;0;0;0;50;50;50;99;1;2\n"
        b"#input-record-path=\ninput-record-path=/home/user/Desktop\n")
  assert vm.check_qt_bgcone(rc, {"expected_qt_bgcone": 0}) == 1.0
  assert vm.check_qt_bgcone(b"#qt-bgcone=1\n", {"expected_qt_bgcone": 0}) == 0.0
  assert vm.check_qt_max_volume(rc, {"expected_qt_max_volume": 125}) == 1.0     # the commented default, as OSWorld reads it
  assert vm.check_qt_max_volume(rc, {"expected_qt_max_volume": 200}) == 0.0
  assert vm.check_qt_minimal_view(rc, {"expected_qt_minimal_view": 1}) == 1.0
  assert vm.check_qt_minimal_view(b"", {"expected_qt_minimal_view": 1}) == 0.0
  assert vm.check_one_instance_when_started_from_file(b"one-instance-when-started-from-file=0\n",
                                                      {"expected_one_instance_when_started_from_file": 0}) == 1.0
  assert vm.check_one_instance_when_started_from_file(b"", {"expected_one_instance_when_started_from_file": 0}) == 0.0
  assert vm.check_global_key_play_pause(rc, {"expected_global_key_play_pause": 1}) == 1.0
  assert vm.check_global_key_play_pause(b"#global-key-play-pause=\n", {"expected_global_key_play_pause": 1}) == 0.0
  assert vm.check_qt_slider_colours(rc, {"type": "blackish"}) == 1.0
  assert vm.check_qt_slider_colours(b"", {"type": "blackish"}) == 0.0          # VLC's default colours
  assert vm.check_qt_slider_colours(b"", {"type": "match", "expected_qt_slider_colours": vm.SLIDER_DEFAULT}) == 1.0
  assert vm.is_vlc_recordings_folder(rc, {"recording_file_path": "/home/user/Desktop"}) == 1.0
  assert vm.is_vlc_recordings_folder(rc, {"recording_file_path": "/home/user/Videos"}) == 0.0
  assert vm.is_vlc_recordings_folder(None, {"recording_file_path": "/home/user/Desktop"}) == 0.0


def _xlsx(build):
  import openpyxl
  wb = openpyxl.Workbook()
  build(wb.active)
  buf = io.BytesIO()
  wb.save(buf)
  return buf.getvalue()


def test_compare_table_style_row_and_validation_rules():
  from openpyxl.formatting.rule import FormulaRule
  from openpyxl.styles import Font, PatternFill
  from openpyxl.worksheet.datavalidation import DataValidation
  f = table_metrics.compare_table

  def sheet(colour="FFFF0000", bold=True, hide=None, cf=None, dv=None):
    def build(ws):
      ws["A1"], ws["A2"] = "Total", 3
      ws["A1"].font = Font(color=colour, bold=bold)
      ws["A1"].fill = PatternFill("solid", fgColor="FF0000FF", bgColor="FF0000FF")
      if hide:
        ws.row_dimensions[hide].hidden = True
      if cf:
        ws.conditional_formatting.add("A2:A9", FormulaRule(formula=[cf], font=Font(color="FF00FF00")))
      if dv:
        v = DataValidation(type="list", formula1=dv)
        v.add("D2:D29")
        ws.add_data_validation(v)
    return _xlsx(build)
  style = lambda *props: [{"type": "style", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": list(props)}]
  assert f(sheet(), sheet(), rules=style("font_color", "bgcolor")) == 1.0
  assert f(sheet(colour="FF000000"), sheet(), rules=style("font_color")) == 0.0
  assert f(sheet(colour="FF000000"), sheet(), rules=style("bgcolor")) == 1.0
  assert f(sheet(cf="MOD(A2,2)=1"), sheet(cf="MOD(A2,2)=1"), rules=style("font_color")) == 1.0
  assert f(sheet(cf="MOD(A2,2)=0"), sheet(cf="MOD(A2,2)=1"), rules=style("font_color")) == 0.0
  assert f(sheet(), sheet(cf="MOD(A2,2)=1"), rules=style("font_color")) == 0.0
  rows = [{"type": "row_props", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["hidden"]}]
  assert f(sheet(hide=2), sheet(hide=2), rules=rows) == 1.0
  assert f(sheet(), sheet(hide=2), rules=rows) == 0.0
  cell = [{"type": "check_cell", "sheet_idx": 0, "coordinate": "A1", "props": {
      "bgcolor": {"method": "eq", "ref": "FF0000FF"}, "font_color": {"method": "eq", "ref": "FFFF0000"},
      "font_bold": {"method": "eq", "ref": True}, "value": {"method": "eq", "ref": "Total"}}}]
  assert f(sheet(), None, rules=cell) == 1.0
  assert f(sheet(bold=False), None, rules=cell) == 0.0
  dv = [{"type": "data_validation", "sheet_idx": 0, "dv_props": [{
      "ranges": {"method": "spreadsheet_range", "ref": ["D2:D29", "D2:D1048576"]}, "type": {"method": "eq", "ref": "list"},
      "formula1": {"method": "str_set_eq", "ref": ["Pass", "Fail", "Held"]}}]}]
  assert f(sheet(dv='"Held,Pass,Fail"'), None, rules=dv) == 1.0
  assert f(sheet(dv='"Pass,Fail"'), None, rules=dv) == 0.0
  assert f(sheet(), None, rules=dv) == 0.0                       # no validation at all
  assert table_metrics.match_rule(5, {"method": "range.te", "ref": [0, 5]})
  assert not table_metrics.match_rule(0, {"method": "range.te", "ref": [0, 5]})


def test_thunderbird_filters_and_sqlite_query():
  import sqlite3
  from mage_jax.tasks.osworld import file_metrics
  rules = (b'version="9"\nlogging="no"\nname="Promo"\nenabled="yes"\ntype="17"\naction="Move to folder"\n'
           b'actionValue="mailbox://nobody@Local%20Folders/Promotions"\ncondition="AND (subject,contains,discount)"\n'
           b'name="Fwd"\nenabled="no"\ntype="17"\naction="Forward"\nactionValue="a@b.org"\ncondition="ALL"\n')
  promo = {"enabled": "yes", "action": "Move to folder", "actionValue": "mailbox://nobody@Local%20Folders/Promotions",
           "condition": ["AND (subject,contains,discount)"]}
  f = rule_metrics.check_thunderbird_filter
  assert f(rules, {"expect": [promo]}) == 1.0
  assert f(rules, {"expect": [{**promo, "condition": ["AND (subject,contains,sale)"]}]}) == 0.0
  assert f(rules, {"expect": [{"action": "Forward", "enabled": "yes", "condition": ["ALL"]}]}) == 0.0   # that one is disabled
  assert f(rules, {"expect": [promo], "unexpect": [{"action": "Forward"}]}) == 0.0
  assert f(None, {"expect": [promo]}) == 0.0
  db = sqlite3.connect(":memory:")
  db.executescript("create table messages(id, folderID); insert into messages values (1, 13), (2, 4);")
  data = db.serialize()
  assert file_metrics.run_sqlite3(data, {"sql": "select sum(1) > 0 from messages where folderID = 13"}) == 1.0
  assert file_metrics.run_sqlite3(data, {"sql": "select sum(1) > 0 from messages where folderID = 99"}) == 0.0   # NULL
  assert file_metrics.run_sqlite3(b"not a database", {"sql": "select count(*) from messages"}) == 0.0


def test_postconfig_open_of_the_gold_workbook(monkeypatch):
  """OSWorld opens its gold workbook in Calc after the agent's (so Calc re-saves it with computed
  values): the importer keeps the step for office files and refuses others; the checker opens the
  file in its app before the metrics run."""
  from mage_jax.machine import apps
  task = {"id": "g", "instruction": "fill the blanks", "config": [], "evaluator": {
      "func": "compare_table", "result": {"type": "vm_file", "path": "/home/user/x.xlsx", "dest": "x.xlsx"},
      "expected": {"type": "vm_file", "path": "/home/user/gold.xlsx", "dest": "gold.xlsx"},
      "postconfig": [{"type": "open", "parameters": {"path": "/home/user/gold.xlsx"}}]}}
  res = importer.convert(task, "x/g.json")
  assert not res.reasons and res.package["checker"]["postconfig"] == [{"type": "open", "path": "/home/user/gold.xlsx"}]
  task["evaluator"]["postconfig"] = [{"type": "open", "parameters": {"path": "/home/user/notes.pdf"}}]
  assert any("postconfig[0]: no app here opens" in r for r in importer.convert(task, "x/g.json").reasons)
  opened = []
  monkeypatch.setattr(apps, "launch", lambda desktop, app, path: opened.append((app, path)))
  ctx = types.SimpleNamespace(desktop=object())
  task_types._postconfig(ctx, [{"type": "open", "path": "/home/user/gold.xlsx"}])
  assert opened == [("calc", "/home/user/gold.xlsx")]


def test_chrome_profile_getters_and_checks():
  import sqlite3
  from mage_jax.tasks.osworld import chrome_profile as cp
  db = sqlite3.connect(":memory:")
  db.executescript("create table cookies(creation_utc, host_key, name, value); insert into cookies values (1, '.amazon.com', 'a', 'b');")
  files = {f"{cp.PROFILE}/Default/Preferences": json.dumps({"webkit": {"webprefs": {"default_font_size": 20}},
                                                            "profile": {"default_content_setting_values": {"cookies": 4}}}).encode(),
           f"{cp.PROFILE}/Local State": json.dumps({"browser": {"enabled_labs_experiments": ["chrome-refresh-2023@1"]}}).encode(),
           f"{cp.PROFILE}/Default/Cookies": db.serialize(),
           "/home/user/Desktop/2048.desktop": b"[Desktop Entry]\nName=Play Puzzle Game 2048\nExec=x\n"}
  get = lambda kind, fs=files: cp.get(fs.get, lambda path: ["2048.desktop", "notes.txt"], kind)
  assert get("chrome_font_size") == {"default_font_size": 20}
  assert get("chrome_font_size", {})["default_font_size"] == 16                       # Chrome's default
  assert get("data_delete_automacally") == "true" and get("data_delete_automacally", {}) == "false"
  assert cp.check_font_size(get("chrome_font_size"), {"type": "range", "min": 16, "max": 99999}) == 1.0
  assert cp.check_font_size(get("chrome_font_size", {}), {"type": "range", "min": 16, "max": 99999}) == 0.0
  assert cp.check_enabled_experiments(get("enabled_experiments"), {"type": "names", "names": ["chrome-refresh-2023"]}) == 1.0
  assert cp.check_enabled_experiments(get("enabled_experiments", {}), {"type": "names", "names": ["chrome-refresh-2023"]}) == 0.0
  cookies = get("cookie_data")
  assert cp.is_cookie_deleted(cookies, {"type": "domains", "domains": [".amazon.com"]}) == 0.0
  assert cp.is_cookie_deleted(cookies, {"type": "domains", "domains": [".ebay.com"]}) == 1.0
  assert cp.is_cookie_deleted(get("cookie_data", {}), {"type": "domains", "domains": [".ebay.com"]}) == 0.0  # unreadable
  shortcuts = get("shortcuts_on_desktop")
  assert list(shortcuts) == ["2048.desktop"]
  assert cp.is_shortcut_on_desktop(shortcuts, {"type": "name", "name": "Play Puzzle Game 2048"}) == 1.0
  assert cp.is_shortcut_on_desktop(shortcuts, {"type": "name", "name": "Play Puzzle Game"}) == 0.0


def test_postconfig_chrome_kill_targets_chromium():
  """OSWorld quits Chrome (pkill chrome) before reading its prefs; `chrome` doesn't match Chromium's
  process name, so the importer kills chromium instead and leaves other commands alone."""
  def post(command):
    task = {"id": "k", "instruction": "x", "config": [], "evaluator": {
        "func": "exact_match", "result": {"type": "data_delete_automacally"}, "expected": {"type": "rule", "rules": {"expected": "true"}},
        "postconfig": [{"type": "execute", "parameters": {"command": command, "shell": "true"}}]}}
    return importer.convert(task, "k.json").package["checker"]["postconfig"][0]["parameters"]["command"]
  assert post("pkill chrome") == ["pkill", "chromium"]
  assert post(["pkill", "chrome"]) == ["pkill", "chromium"]
  assert post("pkill vlc") == "pkill vlc"
  assert post("pkill chrome && rm -rf ~") == "pkill chrome && rm -rf ~"
