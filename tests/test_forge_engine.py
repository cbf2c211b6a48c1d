"""Forge engine: DAG type checks, per-node cache, file-level gate readers, dedup, rounds'
budget moves, and a tiny 3-round run through the real sandbox gates (with resume)."""
import json
import os
import random
import sqlite3
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _forge_skills  # noqa: E402  registers the test skills
from mage_jax.forge import engine, filecheck, gates, nodes, rounds  # noqa: E402
from mage_jax.forge.skill import REGISTRY, TaxonomyError  # noqa: E402
from mage_jax.forge.workflow import NodeCache, Workflow, WorkflowError, default_workflow  # noqa: E402

UPPER = REGISTRY["test.text.upper"]


def test_workflow_wiring_errors_name_skill_and_node():
  ns = [nodes.make("sample", "params"), nodes.make("build"), nodes.make("setup"), nodes.make("checker"),
        nodes.make("package")]
  wiring = {"params": {"seed": "seed"}, "build": {"params": "params"}, "setup": {"fields": "build"},
            "checker": {"fields": "build"},
            "package": {"params": "params", "fields": "build", "setup": "checker", "checker": "checker"}}
  with pytest.raises(WorkflowError, match=r"test.text.upper: node 'package' port 'setup' takes 'setup' but "
                                          r"node 'checker' outputs 'checker'"):
    Workflow(UPPER, ns, wiring, "package")
  wiring["package"]["setup"] = "setup"
  Workflow(UPPER, ns, wiring, "package")  # now it connects
  with pytest.raises(WorkflowError, match="node 'build'.*no input wired to port 'params'"):
    Workflow(UPPER, ns, dict(wiring, build={}), "package")
  with pytest.raises(WorkflowError, match="cycle"):
    loop = [nodes.make("llm_reword", "r1"), nodes.make("llm_reword", "r2")]
    Workflow(UPPER, loop, {"r1": {"fields": "r2"}, "r2": {"fields": "r1"}}, "r1")
  with pytest.raises(WorkflowError, match="output node 'build' must exist and output 'package'"):
    Workflow(UPPER, ns, wiring, "build")


def test_node_cache_resume_and_rejection_with_node(tmp_path):
  wf = default_workflow(UPPER)
  cache = NodeCache(str(tmp_path))
  first = wf.run(3, cache)
  again = wf.run(3, cache)
  assert first.package == again.package and first.cache_hits == 0 and again.cache_hits == len(wf.order)
  assert default_workflow(UPPER).run(4, cache).cache_hits == 0  # another seed: nothing shared
  bad = default_workflow(REGISTRY["test.text.badmention"]).run(3, cache)
  assert (bad.reason, bad.node) == ("file_gate", "file_gate") and "not-there" in bad.detail
  # the refined sample node (value-pool pruning) avoids what it is told to
  avoid = {"name": _forge_skills.WORDS[:9]}
  params = [default_workflow(UPPER, avoid=avoid).run(s, cache).params for s in range(5)]
  assert all(p["name"] == _forge_skills.WORDS[9] for p in params)


def test_file_readers_find_values(tmp_path):
  import docx
  from PIL import Image
  d = docx.Document()
  d.add_paragraph("quarterly total 4312")
  d.save(tmp_path / "r.docx")
  Image.new("RGB", (30, 20), (255, 0, 0)).save(tmp_path / "p.png")
  con = sqlite3.connect(tmp_path / "s.sqlite")
  con.execute("CREATE TABLE t (name TEXT, n INTEGER)")
  con.execute("INSERT INTO t VALUES ('osprey', 77)")
  con.commit()
  con.close()
  assert "4312" in filecheck.read_text(str(tmp_path / "r.docx"))
  assert "30x20" in filecheck.read_text(str(tmp_path / "p.png")) and "#ff0000" in filecheck.read_text(str(tmp_path / "p.png"))
  assert "osprey\t77" in filecheck.read_text(str(tmp_path / "s.sqlite"))
  import tarfile
  (tmp_path / "m.txt").write_text("member line 9")
  with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as t:
    t.add(tmp_path / "m.txt", arcname="inner/m.txt")
  assert "inner/m.txt\nmember line 9" in filecheck.read_text(str(tmp_path / "a.tar.gz"))
  (tmp_path / "fake.jpg").write_text("placeholder")
  assert filecheck.read_text(str(tmp_path / "fake.jpg"), preparer="text") == "placeholder"
  (tmp_path / "x.docx").write_bytes(b"not a zip")
  with pytest.raises(Exception):
    filecheck.read_text(str(tmp_path / "x.docx"))
  files = filecheck.prepare_and_open([{"type": "xlsx", "path": "b.xlsx", "sheets": {"S": [[3.0, "kiwi"]]}},
                                      {"type": "script", "script": "true"}])
  assert filecheck.check_mentions(files, {"b.xlsx": [3, "kiwi"]}) is None
  assert "mango" in filecheck.check_mentions(files, {"b.xlsx": ["mango"]})
  assert "no preparer writes it" in filecheck.check_mentions(files, {"c.csv": ["1"]})


