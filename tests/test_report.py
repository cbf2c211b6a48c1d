"""The episode viewer (launch.report), checked in headless Chromium: a real launch.eval run of the
scripted policy (GUI, terminal, hybrid), hostile page text, corrupt lines, --compare, the RL view.

Chromium comes from Debian (`make system-deps`); without it these tests skip locally and fail in
CI (CI=true), so a CI machine that lost it cannot pass silently.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from mage_jax.data import trajectory as tr
from mage_jax.report import overlay, rl_record, safe_text, stats
from mage_jax.report.build import build_report
from tests._agent_helpers import needs_sandbox

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IN_CI = os.environ.get("CI", "").lower() == "true"
needs_chromium = pytest.mark.skipif(CHROMIUM is None and not IN_CI,
                                    reason="chromium not installed (Debian package `chromium`; make system-deps)")
PAYLOADS = ('<script>window.__pwned=1</script>', '<img src=x onerror="window.__pwned=1">')
ANSI = "\x1b[31mred alert\x1b[0m"
SCREEN = (800, 600)


def chromium_dom(page: str, tmp_path) -> tuple[str, list[str]]:
  """(the DOM after load, the page's console lines) of a file:// page in headless Chromium."""
  assert CHROMIUM, "chromium not installed: `make system-deps` installs the Debian package"
  profile = tmp_path / f"chromium-profile-{time.monotonic_ns()}"
  r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                      "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                      "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
                      "file://" + os.path.abspath(page)], capture_output=True, text=True, timeout=90)
  assert r.returncode == 0, r.stderr[-2000:]
  console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
  return r.stdout, console


def js_status(dom: str) -> dict[str, str]:
  tag = re.search(r'<div id="js-status"[^>]*>', dom)
  assert tag, "js-status element missing"
  return {k: html.unescape(v) for k, v in re.findall(r'data-([a-z]+)="([^"]*)"', tag.group(0))}


def assert_clean_load(dom: str, console: list[str]) -> None:
  status = js_status(dom)
  assert status["ready"] == "1", "the report's script did not finish"
  assert status["errors"] == "", status["errors"]
  assert status["pwned"] == "undefined"
  assert console == [], console   # no console output at all: no errors, no CSP violations


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
  """A real launch.eval run (scripted policy, one GUI, one terminal, one hybrid task); the report is
  written by default at its end."""
  workdir = tmp_path_factory.mktemp("eval")
  r = subprocess.run([sys.executable, "-m", "launch.eval", "--config=configs/eval.py:scripted,tiny",
                      f"--workdir={workdir}", f"--config.env.width={SCREEN[0]}", f"--config.env.height={SCREEN[1]}",
                      "--config.slots=3"], capture_output=True, text=True, timeout=280)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "report:" in r.stdout
  return workdir


def _episode_pages(index_dom: str) -> dict[str, str]:
  """episode id -> page href, from the index's episode table."""
  return {html.unescape(text): html.unescape(href)
          for href, text in re.findall(r'<a href="(episodes/[^"]+)">([^<]+)</a>', index_dom)}


