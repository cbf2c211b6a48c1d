"""OSWorld task import (mage_jax/tasks/osworld): real OSWorld task files (tests/fixtures/osworld, Apache-2.0)
import or are refused with reasons, and the imported ones pass the gates through launch.eval."""
import json
import os
import subprocess
import sys

import pytest

from _agent_helpers import needs_sandbox
from mage_jax.tasks.osworld import importer, task_types

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "osworld")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OS_IDS = ["7688b85f-87a4-4e4a-b2f8-f3d6c3f29b82", "e0df059f-28a6-4169-924f-b9623e7184cc",
          "cc9d4f34-1ca0-4a1b-8ff2-09302696acb9"]
WRITER_ID = "3ef2b351-8a84-4ff2-8724-d86eae9b842e"
INFEASIBLE_ID = "4783cc41-c03c-4e1b-89b4-50658f642bd5"
CHROME_IDS = ["030eeff7-b492-4218-b312-701ec99ee0cc", "bb5e4c0d-f964-439c-97b6-bdb9747de3f4"]


def _refs():
  with open(os.path.join(FIX, "references.json")) as f:
    return json.load(f)


def test_every_fixture_is_imported_or_refused_with_its_reasons(tmp_path):
  src = tmp_path / "src"
  src.mkdir()
  for app in os.listdir(os.path.join(FIX, "tasks")):
    for name in os.listdir(os.path.join(FIX, "tasks", app)):
      (src / name).write_bytes(open(os.path.join(FIX, "tasks", app, name), "rb").read())
  (src / "broken.json").write_text('{"id": "x",\n "instruction": }')
  task = json.loads((src / f"{OS_IDS[0]}.json").read_text())
  task.update(id="custom-metric", evaluator={"func": "compare_audios", "result": {"type": "vm_file", "path": "/a"},
                                             "expected": {"type": "rule", "rules": {}}})
  task["config"].append({"type": "googledrive", "parameters": {}})
  (src / "custom.json").write_text(json.dumps(task))
  out = tmp_path / "out"
  report = importer.import_dir(str(src), str(out), cache_dir=os.path.join(FIX, "cache"), references=_refs())
  assert sorted(r["id"] for r in report["imported"]) == sorted(OS_IDS + CHROME_IDS + [WRITER_ID, INFEASIBLE_ID,
                                                                                     "9656a811-9b5b-4ddf-99c7-5117bcef0626"])
  refused = {r["id"]: r["reasons"] for r in report["refused"]}
  assert set(refused) == {"01b269ae-2111-4a07-81fd-3fcd711993b0", "5ced85fc-fa1a-4217-95fd-0fb530545ce2",
                          "custom-metric", "?"}
  assert any("network download not in the local file cache" in r for r in refused["01b269ae-2111-4a07-81fd-3fcd711993b0"])
  assert any("expected file not in the local file cache" in r for r in refused["01b269ae-2111-4a07-81fd-3fcd711993b0"])
  assert any("eval" in r and "download" in r for r in refused["5ced85fc-fa1a-4217-95fd-0fb530545ce2"])
  infeasible = json.loads((out / f"osworld_{INFEASIBLE_ID}" / "task.json").read_text())
  assert infeasible["checker"] == {"type": "osworld", "infeasible": True, "metrics": []}
  assert any("compare_audios" in r for r in refused["custom-metric"])
  assert any("Google Drive" in r for r in refused["custom-metric"])
  assert any("broken.json:2: invalid JSON" in r for r in refused["?"])
  assert json.loads(open(importer.report_path(str(out))).read()) == report
  pkg = json.loads((out / f"osworld_{OS_IDS[0]}" / "task.json").read_text())
  scripts = [s["script"] for s in pkg["setup"]]
  assert not any("sudo" in s or "pyautogui" in s for s in scripts)   # dropped, and said so:
  notes = next(r["notes"] for r in report["imported"] if r["id"] == OS_IDS[0])
  assert any("sudo" in n for n in notes) and any("pyautogui" in n for n in notes)
  assert pkg["kind"] == "terminal" and pkg["checker"]["type"] == "osworld"
  chrome = json.loads((out / f"osworld_{CHROME_IDS[0]}" / "task.json").read_text())
  assert chrome["kind"] == "hybrid" and [s["type"] for s in chrome["setup"]] == ["script", "osworld_browser"]
  assert "osworld_domain:chrome" in chrome["skills"] and chrome["max_steps"] == 50
  writer = json.loads((out / f"osworld_{WRITER_ID}" / "task.json").read_text())
  assert [s["type"] for s in writer["setup"]] == ["script", "osworld_file", "osworld_open"]
  assert (out / f"osworld_{WRITER_ID}" / writer["setup"][1]["src"]).is_file()
  assert writer["setup"][1]["src"].endswith("_Constitution_Template_With_Guidelines.docx")
  # OSWorld's save before reading, through our action path
  assert {"type": "gui_actions", "actions": [{"action": "key", "keys": ["ctrl", "s"]}, {"action": "wait", "time": 0.5}]} \
      in writer["checker"]["postconfig"]
  without_cache = importer.convert(json.loads((src / f"{WRITER_ID}.json").read_text()), "w.json")
  assert any("not in the local file cache" in r for r in without_cache.reasons)