def test_dedup_reasons():
  d = gates.Deduper(near=0.8)
  chk = {"type": "file_text", "path": "a", "equals": "x"}
  assert d.check("s.a.b", {"k": 1}, "Write x into the file a.txt in the home directory now.", chk, "t1") is None
  assert d.check("s.a.b", {"k": 1}, "Something else", {"type": "other"}, "t2") == ("dedup_params", "t1")
  assert d.check("s.c.d", {"k": 2}, "write X into the file a.txt in the home directory now!", chk, "t3") \
      == ("dedup_instruction", "t1")
  assert d.check("s.a.b", {"k": 3}, "Write x into the file a.txt in the home directory now please.", chk, "t4") \
      == ("dedup_near_instruction", "t1")
  # the same instruction over different data (another checker) is another task
  assert d.check("s.a.b", {"k": 5}, "Write x into the file a.txt in the home directory now.",
                 dict(chk, equals="y"), "t5") is None


def test_settle_pause_only_for_desktop_packages():
  from mage_jax.forge import package_gates as harness
  from mage_jax.tasks.package import package_from_dict
  from mage_jax.forge.skills import load_all, package_dict
  reg = load_all()
  for sid, pause in (("shell.create.file_with_lines", 0.0),
                     ("desktop.click.named_button", harness.SETTLE_SECONDS)):
    pkg = package_from_dict(package_dict(reg[sid], reg[sid].sample(random.Random(0)), sid))
    assert harness.settle_seconds(pkg) == pause, sid
  assert harness.SETTLE_SECONDS > 0


def test_rounds_allocation_and_results_json(tmp_path):
  from mage_jax.agent import evaluation
  from mage_jax.agent.episode import EpisodeResult
  res = []
  for skill, wins in (("a.b.solved", 4), ("a.b.front", 2), ("a.b.hopeless", 0)):
    for i in range(4):
      r = EpisodeResult(f"{skill}-{i}", "terminal", None, skills=[skill])
      r.score = 1.0 if i < wins else 0.0
      res.append(r)
  path = evaluation.write_results(str(tmp_path), res, evaluation.summarize(res))["results"]
  success = rounds.skill_success(path)
  assert success == {"a.b.solved": (4, 4), "a.b.front": (2, 4), "a.b.hopeless": (0, 4)}
  budget = rounds.allocate(["a.b.solved", "a.b.front", "a.b.hopeless", "a.b.new"], success, 40)
  assert budget["a.b.front"] > budget["a.b.new"] > budget["a.b.solved"] == budget["a.b.hopeless"]
  assert budget["a.b.front"] == round(40 * 3 / 5)
  outs = [{"skill": "s", "params": {"w": w, "n": 1}, "accepted": ok} for w, ok in
          (("x", True), ("y", False), ("z", False), ("y", False))]
  assert rounds.refinements(outs) == {"s": {"w": ["y", "z"]}}
  noise = rounds.NoiseModel()
  assert len({round(noise.p(s), 3) for s in ("a.b.c", "a.b.d", "x.y.z")}) == 3


