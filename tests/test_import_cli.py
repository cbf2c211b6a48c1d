"""launch.import_data in a subprocess: mixed good/bad chat and grounding files -> native JSONL."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.data import render
from mage_jax.data import trajectory as tr

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _png(path: str, w: int, h: int, seed: int) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  rgb = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
  Image.fromarray(rgb).save(path)


def _run(*args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return subprocess.run([sys.executable, "-m", "launch.import_data", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=120)


def _call(name: str, args: dict) -> dict:
  return {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _chat(i: int, images: list[str], call: dict | None = None) -> dict:
  """Two steps: a click on o_1's screenshot, then bash after a screenshot + terminal text."""
  return {"id": f"chat-{i}", "tools": [tools.COMPUTER_USE_SCHEMA, tools.BASH_SCHEMA], "images": images,
          "messages": [
              {"role": "system", "content": "You are a computer-use agent."},
              {"role": "user", "content": f"<image>Task {i}: open the report."},
              {"role": "assistant", "reasoning_content": "The icon is top left.",
               "content": "Action: Double-click the report icon.",
               "tool_calls": [call or _call("computer_use", {"action": "double_click", "coordinate": [10, 20]})]},
              {"role": "tool", "content": "<image>opened\n"},
              {"role": "assistant", "content": "<think>\nList it.\n</think>\n\nAction: List the folder.",
               "tool_calls": [_call("bash", {"command": "ls"})]}]}


@pytest.fixture()
def chat_src(tmp_path):
  src = tmp_path / "src"
  for k in range(3):
    _png(str(src / "shots" / f"{k}.png"), 96, 64, k)
  (src / "shots" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
  good = [_chat(0, ["shots/0.png", "shots/1.png"]), _chat(1, ["shots/1.png", "shots/2.png"]),
          {"conversations": [  # ShareGPT with an ms-swift style function_call turn
              {"from": "human", "value": "Click OK.<image>"},
              {"from": "gpt", "value": "Action: Click OK."},
              {"from": "function_call", "value": json.dumps(
                  {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [500, 500]}})}],
           "images": ["shots/2.png"]}]
  bad = {
      2: '{"messages": [',                                                                 # malformed_json
      4: json.dumps(_chat(2, ["shots/0.png", "shots/1.png"], _call("browser", {"url": "x"}))),  # unknown_tool
      5: json.dumps(_chat(3, ["shots/0.png", "shots/1.png"],
                          _call("computer_use", {"action": "left_click", "coordinate": [1000, 5]}))),
      6: json.dumps(_chat(4, ["shots/0.png", "shots/missing.png"])),                      # missing_image
      7: json.dumps(_chat(5, ["shots/0.png", "shots/broken.png"])),                       # unreadable_image
      8: json.dumps(_chat(6, ["shots/0.png"])),                                           # 2 placeholders, 1 image
      9: json.dumps({"id": "empty", "messages": []}),                                     # empty_episode
  }
  lines = {1: json.dumps(good[0]), 3: json.dumps(good[1]), 10: json.dumps(good[2])}
  lines.update(bad)
  path = src / "chat.jsonl"
  path.write_text("\n".join(lines[k] for k in sorted(lines)) + "\n\n")  # a trailing blank line
  return path, good


WANT_SKIPPED = {2: tr.MALFORMED_JSON, 4: tr.UNKNOWN_TOOL, 5: tr.INVALID_ARGUMENTS, 6: tr.MISSING_IMAGE,
                7: tr.UNREADABLE_IMAGE, 8: tr.INVALID_FIELD, 9: tr.EMPTY_EPISODE}


def _render_all(path: str) -> tuple[list[tr.Episode], list]:
  items = list(tr.read_episodes(path))  # image_check="verify": every screenshot resolves
  assert all(isinstance(e, tr.Episode) for e in items), [str(e) for e in items]
  renderer = render.Renderer(render.RenderConfig(context_len=4096, prompt_variants=False))
  report = render.RenderReport()
  samples = [s for ep in items for s in renderer.render_episode(ep, report)]
  assert not report.skipped, report.skipped_items
  return items, samples


def test_messages_relative_paths(chat_src, tmp_path):
  src, good = chat_src
  out = tmp_path / "native" / "deep" / "episodes.jsonl"
  r = _run("--format=messages", f"--src={src}", f"--out={out}", "--source=chat", "--stage=3")
  assert r.returncode == 0, r.stderr
  for line, kind in WANT_SKIPPED.items():  # printed with file:line and reason
    assert f"{src}:{line}" in r.stdout and kind in r.stdout.split(f"{src}:{line}")[1].splitlines()[0]
  assert "imported 3 of 10 records" in r.stdout
  report = json.loads((tmp_path / "native" / "deep" / "episodes.import_report.json").read_text())
  assert report["episodes"] == 3 and report["steps"] == 5 and report["screenshots"] == 5
  assert report["skipped_total"] == 7 and report["images_copied"] == 0
  assert report["skipped"] == {k: 1 for k in WANT_SKIPPED.values()}
  assert [int(s.split(":")[1].split()[0]) for s in report["skipped_items"]] == sorted(WANT_SKIPPED)
  episodes, samples = _render_all(str(out))
  assert [e.id for e in episodes] == ["chat-0", "chat-1", "chat-10"]  # id from file stem + line
  assert all(e.source == "chat" and e.stage == 3 for e in episodes)
  raw = [json.loads(x) for x in out.read_text().splitlines()]
  assert raw[0]["steps"][1]["observation"] == {"screenshot": "../../src/shots/1.png", "text": "opened"}
  assert raw[0]["steps"][0]["tool_call"] == {"name": "computer_use",
                                             "arguments": {"action": "double_click", "coordinate": [10, 20]}}
  # One sample per step; step 2 of a chat episode shows both screenshots.
  assert [len(s.images) for s in samples] == [1, 2, 1, 2, 1]
  assert all(s.images[0].shape == (64, 96, 3) for s in samples)