@needs_sandbox
@needs_chromium
@pytest.mark.timeout(400)
def test_eval_report_in_chromium(eval_run, tmp_path):
  results = json.loads((eval_run / "results.json").read_text())
  kinds = {e["kind"] for e in results["episodes"]}
  assert kinds == {"gui", "terminal", "hybrid"}
  dom, console = chromium_dom(eval_run / "report" / "index.html", tmp_path)
  assert_clean_load(dom, console)
  pages = _episode_pages(dom)
  # the index lists every episode, each linked to its page
  assert sorted(pages) == sorted(f"{e['task_id']}-r0" for e in results["episodes"])
  assert dom.count('<tr class="episode') == len(results["episodes"])
  assert re.search(r'id="success-rate">100\.0%', dom)

  episodes = [json.loads(line) for line in (eval_run / "episodes.jsonl").read_text().splitlines()]
  clicks_checked = 0
  for ep in episodes:
    page = eval_run / "report" / pages[ep["id"]]
    page_dom, console = chromium_dom(page, tmp_path)
    assert_clean_load(page_dom, console)
    figures = re.findall(r'<figure class="shot"[^>]*>.*?</figure>', page_dom, re.S)
    shots = [s["observation"]["screenshot"] for s in ep["steps"] if s["observation"]["screenshot"]]
    assert len(figures) == len(shots)   # every step's screenshot is on the page
    for fig, step, shot in zip(figures, [s for s in ep["steps"] if s["observation"]["screenshot"]], shots):
      thumb = re.search(r'<img src="([^"]+)"', fig).group(1)
      assert (page.parent / thumb).is_file() and thumb.endswith(".jpg")
      full = re.search(r'<a href="([^"]+)" class="full"', fig).group(1)
      assert os.path.samefile(page.parent / full, eval_run / shot)   # full size on click: the PNG itself
      args = step["tool_call"]["arguments"]
      if args.get("action") == "left_click":
        w, h = Image.open(eval_run / shot).size
        x, y = args["coordinate"]
        want = (round(x * (w - 1) / 999), round(y * (h - 1) / 999))   # DESIGN.md, Tools
        drawn = [float(v) for v in re.search(r'data-marker-drawn="([^"]+)"', fig).group(1).split(",")]
        assert abs(drawn[0] - want[0]) <= 1.0 and abs(drawn[1] - want[1]) <= 1.0, (drawn, want)
        clicks_checked += 1
    text = html.unescape(page_dom)
    for step in ep["steps"]:
      assert step["think"] in text   # the assistant text as produced
      if step["tool_call"]["name"] == "bash":
        assert step["tool_call"]["arguments"]["command"] in text
    assert "checker verdict" in text and '"type":' in text   # the checker spec from tasks.json
  assert clicks_checked >= 1