def test_broken_taxonomy_names_file(tmp_path):
  bad = tmp_path / "tax.json"
  bad.write_text('{"version": 1, "domains": [')
  with pytest.raises(TaxonomyError, match=str(bad)):
    engine.select_skills({"taxonomy": str(bad), "skill_modules": []})
  bad.write_text(json.dumps({"version": 1, "domains": [{"id": "test", "capabilities": [
      {"id": "text", "skills": [{"id": "test.text.upper", "description": "x"}]}]}]}))
  with pytest.raises(TaxonomyError, match="registered skills missing from the taxonomy"):
    engine.select_skills({"taxonomy": str(bad), "skill_modules": []})
  with pytest.raises(TaxonomyError, match="skill module no_such_module"):
    engine.select_skills({"taxonomy": "", "skill_modules": ["no_such_module"]})


def test_launch_forge_broken_taxonomy_exits_with_the_file(tmp_path):
  import subprocess
  bad = tmp_path / "tax.json"
  bad.write_text('{"version": 1,\n "domains": [}')
  p = subprocess.run([sys.executable, "-m", "launch.forge", "--config=configs/forge.py:tiny",
                      f"--config.taxonomy={bad}", f"--workdir={tmp_path / 'w'}"],
                     capture_output=True, text=True, timeout=300)
  assert p.returncode != 0 and f"launch.forge: {bad}:2: invalid JSON" in p.stderr, p.stderr[-800:]


def tiny_config(workdir, **kw):
  from configs.forge import get_config
  c = get_config("tiny").to_dict()
  c.update(workdir=str(workdir), taxonomy="", skill_modules=[], skills_per_domain=0,
           skills=[s.id for s in _forge_skills.SKILLS],
           attempts_per_skill=2)
  # the student's 2 episodes per skill and no child skills keep this file's rounds small; the
  # default 8 episodes and the child-skill step are tested in test_forge_student.py
  c["student"] = dict(c["student"], per_skill=2)
  c["children"] = dict(c["children"], enabled=False)
  c.update(kw)
  return c


def test_tiny_three_rounds_gates_counts_and_resume(tmp_path):
  c = tiny_config(tmp_path / "w")
  m = engine.run_forge(c)
  assert [r["round"] for r in m["rounds"]] == [1, 2, 3] and m["round"] == 3
  r1 = m["rounds"][0]
  bad = r1["rejections_by_skill"]["test.text.badmention"]
  assert bad == {"file_gate": 2} and r1["rejections_by_node"]["file_gate:file_gate"] >= 2
  assert m["counts"]["per_skill"].get("test.text.badmention") is None
  assert m["rejections"].get("near_miss_below_one", 0) >= 1  # weaknear's flag=1 draws
  assert m["counts"]["skills_with_3_plus"] >= 3 and m["counts"]["multi_app"] >= 1  # csv.sum: 2 apps
  # budget moves toward the frontier band once the student has been measured
  assert m["rounds"][0]["frontier_budget_share"] == 0 < m["rounds"][1]["frontier_budget_share"]
  assert os.path.isfile(m["rounds"][0]["student_results"])
  from mage_jax.tasks.package import load_suite
  suite = load_suite(m["suite"])
  assert len(suite) == m["counts"]["tasks"] and all(p.skills[0].startswith("test.") for p in suite)
  # re-check from a fresh copy: two accepted packages pass again, a tampered one fails
  import shutil
  small = tmp_path / "small"
  for p in suite[:2]:
    shutil.copytree(os.path.join(m["suite"], p.id), small / p.id)
  with open(small / suite[1].id / "task.json") as f:
    d = json.load(f)
  d["references"][0]["calls"][0]["arguments"]["command"] = "true"  # a reference that does nothing
  with open(small / suite[1].id / "task.json", "w") as f:
    json.dump(d, f)
  res = engine.recheck(str(small), workers=2)
  assert res["checked"] == 2 and [f[:2] for f in res["failed"]] == [(suite[1].id, "reference_one")]
  # resume: same workdir -> every node and gate read back, nothing re-gated, same suite (the
  # student, whose evaluation is no gate, stays out of it)
  c2 = dict(c, rounds=1, student=dict(c["student"], enabled=False))
  m2 = engine.run_forge(c2)
  assert m2["rounds"][0]["gated_fresh"] == 0 and m2["rounds"][0]["accepted"] == r1["accepted"]
  assert m2["counts"]["tasks"] == m["counts"]["tasks"]
  with open(os.path.join(c["workdir"], "round_1", "outcomes.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert all(r["cache_hits"] > 0 for r in rows)