def test_download_step_reads_the_local_cache(tmp_path):
  cache = tmp_path / "cache"
  cache.mkdir()
  (cache / "Student_Level_Fill_Blank.xlsx").write_bytes(b"stand-in")
  task = json.load(open(os.path.join(FIX, "tasks", "libreoffice_calc", "01b269ae-2111-4a07-81fd-3fcd711993b0.json")))
  res = importer.convert(task, "t.json", str(cache))
  assert not any("config" in r for r in res.reasons)   # the input came from the cache ...
  assert any("evaluator.expected: expected file not in the local file cache" in r for r in res.reasons)  # ... not the gold file


@pytest.mark.parametrize("func,result,expected,want", [
    ("exact_match", "File exists.\n", {"expected": "File exists.\n"}, 1.0),
    ("exact_match", "File exists.", {"expected": "File exists.\n"}, 0.0),
    ("check_include_exclude", "a b c", {"include": ["a", "c"], "exclude": ["d"]}, 1.0),
    ("check_include_exclude", "a b d", {"include": ["a"], "exclude": ["d"]}, 0.0),
    ("check_include_exclude", None, {"include": []}, 0.0),
    ("file_contains", b"CPU %user %idle", {"expected": ["CPU", "%idle"]}, 1.0),
    ("file_contains", b"CPU", {"expected": ["CPU", "%idle"]}, 0.0),
    ("check_line_number", b"12:00:01 a\n12:00:02 b\nx\n", {"expected": "2"}, 1.0),
    ("check_list", b"foo\nbar\n", {"expect": ["^fo+$"], "unexpect": ["baz"]}, 1.0),
    ("check_list", b"foo\nbaz\n", {"expect": ["^fo+$"], "unexpect": ["baz"]}, 0.0),
    ("compare_text_file", b"x\n", b"x\n", 1.0),
    ("compare_text_file", b"x\n", b"y\n", 0.0),
    ("compare_csv", b"a,b\n1,2\n", b"a,b\r\n1,2\r\n", 1.0),
    ("check_json_settings", b'{"editor.wordWrapColumn": 50}', {"expected": {"editor.wordWrapColumn": 50}}, 1.0),
    ("literal_match", "Abc", "abc", 0.0),
])
def test_metrics_match_osworld_semantics(func, result, expected, want):
  assert task_types.METRICS[func](result, expected) == want


def test_compare_table_reads_cell_values(tmp_path):
  import io
  import openpyxl
  def book(v):
    wb = openpyxl.Workbook()
    wb.active.append(["Name", "Level"])
    wb.active.append(["Ann", v])
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()
  assert task_types.METRICS["compare_table"](book("A"), book("A")) == 1.0
  assert task_types.METRICS["compare_table"](book("A"), book("B")) == 0.0


@needs_sandbox
@pytest.mark.slow
def test_five_fixtures_across_two_apps_pass_the_gates_through_launch_eval(tmp_path):
  ids = OS_IDS + (CHROME_IDS if os.path.exists("/usr/lib/chromium/chromium") else [])
  if len(ids) < 5:
    pytest.skip("chromium is not installed: only the os fixtures can run")
  out = tmp_path / "suite"
  subprocess.run([sys.executable, "-m", "launch.import_tasks", "--format=osworld", f"--src={FIX}/tasks",
                  f"--out={out}", f"--references={FIX}/references.json"], cwd=ROOT, check=True, capture_output=True)
  work = tmp_path / "eval"
  p = subprocess.run([sys.executable, "-m", "launch.eval", "--config=configs/eval.py:scripted", f"--workdir={work}",
                      f"--config.suite={out}", "--config.check_gates=True", "--config.report=False",
                      "--config.slots=2", "--config.tasks=" + ",".join(f"osworld_{i}" for i in ids)],
                     cwd=ROOT, capture_output=True, text=True, timeout=900)
  print(p.stdout[-4000:], p.stderr[-2000:])
  assert p.returncode == 0
  assert sum(line.split(":")[1].strip().startswith("passed") for line in p.stdout.splitlines()
             if line.startswith("osworld_") and ": " in line and ("passed" in line or "REJECTED" in line)) == len(ids)
  assert "REJECTED" not in p.stdout
  episodes = json.load(open(work / "results.json"))["episodes"]   # the scripted reference, run as a policy
  assert sorted(e["task_id"] for e in episodes) == sorted(f"osworld_{i}" for i in ids)
  assert all(e["score"] == 1.0 for e in episodes), episodes