def _hostile_run(root) -> str:
  """A run whose episode id (the page title), instruction, model text and bash output are hostile."""
  run = root / "hostile"
  (run / "shots" / "ep").mkdir(parents=True)
  Image.new("RGB", SCREEN, (30, 30, 30)).save(run / "shots" / "ep" / "o001.png")
  Image.new("RGB", SCREEN, (60, 60, 60)).save(run / "shots" / "ep" / "o002.png")
  Image.new("RGB", SCREEN).save(root / "outside.png")
  hostile = " ".join(PAYLOADS) + " " + ANSI + " javascript:window.__pwned=1"
  output = hostile + "\n" + "x" * 10_000_000   # a 10 MB line
  ep_id = "ep" + PAYLOADS[0]
  steps = [tr.Step(tr.Observation("shots/ep/o001.png"), "think " + PAYLOADS[1], "Click",
                   tr.ToolCall("computer_use", {"action": "left_click", "coordinate": [500, 500]})),
           tr.Step(tr.Observation("shots/ep/o002.png"), "look", "Run it",
                   tr.ToolCall("bash", {"command": "echo '" + PAYLOADS[0] + "'"})),
           tr.Step(tr.Observation("../outside.png", output), "done", "Finish",
                   tr.ToolCall("computer_use", {"action": "terminate", "status": "success"}))]
  tr.write_episodes(str(run / "episodes.jsonl"), [tr.Episode(
      id=ep_id, instruction="Open " + PAYLOADS[1], steps=steps, screen_size=SCREEN, root=str(run),
      outcome="failure", reward=0.0, meta={"task_id": "hostile", "kind": "hybrid", "status": "terminated"})])
  records = [{"episode_id": ep_id, "task_id": "hostile", "t": 1, "step": 1, "parse_error": "no_tool_call",
              "response": "no call " + PAYLOADS[0]},
             {"episode_id": ep_id, "task_id": "hostile", "t": 2, "step": 1, "response": "<think>x</think>" + PAYLOADS[1]},
             {"episode_id": ep_id, "task_id": "hostile", "t": 3, "step": 2, "response": "bash " + ANSI + " \udc80 lone surrogate"},
             {"episode_id": ep_id, "task_id": "hostile", "t": 4, "step": 3, "response": "end"}]
  with open(run / "steps.jsonl", "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in records))
  with open(run / "results.json", "w") as f:
    json.dump({"config": {}, "episodes": [{"episode_id": ep_id, "task_id": "hostile", "kind": "hybrid", "score": 0.0,
                                           "status": "terminated", "steps": 3, "model_calls": 4, "success": False,
                                           "error": hostile}]}, f)
  return str(run)


@needs_chromium
@pytest.mark.timeout(300)
def test_hostile_text_is_shown_never_run(tmp_path):
  run = _hostile_run(tmp_path)
  out = build_report(run, progress=False)
  assert out["episodes"] == 1
  page = [p for p in os.listdir(os.path.join(run, "report", "episodes"))]
  assert len(page) == 1 and re.fullmatch(r"[A-Za-z0-9_.-]+\.html", page[0])
  page = os.path.join(run, "report", "episodes", page[0])
  assert os.path.getsize(page) < 2_000_000   # the 10 MB line is cut, with a note
  raw = open(page, encoding="utf-8").read()
  total = len(" ".join(PAYLOADS) + " " + ANSI + " javascript:window.__pwned=1\n") + 10_000_000
  assert f"{total - safe_text.MAX_CHARS:,} more characters not shown" in raw
  dom, console = chromium_dom(page, tmp_path)
  assert_clean_load(dom, console)   # window.__pwned stays undefined, no console errors
  for p in PAYLOADS:
    assert p not in raw and p not in dom   # never markup ...
    assert html.escape(p, quote=False) in dom   # ... always visible text
  assert "\x1b" not in raw and "\u241b[31mred alert\u241b[0m" in html.unescape(dom)   # ANSI shown, not run
  assert "\\udc80 lone surrogate" in html.unescape(dom)
  title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
  assert html.unescape(title) == "episode ep" + PAYLOADS[0]
  srcs = re.findall(r'(?:src|href)="([^"]*)"', dom)
  assert not [s for s in srcs if ":" in s or s.startswith("/") or "outside" in s], srcs  # only our relative files
  assert dom.count('<figure class="shot"') == 3   # the parse-error call shows the screenshot it saw too
  drawn = [float(v) for v in re.search(r'data-marker-drawn="([^"]+)"', dom).group(1).split(",")]
  assert abs(drawn[0] - 400) <= 1 and abs(drawn[1] - 300) <= 1   # round(500·799/999), round(500·599/999)
  index = open(os.path.join(run, "report", "index.html"), encoding="utf-8").read()
  assert "screenshot outside the run directory not shown" in index


def _copy_run(src, dst):
  shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report"))
  return dst


@needs_sandbox
@pytest.mark.timeout(400)
def test_corrupt_lines_are_counted_skips(eval_run, tmp_path):
  run = _copy_run(eval_run, tmp_path / "run")
  with open(run / "episodes.jsonl", "ab") as f:
    f.write(b'{"id": "cut-off", "instruction": "trunc')   # a line cut mid-write
    f.write(b'\n{"id": "bad-bytes \xff\xfe", "steps": []}\n')
  with open(run / "steps.jsonl", "ab") as f:
    f.write(b"[1, 2\n")
  out = build_report(str(run), progress=False)
  assert out["skips"] == 3 and out["episodes"] == 3
  index = html.unescape((run / "report" / "index.html").read_text())
  assert '<div class="skips" id="skips" data-count="3">' in index
  n = len((eval_run / "episodes.jsonl").read_text().splitlines())
  assert f"episodes.jsonl:{n + 1}:" in index and f"episodes.jsonl:{n + 2}:" in index
  assert "steps.jsonl:" in index
  assert index.count('<tr class="episode') == 3   # the good episodes are all still there


@needs_sandbox
@pytest.mark.timeout(400)
def test_compare_lists_flipped_tasks_first(eval_run, tmp_path):
  other = _copy_run(eval_run, tmp_path / "other")
  res = json.loads((other / "results.json").read_text())
  flipped = sorted(e["task_id"] for e in res["episodes"])[-1]   # the last by name, so order must move it
  for e in res["episodes"]:
    if e["task_id"] == flipped:
      e.update(success=False, score=0.0)
  (other / "results.json").write_text(json.dumps(res))
  build_report(str(eval_run), compare=str(other), progress=False)
  index = (eval_run / "report" / "index.html").read_text()
  table = re.search(r'<table class="stats" id="compare">.*?</table>', index, re.S).group(0)
  rows = re.findall(r'<tr class="flip-(\w+)"><td>([^<]+)</td>', table)
  assert rows[0] == ("lost", flipped) and all(f == "none" for f, _ in rows[1:]) and len(rows) == 3


def test_curriculum_workdir_links_each_run(tmp_path):
  for stage, success in (("stage4", False), ("stage5_eval", True)):
    (tmp_path / stage).mkdir()
    (tmp_path / stage / "results.json").write_text(json.dumps({"episodes": [
        {"episode_id": "e", "task_id": "t", "kind": "terminal", "score": float(success), "status": "terminated",
         "steps": 1, "success": success}]}))
  out = build_report(str(tmp_path), progress=False)
  assert out["runs"] == 2 and out["episodes"] == 2
  index = (tmp_path / "report" / "index.html").read_text()
  assert re.findall(r'<a href="([^"]+)">', index) == ["../stage4/report/index.html", "../stage5_eval/report/index.html"]
  assert all((tmp_path / "report" / h).is_file() for h in re.findall(r'<a href="([^"]+)">', index))
  assert re.search(r'id="success-rate">100\.0%', (tmp_path / "stage5_eval" / "report" / "index.html").read_text())


class _Sample:
  def __init__(self, episode_id, version, advantage=0.0):
    self.episode_id, self.version, self.advantage = episode_id, version, advantage


class _Episode:
  def __init__(self, episode_id, reward, versions):
    self.episode_id, self.reward = episode_id, reward
    self.samples = [_Sample(episode_id, v) for v in versions]


class _Group:
  def __init__(self, task_id, group_id, episodes):
    self.task_id, self.group_id, self.episodes, self.env_errors = task_id, group_id, episodes, 0


@needs_chromium
@pytest.mark.timeout(300)
def test_rl_view(tmp_path):
  run = tmp_path / "rl"
  run.mkdir()
  rng = np.random.default_rng(0)
  updates = 12
  with open(run / "metrics.jsonl", "w") as f:
    for u in range(1, updates + 1):
      f.write(json.dumps({"step": u, "reward_mean": u / updates, "pass_rate": u / (2 * updates),
                          "mean_ratio": 1.0, "tis_trunc_frac": 0.01}) + "\n")
  for u in range(1, updates + 1):
    rewards = rng.integers(0, 2, 4).astype(float)
    eps = [_Episode(f"u{u}-e{i}", r, [u - 1 - (i % 2), u - 1]) for i, r in enumerate(rewards)]
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)   # DESIGN.md, RL objective
    samples = [_Sample(e.episode_id, s.version, a) for e, a in zip(eps, adv) for s in e.samples]
    rl_record.append_groups(str(run), u, [_Group("term_task", f"g{u}", eps)], samples,
                            {"mean_ratio": 1.0, "tis_trunc_frac": 0.01})
  rows = [json.loads(line) for line in (run / "groups.jsonl").read_text().splitlines()]
  assert len(rows) == updates
  last = rows[-1]
  assert last["version"] == updates - 2 and last["lag"] == 1   # oldest sample: version u-2, trained by u
  np.testing.assert_allclose(last["advantages"], (np.array(last["rewards"]) - np.mean(last["rewards"]))
                             / (np.std(last["rewards"]) + 1e-6), rtol=1e-6)
  build_report(str(run), progress=False)
  dom, console = chromium_dom(run / "report" / "rl.html", tmp_path)
  assert_clean_load(dom, console)
  lines = re.findall(r'<polyline class="series s\d" points="([^"]+)"', dom)
  assert len(lines) == 2 and all(len(p.split()) == updates for p in lines)
  # the curve rises: success and reward grow with the update, so y (down the page) falls
  ys = [float(pt.split(",")[1]) for pt in lines[1].split()]
  assert ys == sorted(ys, reverse=True) and ys[0] > ys[-1]
  assert dom.count("<tr>") - 1 == updates   # one row per group (all 12 shown)
  body = re.search(r'<table class="stats sortable" id="groups">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
  cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]
  assert [c[0] for c in cells] == [str(u) for u in range(1, updates + 1)]
  assert cells[-1][4:6] == [str(updates - 2), "1"] and cells[-1][7] == "8"   # version, lag, samples
  assert cells[-1][2] == ", ".join(f"{r:.3g}" for r in last["rewards"])
  assert '<a href="rl.html">' in (run / "report" / "index.html").read_text()


