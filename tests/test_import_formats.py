"""Importing data as people hold it (tests/fixtures/importers, hand-made in each format's real
field names): OpenAI / ShareGPT / ms-swift transcripts without Action or think text, with
parallel calls and a closing text turn; AgentNet trajectories (Ubuntu, Windows/macOS) with
PyAutoGUI actions; ScreenSpot-v2 and OSWorld-G grounding records and their click accuracy."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from launch import import_data
from mage_jax.actions import pyautogui
from mage_jax.actions import schema as tools
from mage_jax.runs import grounding_eval
from mage_jax.data import render
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import agentnet, grounding

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "importers")


def _png(path, w: int, h: int, seed: int = 0) -> None:
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


def _fixture(tmp_path, name: str) -> str:
  dst = tmp_path / name
  shutil.copy(os.path.join(FIXTURES, name), dst)
  return str(dst)


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=120)


def _renders(path: str) -> list[tr.Episode]:
  """Every episode of a native file reads back (images verified) and every step renders."""
  items = list(tr.read_episodes(path))
  assert all(isinstance(e, tr.Episode) for e in items), [str(e) for e in items]
  renderer = render.Renderer(render.RenderConfig(context_len=8192, prompt_variants=False))
  report = render.RenderReport()
  samples = [s for ep in items for s in renderer.render_episode(ep, report)]
  assert not report.skipped and len(samples) == sum(len(e.steps) for e in items)
  return items


# ------------------------------------------------------------------------------ transcripts


@pytest.fixture()
def transcripts(tmp_path):
  src = _fixture(tmp_path, "openai_transcripts.jsonl")
  with open(src) as f:
    for rec in map(json.loads, f):
      for k, p in enumerate(rec.get("images", [])):
        _png(tmp_path / p, 64, 48, k)
  return src


def test_openai_transcripts_without_action_or_think_import_every_step(transcripts, tmp_path):
  out = str(tmp_path / "native" / "chat.jsonl")
  report = import_data.import_file("messages", transcripts, out, progress=False)
  # 12 plain transcripts + parallel calls + ShareGPT + ms-swift imported; a mid-conversation
  # text turn is the one counted skip; no record is unaccounted for.
  assert (report["records"], report["episodes"], report["unaccounted"]) == (16, 15, 0)
  assert report["skipped"] == {"text_only_turn": 1} and "messages[1]" in report["skipped_items"][0]
  eps = {e.id: e for e in _renders(out)}
  plain = [eps[f"plain-{k}"] for k in range(12)]
  assert all(len(e.steps) == 2 for e in plain)  # the call, then "Done." as terminate(success)
  for e in plain:
    call, done = e.steps
    assert done.tool_call.arguments == {"action": "terminate", "status": "success"}
    assert done.think == "Done." and done.action == "Finish the task"
    assert e.meta["filled"] == [{"step": 1, "action": "template", "think": "template"},
                                {"step": 2, "action": "template"}]
    assert call.think.startswith("Task: ") and call.action  # template text, never empty
  assert plain[0].steps[0].action == "Run `ls ~` in the shell"
  assert plain[0].steps[1].observation.text == "notes.txt\nreport.pdf"
  assert plain[2].steps[0].action == "Click the point (512, 40)"
  assert plain[2].steps[1].observation.screenshot == "../shots/2_1.png"
  assert plain[4].steps[0].action == "Press ctrl+s" and plain[5].steps[0].action == "Scroll down"
  # Parallel calls: one step per call; results matched by tool_call_id although answered out of
  # order, so the type step sees the click's result and the key step the type's.
  par = eps["parallel-ids"]
  assert [s.tool_call.arguments["action"] for s in par.steps] == ["left_click", "type", "key", "terminate"]
  assert [(s.observation.screenshot, s.observation.text) for s in par.steps] == [
      ("../shots/p_0.png", None), ("../shots/p_2.png", "clicked"), ("../shots/p_1.png", "typed"), (None, "submitted")]
  assert par.steps[0].action == "I will click the name field and type the name."
  assert par.meta["import"] == {"split_turns": 1, "final_text": "terminate"}
  assert par.meta["system"] == "You are a desktop agent."
  assert [m["step"] for m in par.meta["filled"]] == [1, 2, 3, 4]
  share, swift = eps["sharegpt-plain"], eps["swift-plain"]
  assert share.steps[0].tool_call.arguments == {"command": "ls -S /var/log | head -1"}
  assert share.steps[1].think == "The largest file is syslog." and share.steps[1].observation.text == "syslog"
  assert swift.steps[0].think == "The kernel version is printed by uname.\nI will run it with -r."
  assert swift.meta["filled"][0] == {"step": 1, "action": "template"}
  assert report["steps"] == 12 * 2 + 4 + 2 + 2 and report["steps_filled"] == 12 * 2 + 4 + 2 + 2
  assert report["filled"] == {"action:template": 31, "think:template": 12 + 3 + 1}  # parallel step 1 has its line
  # The filled Action line is what the step trains on; a template think body is masked from the
  # loss (its tags stay trained) unless mask_template_think=False; the source's think is trained.
  tok = render.Renderer().tok
  [s1, s2] = render.Renderer(render.RenderConfig(prompt_variants=False)).render_episode(plain[0])
  assert tok.decode(s1.tokens[s1.loss_mask]).startswith("<think></think>\n\nAction: Run `ls ~` in the shell\n")
  assert tok.decode(s2.tokens[s2.loss_mask]).startswith(
      "<think>\nDone.\n</think>\n\nAction: Finish the task\n<tool_call>")
  [u1, _] = render.Renderer(render.RenderConfig(prompt_variants=False, mask_template_think=False)
                            ).render_episode(plain[0])
  assert tok.decode(u1.tokens[u1.loss_mask]).startswith("<think>\nTask: List the files")


def test_openai_content_parts_and_legacy_function_call():
  from mage_jax.data.importers import chat
  rec = {"messages": [
      {"role": "user", "content": [{"type": "text", "text": "Show the date."}]},
      {"role": "assistant", "content": [{"type": "text", "text": "Action: Print the date."}],
       "function_call": {"name": "bash", "arguments": "{\"command\": \"date\"}"}},
      {"role": "function", "name": "bash", "content": "Wed Dec  2"}]}
  ep = chat.episode_from_messages(rec, episode_id="x")  # the result comes as role "function"
  assert [(s.action, s.tool_call.arguments) for s in ep.steps] == [("Print the date.", {"command": "date"})]
  assert ep.meta["filled"] == [{"step": 1, "think": "template"}]
  rec["messages"][1]["content"].append({"type": "image_url", "image_url": {"url": "x.png"}})
  with pytest.raises(tr.EpisodeError, match="must be text parts"):
    chat.episode_from_messages(rec, episode_id="x")


def test_transcript_switches_drop_final_text_and_skip_parallel_calls(transcripts, tmp_path):
  out = str(tmp_path / "chat.jsonl")
  report = import_data.import_file("messages", transcripts, out, progress=False,
                                   options={"final_text": "drop", "parallel_calls": "skip"})
  assert report["skipped"] == {"parallel_calls": 1, "text_only_turn": 1} and report["unaccounted"] == 0
  assert report["dropped_steps"] == {"final_text": 14} and report["steps"] == 12 + 1 + 1
  eps = {e.id: e for e in tr.read_episodes(out)}
  assert [s.tool_call.name for s in eps["plain-6"].steps] == ["bash"]


def test_llm_path_rewrites_only_filled_parts(transcripts, tmp_path):
  """The synthesis LLM (a loopback OpenAI-compatible server) rewrites template-filled think and
  Action text; the source's own text stays; a reply with another call is rejected and the
  step keeps its template text and mark."""
  from mage_jax.forge import llm
  from mage_jax.forge.replay import ReplayServer
  from mage_jax.harness import synthesis
  src = tmp_path / "few.jsonl"
  with open(transcripts) as f:
    keep = [r for r in map(json.loads, f) if r["id"] in ("plain-0", "plain-2", "swift-plain")]
  src.write_text("".join(json.dumps(r) + "\n" for r in keep))

  def respond(messages):
    body = re.search(r"<tool_call>\n(.*?)\n</tool_call>", messages[-1]["content"], re.S).group(1)
    if "uname" in body:  # a reply that changes the executed command must be rejected
      body = body.replace("uname -r", "uname -a")
    return f"<think>\nLLM reasoning.\n</think>\n\nAction: LLM summary\n<tool_call>\n{body}\n</tool_call>"

  out = str(tmp_path / "syn.jsonl")
  with ReplayServer(str(tmp_path / "traces.jsonl"), responder=respond) as server:
    syn = synthesis.Synthesizer(llm.ChatClient(server.url, "teacher"),
                                synthesis.SynthesisConfig(on_reject="keep_original"))
    report = import_data.import_file("messages", str(src), out, progress=False, synthesizer=syn)
  eps = {e.id: e for e in _renders(out)}
  p0 = eps["plain-0"]
  assert (p0.steps[0].think, p0.steps[0].action) == ("LLM reasoning.", "LLM summary")
  assert (p0.steps[1].think, p0.steps[1].action) == ("Done.", "LLM summary")  # source think kept
  assert p0.meta["filled"] == [{"step": 1, "action": "llm", "think": "llm"}, {"step": 2, "action": "llm"}]
  sw = eps["swift-plain"]
  assert sw.steps[0].action == "Run `uname -r` in the shell"  # rejected: template stays
  assert sw.meta["filled"][0] == {"step": 1, "action": "template"}
  assert report["synthesis"]["rejected"] == {"call_mismatch": 1} and report["synthesis"]["steps"] == 6
  assert report["filled"] == {"action:llm": 5, "action:template": 1, "think:llm": 2}


# ------------------------------------------------------------------------------ AgentNet


@pytest.fixture()
def agentnet_images(tmp_path):
  shots = tmp_path / "images"
  for name in ["u1_0", "u1_1", "u1_2", "u1_3", "u1_4", "u1_5", "u2_0", "u2_1", "m1_0", "m1_1", "m1_2",
               "m1_3", "m1_4", "w1_0", "w1_1", "w1_2", "w1_3"]:
    _png(shots / f"{name}.png", 80, 50)
  return str(shots)


def test_agentnet_ubuntu_via_cli(tmp_path, agentnet_images):
  src = _fixture(tmp_path, "agentnet_ubuntu.jsonl")
  out = tmp_path / "out" / "ubuntu.jsonl"
  r = _run("launch.import_data", "--format=agentnet", f"--src={src}", f"--out={out}",
           f"--image_root={agentnet_images}", "--images=copy")
  assert r.returncode == 0, r.stderr
  assert "imported 1 of 3 records" in r.stdout
  report = json.loads((tmp_path / "out" / "ubuntu.import_report.json").read_text())
  assert report["skipped"] == {"unmappable:hscroll": 1, "unmappable:tripleClick": 1}
  assert report["unaccounted"] == 0 and report["split_turns"] == 3
  [ep] = _renders(str(out))
  calls = [s.tool_call.arguments for s in ep.steps]
  assert calls == [
      {"action": "left_click", "coordinate": [971, 969]},       # 0.9722 * 999, 0.9701 * 999
      {"action": "mouse_move", "coordinate": [454, 268]}, {"action": "left_click_drag", "coordinate": [410, 277]},
      {"action": "mouse_move", "coordinate": [396, 783]}, {"action": "scroll", "pixels": -150},
      {"action": "type", "text": "night light"}, {"action": "key", "keys": ["enter"]},
      {"action": "key", "keys": ["ctrl", "q"]}, {"action": "terminate", "status": "success"}]
  # The second call of a split step sees the same screenshot (copied next to the output).
  assert ep.steps[1].observation.screenshot == ep.steps[2].observation.screenshot == "images/u1_1.png"
  assert ep.steps[1].think == "The system menu opened.\n\nThe brightness slider is visible; I drag it left."
  assert ep.steps[1].action == "Drag the brightness slider to the left."
  assert ep.steps[2].action == "Drag from the pointer to (410, 277)"
  assert [m["step"] for m in ep.meta["filled"]] == [3, 5, 7, 8]
  assert ep.meta["agentnet"]["incorrect_steps"] == [3] and ep.outcome == "success"
  assert ep.meta["agentnet"]["natural_language_task"] == "Turn on night light in the display settings."
  assert ep.instruction == "Open the display settings and turn on night light."


def test_agentnet_windows_macos_and_truncate(tmp_path, agentnet_images):
  src = _fixture(tmp_path, "agentnet_win_mac.jsonl")
  items = list(agentnet.read_agentnet_file(src, agentnet_images))
  eps = {e.id: e for e in items if isinstance(e, tr.Episode)}
  assert [(s.line, s.kind) for s in items if isinstance(s, tr.SkippedItem)] == [(3, "unmappable:keyDown")]
  mac = eps["mac-copy-paste"]
  assert [s.tool_call.arguments for s in mac.steps][:2] == [
      {"action": "double_click", "coordinate": [250, 100]}, {"action": "key", "keys": ["super", "c"]}]
  win = eps["win-context-menu"]
  assert [s.tool_call.arguments["action"] for s in win.steps] == [
      "right_click", "left_click", "key", "key", "terminate"]
  assert win.steps[3].tool_call.arguments == {"action": "key", "keys": ["enter"]}
  assert win.steps[4].tool_call.arguments["status"] == "failure" and win.outcome == "failure"
  assert tools.COMPUTER_USE in win.tool_names and tools.BASH not in win.tool_names
  cut = list(agentnet.read_agentnet_file(src, agentnet_images, on_unmappable="truncate"))[2]
  assert isinstance(cut, tr.Episode) and len(cut.steps) == 1 and cut.outcome is None
  assert cut.meta["import"]["dropped"] == {"unmappable:keyDown": 1}


@pytest.mark.parametrize("code,want", [
    ("pyautogui.click(0.5, 0.5, 2)", [{"action": "double_click", "coordinate": [500, 500]}]),
    ("pyautogui.click(x=0.1, y=0.2, button='right')", [{"action": "right_click", "coordinate": [100, 200]}]),
    ("pyautogui.scroll(2, x=0, y=1)", [{"action": "mouse_move", "coordinate": [0, 999]},
                                       {"action": "scroll", "pixels": 100}]),
    ("pyautogui.press('a', presses=2)", [{"action": "key", "keys": ["a"]}] * 2),
    ("computer.wait()", [{"action": "wait", "time": 1.0}]),
    ("pyautogui.click(x=0.5, y=0.5, clicks=3)", "tripleClick"),
    ("computer.triple_click(x=0.5, y=0.5)", "triple_click"),
    ("pyautogui.dragTo(0.2, 0.2, button='right')", "dragTo(button=right)"),
    ("pyautogui.hotkey('ctrl', 'hyper')", "unknown_key"),
    ("import os", "not_a_call"),
    ("pyautogui.click(x=1.5, y=0.5)", "coordinate_out_of_screen"),
    ("pyautogui.typewrite(['a', 'enter'])", [{"action": "key", "keys": ["a"]}, {"action": "key", "keys": ["enter"]}]),
    ("import time; time.sleep(0.5)", [{"action": "wait", "time": 0.5}]),
    ("import os; os.remove('x')", "not_a_call"),
])
def test_pyautogui_mapping(code, want):
  try:
    got = pyautogui.to_calls(code, pyautogui.relative_position)
  except pyautogui.Unmappable as u:
    got = u.what
  assert got == want


# ------------------------------------------------------------------------------ grounding benchmarks


@pytest.fixture()
def benchmarks(tmp_path):
  _png(tmp_path / "img" / "web_0.png", 400, 200)
  _png(tmp_path / "img" / "mobile_0.png", 200, 400)
  _png(tmp_path / "img" / "osg_0.png", 320, 200)
  names = ["screenspot_web_v2.json", "screenspot_mobile_v2.json", "OSWorld-G.json",
           "classification_result.json"]
  return {n: _fixture(tmp_path, n) for n in names}, str(tmp_path / "img")


def test_screenspot_and_osworld_g_import_and_click_accuracy(tmp_path, benchmarks):
  files, images = benchmarks
  outs = {}
  for fmt, name in [("screenspot_v2", "screenspot_web_v2.json"), ("screenspot_v2", "screenspot_mobile_v2.json"),
                    ("osworld_g", "OSWorld-G.json")]:
    outs[name] = str(tmp_path / "native" / name.replace(".json", ".jsonl"))
    report = import_data.import_file(fmt, files[name], outs[name], image_root=images, progress=False)
    assert report["unaccounted"] == 0
    outs[name + ":report"] = report
  assert outs["screenspot_web_v2.json:report"]["skipped"] == {"missing_image": 1}
  assert outs["OSWorld-G.json:report"]["skipped"] == {"invalid_field": 1}  # image_size 1920x1080 != 320x200
  assert "image_size" in outs["OSWorld-G.json:report"]["skipped_items"][0]
  web = _renders(outs["screenspot_web_v2.json"])
  mobile = _renders(outs["screenspot_mobile_v2.json"])
  osg = {e.id: e for e in _renders(outs["OSWorld-G.json"])}
  # bbox [100, 40, 60, 20] (x, y, w, h) on 400x200: centre (130, 50) px -> round(130*999/399), round(50*999/199)
  assert web[0].steps[0].tool_call.arguments == {"action": "left_click", "coordinate": [325, 251]}
  assert web[0].meta["grounding"]["box"] == [100, 40, 160, 60] and web[0].stage == 1
  assert web[0].meta["benchmark"] == {"name": "screenspot_v2", "split": "web", "data_type": "icon",
                                      "data_source": "shop"}
  g = web[0].meta["grounding"]
  px = lambda x, w: round(x * 999 / (w - 1))  # noqa: E731 - a pixel column as a [0, 999] coordinate
  assert grounding.hits(g, "computer_use", {"action": "left_click", "coordinate": [px(159, 400), px(59, 200)]})
  assert not grounding.hits(g, "computer_use", {"action": "left_click", "coordinate": [px(162, 400), 251]})
  assert not grounding.hits(g, "bash", {"command": "x"})
  poly, refusal = osg["A1B2C3-1"], osg["A1B2C3-2"]
  assert grounding.hits(poly.meta["grounding"], "computer_use", poly.steps[0].tool_call.arguments)
  # (150, 150) px is inside the L's bounding box but outside the L itself
  outside_l = {"action": "left_click", "coordinate": [px(150, 320), px(150, 200)]}
  assert not grounding.hits(poly.meta["grounding"], "computer_use", outside_l)
  assert refusal.steps[0].tool_call.arguments == {"action": "terminate", "status": "failure"}
  assert osg["A1B2C3-0"].meta["benchmark"]["categories"] == ["text_matching", "element_recognition"]

  def reply(call):
    return tools.format_response("", "x", "computer_use", call)
  preds = {web[0].id: reply(web[0].steps[0].tool_call.arguments),                      # web icon: hit
           web[1].id: reply({"action": "left_click", "coordinate": [999, 999]}),        # web text: miss
           mobile[0].id: reply(mobile[0].steps[0].tool_call.arguments),                 # mobile icon: hit
           mobile[1].id: "I think it is the Wi-Fi row.",                                # unparsed
           "A1B2C3-0": reply(osg["A1B2C3-0"].steps[0].tool_call.arguments),
           "A1B2C3-1": reply(outside_l),
           "A1B2C3-2": reply({"action": "terminate", "status": "failure"})}
  # The training-time click accuracy (train/evaluation.py) scores imported episodes the same way.
  from mage_jax.train import evaluation
  assert [evaluation.click_hit(e, preds[e.id]) for e in web + mobile] == [
      (True, True), (True, False), (True, True), (False, False)]
  assert evaluation.click_hit(refusal, preds["A1B2C3-2"]) == (True, True)
  pred_path = tmp_path / "preds.jsonl"
  pred_path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in preds.items()))
  result = tmp_path / "eval.json"
  r = _run("launch.eval_grounding", f"--episodes={outs['screenspot_web_v2.json']},"
           f"{outs['screenspot_mobile_v2.json']},{outs['OSWorld-G.json']}",
           f"--predictions={pred_path}", f"--out={result}")
  assert r.returncode == 0, r.stderr
  summary = json.loads(result.read_text())["summary"]
  acc = {b: {c: (v["accuracy"], v["n"]) for c, v in cols.items()} for b, cols in summary.items()}
  assert acc["screenspot_v2"] == {"mobile-text": (0.0, 1), "mobile-icon": (1.0, 1), "web-text": (0.0, 1),
                                  "web-icon": (1.0, 1), "avg": (0.5, 4)}
  assert summary["screenspot_v2"]["mobile-text"]["unparsed"] == 1
  assert acc["osworld_g"] == {"text_matching": (1.0, 1), "element_recognition": (1.0, 1),
                              "layout_understanding": (0.0, 1), "fine_grained_manipulation": (0.0, 1),
                              "refusal": (1.0, 1), "overall": (2 / 3, 3)}
  assert "web-icon" in r.stdout and "100.0%" in r.stdout


def test_grounding_eval_asks_a_policy_endpoint(tmp_path, benchmarks):
  """replies_from_policy renders each record's prompt with its screenshot and asks an
  OpenAI-compatible endpoint (loopback), which here always clicks the image centre."""
  from mage_jax.agent.policies import OpenAIChatPolicy
  from mage_jax.forge.replay import ReplayServer
  files, images = benchmarks
  eps = [e for e in grounding.read_screenspot_file(files["screenspot_mobile_v2.json"], images)]
  seen = []

  def respond(messages):
    seen.append([p.get("type") for m in messages if isinstance(m["content"], list) for p in m["content"]])
    return tools.format_response("", "Click", "computer_use", {"action": "left_click", "coordinate": [500, 500]})

  with ReplayServer(str(tmp_path / "t.jsonl"), responder=respond) as server:
    replies = grounding_eval.replies_from_policy(
        eps, OpenAIChatPolicy(server.url, "mage", temperature=0.0), grounding_eval.evaluation_renderer())
  assert all("image_url" in s for s in seen) and len(seen) == 2
  scored = [grounding_eval.score(e, r) for e, r in zip(eps, replies)]
  # centre (99.5, 199.5) px of 200x400: outside settings [20, 300, 100, 340] and Wi-Fi [20, 50, 170, 75]
  assert [s.hit for s in scored] == [False, False] and all(s.parsed for s in scored)