def test_document_metrics_read_docx(tmp_path):
  import io
  import docx
  from docx.enum.text import WD_ALIGN_PARAGRAPH
  def doc(align, font):
    d = docx.Document()
    d.add_paragraph("").add_run("Heading").font.name = font
    d.paragraphs[0].alignment = align
    d.add_paragraph("").add_run("body").font.name = font
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()
  m = task_types.METRICS
  assert m["is_first_line_centered"](doc(WD_ALIGN_PARAGRAPH.CENTER, "Arial"), None) == 1.0
  assert m["is_first_line_centered"](doc(WD_ALIGN_PARAGRAPH.RIGHT, "Arial"), None) == 0.0
  assert m["compare_font_names"](doc(None, "Times New Roman"), {"font_name": "Times New Roman"}) == 1.0
  assert m["compare_font_names"](doc(None, "Arial"), {"font_name": "Times New Roman"}) == 0.0
  assert m["literal_match"]("Abc", "abc", ignore_case=True) == 1.0


def test_a_few_tasks_per_domain_import_with_their_files_cached(tmp_path):
  from mage_jax.tasks.osworld import cache
  src = os.path.join(FIX, "domains")
  empty = importer.import_dir(src, str(tmp_path / "out0"))
  no_download = {"5ca86c6f-f317-49d8-b6a7-b527541caae8", "48d05431-6cd5-4e76-82eb-12b60d823f7d",
                 "5ac2891a-eacd-4954-b339-98abba077adb", "06fe7178-4491-4589-810f-2e2bc9502122"}   # chrome's
  assert {r["id"] for r in empty["imported"]} == no_download
  needs_files = {r["id"] for r in empty["refused"] if all("local file cache" in x for x in r["reasons"])}
  assert needs_files == {"045bf3ff-9077-4b86-b483-a1040a949cff", "0326d92d-d218-48a8-9ca1-981cd6d064c7", "04578141-1d42-4146-b9cf-6fab4ce5fd74",
                         "0e763496-b6bb-4508-a427-fad0b6c3e195", "09a37c51-e625-49f4-a514-20a773797a8a",
                         "23393935-50c7-4a86-aeea-2b78fd089c5c", "06fe7178-4491-4589-810f-2e2bc9502122",  # thunderbird's
                         "fba2c100-79e8-42df-ae74-b592418d54f4", "0f84bef9-9790-432e-92b7-eece357603fb",
                         "21ab7b40-77c2-4ae6-8321-e00d3a086c73"}
  tasks, _ = importer.load_tasks(src)
  cache.make_placeholders(cache.needed(tasks), str(tmp_path / "ph"))
  full = importer.import_dir(src, str(tmp_path / "out1"), str(tmp_path / "ph"))
  assert {r["id"] for r in full["imported"]} == no_download | needs_files
  refused = {os.path.basename(os.path.dirname(r["source"])): r["reasons"] for r in full["refused"]}
  assert set(refused) == {"vs_code"}
  assert any("VS Code" in r for r in refused["vs_code"])
  assert full["by_domain"]["vlc"] == {"imported": 2, "refused": 0}
  vlc = json.loads((tmp_path / "out1" / "osworld_fba2c100-79e8-42df-ae74-b592418d54f4" / "task.json").read_text())
  assert "osworld_domain:vlc" in vlc["skills"] and vlc["max_steps"] == 50