def test_wilson_interval_matches_published_values():
  # Wilson score intervals at 95% (z = 1.96), as tabulated by Newcombe (1998), Table I.
  np.testing.assert_allclose(stats.wilson(81, 263), (0.2553, 0.3662), atol=1e-4)
  np.testing.assert_allclose(stats.wilson(15, 148), (0.0624, 0.1605), atol=1e-4)
  np.testing.assert_allclose(stats.wilson(0, 20), (0.0, 0.1611), atol=1e-4)
  np.testing.assert_allclose(stats.wilson(1, 29), (0.0061, 0.1718), atol=1e-4)


def test_clean_text():
  assert safe_text.clean("a\x1b[31mb\x07\r\n\tc\x7f\x85") == "a\u241b[31mb\u2407\u240d\n\tc\u2421\\x85"
  assert safe_text.clean("x\udc80y") == "x\\udc80y"
  cut = safe_text.clean("y" * 50, limit=10)
  assert cut.startswith("y" * 10 + "\n") and "40 more characters not shown" in cut
  assert safe_text.clean(None) == "" and safe_text.clean({"a": 1}) == '{"a": 1}'
  assert safe_text.fold("a\n" * 3) == ("a\n" * 3, False)
  preview, folded = safe_text.fold("line\n" * 100)
  assert folded and preview.count("\n") == safe_text.PREVIEW_LINES - 1