def test_messages_copy_makes_a_self_contained_folder(chat_src, tmp_path):
  src, _ = chat_src
  out = tmp_path / "copied" / "episodes.jsonl"
  report_path = tmp_path / "rep.json"
  r = _run("--format=messages", f"--src={src}", f"--out={out}", "--images=copy", f"--report={report_path}",
           "--show_skipped=2")
  assert r.returncode == 0, r.stderr
  assert "... and 5 more skipped records" in r.stdout
  report = json.loads(report_path.read_text())
  assert report["images_copied"] == 3  # distinct files, each copied once
  shutil.rmtree(src.parent / "shots")  # the originals are no longer needed
  raw = [json.loads(x) for x in out.read_text().splitlines()]
  assert raw[1]["steps"][0]["observation"]["screenshot"] == "images/shots/1.png"
  episodes, samples = _render_all(str(out))
  assert len(episodes) == 3 and len(samples) == 5


def test_grounding_and_exit_status(tmp_path):
  _png(str(tmp_path / "g" / "screen.png"), 200, 100, 7)
  recs = [json.dumps({"image": "screen.png", "instruction": "the Save button", "box": [10, 10, 30, 30]}),
          json.dumps({"image": "screen.png", "instruction": "x", "point": [1, 2, 3]}),
          json.dumps({"image": "nope.png", "instruction": "Click OK", "point": [1, 1]}),
          json.dumps({"image": "screen.png", "instruction": "Click OK", "point": [0.5, 0.5],
                      "coord_space": "relative", "source": "mine"})]
  src = tmp_path / "g" / "ground.jsonl"
  src.write_text("\n".join(recs) + "\n")
  out = tmp_path / "out" / "episodes.jsonl"
  r = _run("--format=grounding", f"--src={src}", f"--out={out}", "--images=copy")
  assert r.returncode == 0, r.stderr
  assert f"{src}:2: {tr.INVALID_FIELD}: point" in r.stdout and f"{src}:3: {tr.MISSING_IMAGE}" in r.stdout
  episodes, samples = _render_all(str(out))
  assert [(e.source, e.stage) for e in episodes] == [("grounding", 1), ("mine", 1)]
  assert episodes[0].steps[0].tool_call.arguments == {"action": "left_click",
                                                      "coordinate": [round(20 * 999 / 199), round(20 * 999 / 99)]}
  assert episodes[1].meta["grounding"]["coordinate"] == [500, 500]  # relative 0.5 -> round(499.5)
  assert len(samples) == 2 and all(len(s.images) == 1 for s in samples)
  # Nothing importable: exit status 1, still a report.
  src.write_text(recs[1] + "\n")
  r = _run("--format=grounding", f"--src={src}", f"--out={tmp_path / 'none' / 'e.jsonl'}")
  assert r.returncode == 1 and "nothing was imported" in r.stderr
  assert json.loads((tmp_path / "none" / "e.import_report.json").read_text())["skipped_total"] == 1
  r = _run("--format=grounding", f"--src={tmp_path / 'absent.jsonl'}", f"--out={out}")
  assert r.returncode != 0 and "no such file" in r.stderr


def test_bad_bytes_deep_json_and_repeats_are_skipped_not_fatal(tmp_path):
  """Before: the first line that is not UTF-8 aborted the command with UnicodeDecodeError."""
  good = json.dumps(_chat(0, [])).replace("<image>", "").encode()
  lines = [b"\xef\xbb\xbf" + good,                                  # BOM: accepted
           good.replace(b"chat-0", b"chat-1").replace(b"Task", b"T\xe2\x28sk"),  # not UTF-8
           b"[" * 100_000,                                           # too deep to parse
           good,                                                     # chat-0 again
           good.replace(b'"chat-0"', b'"\\ud83d-2"'),                 # lone surrogate id
           good.replace(b"chat-0", b"chat-5")]
  src = tmp_path / "bytes.jsonl"
  src.write_bytes(b"\n".join(lines) + b"\n")
  out = tmp_path / "out" / "episodes.jsonl"
  r = _run("--format=messages", f"--src={src}", f"--out={out}")
  assert r.returncode == 0, r.stderr
  assert "imported 2 of 6 records" in r.stdout
  for line, kind in ((2, tr.INVALID_UTF8), (3, tr.TOO_DEEP), (4, tr.DUPLICATE_ID), (5, tr.INVALID_FIELD)):
    assert f"{src}:{line}" in r.stdout and kind in r.stdout.split(f"{src}:{line}")[1].splitlines()[0]
  report = json.loads((tmp_path / "out" / "episodes.import_report.json").read_text(encoding="utf-8"))
  assert report["skipped"] == {tr.DUPLICATE_ID: 1, tr.INVALID_FIELD: 1, tr.INVALID_UTF8: 1, tr.TOO_DEEP: 1}
  assert [e.id for e in tr.read_episodes(str(out), "none")] == ["chat-0", "chat-5"]