@needs_sandbox
def test_launch_eval_runs_the_osworld_protocol_with_a_per_domain_table(tmp_path):
  """Two runs of three terminal os tasks and the infeasible one (its reference answers FAIL), the
  scripted reference as the policy: OSWorld's table has the os domain at 100% in both runs."""
  ids = OS_IDS[:2] + [INFEASIBLE_ID]
  out = tmp_path / "suite"
  subprocess.run([sys.executable, "-m", "launch.import_tasks", "--format=osworld", f"--src={FIX}/tasks/os",
                  f"--out={out}", f"--references={FIX}/references.json"], cwd=ROOT, check=True, capture_output=True)
  work = tmp_path / "eval"
  p = subprocess.run([sys.executable, "-m", "launch.eval", "--config=configs/eval.py:scripted", f"--workdir={work}",
                      f"--config.suite={out}", "--config.report=False", "--config.slots=2", "--config.osworld.runs=2",
                      "--config.tasks=" + ",".join(f"osworld_{i}" for i in ids)],
                     cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  table = json.loads((work / "osworld_table.json").read_text())
  assert table["runs"] == 2 and table["domains"]["os"] == {"tasks": 3, "per_run": [100.0, 100.0], "mean": 100.0}
  assert table["overall"]["mean"] == 100.0 and "OSWorld success rate" in p.stdout
  episodes = json.load(open(work / "results.json"))["episodes"]
  assert len(episodes) == 6 and {e["status"] for e in episodes} == {"terminated"}


def test_a_setup_job_left_in_the_background_is_waited_for():
  """cc9d4f34's setup ends in `nohup ./my_process.sh ... &`: the import marks the step to settle, and
  the step waits until the sandbox's process list holds still (the near miss `pkill -STOP -f
  my_process.sh` once stopped `nohup` before it had exec'd the script, and passed under load)."""
  from mage_jax.tasks import preparers
  task = json.load(open(os.path.join(FIX, "tasks", "os", f"{OS_IDS[2]}.json")))
  home, step = importer.convert(task, "cc9d4f34.json").package["setup"]   # the home's folders, the job
  assert step["type"] == "script" and step["settle"] == importer.BACKGROUND_SETTLE and "settle" not in home
  plain = json.load(open(os.path.join(FIX, "tasks", "os", f"{OS_IDS[0]}.json")))
  assert all("settle" not in s for s in importer.convert(plain, "p.json").package["setup"])

  class Target:   # the sandbox's `ps -eo args=` over time: an exec in progress, then a steady job
    def __init__(self, states):
      self.states, self.polls = list(states), 0
    def run_script(self, script, timeout):
      if script != "ps -eo args=":
        return 0, ""
      self.polls += 1
      return 0, self.states.pop(0) if len(self.states) > 1 else self.states[0]
  moving = Target(["nohup ./my_process.sh", "/bin/sh ./my_process.sh\nsleep 1"])
  preparers.run_preparer(moving, {"type": "script", "script": "start", "settle": 5}, None)
  assert moving.polls == preparers.SETTLE_STABLE + 1   # one changed poll, then SETTLE_STABLE alike
  restless = Target([f"job {i}" for i in range(1000)])
  assert not preparers.settle_processes(restless, 0.5) and restless.polls >= 2
  for bad in ("5", -1, True, preparers.MAX_SETTLE + 1):
    with pytest.raises(ValueError, match=r"t.json: preparer 'script' field 'settle'"):
      preparers.validate_spec({"type": "script", "script": "x", "settle": bad}, "t.json")


@needs_sandbox
def test_settle_waits_for_a_background_job_to_reach_its_program():
  from mage_jax.agent.env import LocalEnv
  from mage_jax.tasks.package import TaskPackage
  job = "nohup bash -c 'sleep {}; exec sleep 301' > /dev/null 2>&1 &"
  env = LocalEnv()
  try:
    def procs(setup):
      env.reset(TaskPackage(id="bg", instruction="x", kind="terminal", setup=[setup],
                            checker={"type": "file_exists", "path": "x"}))
      return env.run_script("ps -eo args=", 10)[1]
    assert "sleep 3" in procs({"type": "script", "script": job.format(3)})   # no settle: still on its way
    settled = procs({"type": "script", "script": job.format(0.3), "settle": 5})
    assert "sleep 301" in settled and "sleep 0.3" not in settled
  finally:
    env.close()


@needs_sandbox
def test_a_check_command_that_does_not_finish_scores_zero(monkeypatch):
  """An exclude-only rule on the output of a command that never finished once passed on its empty
  partial output; a getter's command past task_types.COMMAND_TIMEOUT is unreadable state (0)."""
  from mage_jax.agent.env import LocalEnv
  from mage_jax.tasks.package import TaskPackage
  monkeypatch.setattr(task_types, "COMMAND_TIMEOUT", 1.0)
  def checker(command):
    return {"type": "osworld", "metrics": [{"func": "check_include_exclude",
                                            "result": {"type": "vm_command_line", "command": command, "shell": True},
                                            "expected": {"type": "rule", "rules": {"include": [], "exclude": ["bad"]}}}]}
  env = LocalEnv()
  try:
    for command, want in (("echo fine", 1.0), ("echo bad", 0.0), ("sleep 20 | cat; echo fine", 0.0)):
      env.reset(TaskPackage(id="c", instruction="x", kind="terminal", checker=checker(command)))
      assert env.score() == want, command
  finally:
    env.close()