def test_overlay_drag_starts_at_the_pointer_and_scroll_points_its_way():
  w, h = 1280, 800
  px = lambda x, y: (round(x * (w - 1) / 999), round(y * (h - 1) / 999))   # DESIGN.md, Tools
  marks, pointer = overlay.marks("computer_use", {"action": "left_click_drag", "coordinate": [10, 10]}, None, w, h)
  assert marks["drag"]["x0"] is None and pointer == px(10, 10)   # no known start: only the end is drawn
  marks, pointer = overlay.marks("computer_use", {"action": "mouse_move", "coordinate": [999, 0]}, pointer, w, h)
  assert marks["click"] == {"x": w - 1, "y": 0, "kind": "mouse_move"}
  marks, pointer = overlay.marks("computer_use", {"action": "left_click_drag", "coordinate": [500, 999]}, pointer, w, h)
  assert marks["drag"] == {"x0": w - 1, "y0": 0, "x1": px(500, 999)[0], "y1": h - 1}
  up, _ = overlay.marks("computer_use", {"action": "scroll", "pixels": 300}, pointer, w, h)
  down, _ = overlay.marks("computer_use", {"action": "scroll", "pixels": -300}, pointer, w, h)
  assert up["scroll"]["y_end"] < pointer[1] < down["scroll"]["y_end"] and up["scroll"]["x"] == pointer[0]
  bad, same = overlay.marks("computer_use", {"action": "left_click", "coordinate": [1000, 5]}, pointer, w, h)
  assert "invalid" in bad and same == pointer
  assert overlay.marks("bash", {"command": "ls"}, pointer, w, h) == ({}, pointer)
  typed, _ = overlay.marks("computer_use", {"action": "key", "keys": ["ctrl", "s"]}, pointer, w, h)
  assert typed["text"] == "key: ctrl+s"
