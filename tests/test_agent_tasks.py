"""Task packages: format, loader errors, gates (each rejecting a bad package), the built-in suite."""
import json
import os

import pytest

from mage_jax.forge import package_gates as gates
from mage_jax.tasks.builtin import builtin_packages, builtin_task_dicts
from mage_jax.tasks.package import PackageError, load_package, load_suite, package_from_dict, save_package
from tests._agent_helpers import builtin_suite_run, local_env, needs_sandbox

GOOD = {"id": "hello", "kind": "terminal", "instruction": "write hello.txt",
        "checker": {"type": "file_text", "path": "hello.txt", "equals": "hello"},
        "reference": [{"name": "bash", "arguments": {"command": "echo hello > hello.txt"}}],
        "near_miss": [{"name": "bash", "arguments": {"command": "echo hallo > hello.txt"}}]}


def test_save_and_load_roundtrip(tmp_path):
  pkgs = builtin_packages()
  for p in pkgs[:3] + pkgs[-3:]:
    d = save_package(p, str(tmp_path / p.id))
    q = load_package(d)
    assert q.to_dict() == p.to_dict()
  (tmp_path / "single.json").write_text(json.dumps(GOOD))
  assert {p.id for p in load_suite(str(tmp_path))} == {p.id for p in pkgs[:3] + pkgs[-3:]} | {"hello"}


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.pop("instruction"), "missing field 'instruction'"),
    (lambda d: d.update(kind="robot"), "field 'kind'"),
    (lambda d: d.update(checker={"type": "magic"}), "unknown checker type 'magic'"),
    (lambda d: d.update(setup=[{"type": "xlsx", "path": "a.xlsx"}]), "setup[0]: preparer 'xlsx' needs field 'sheets'"),
    (lambda d: d["reference"][0]["arguments"].update(command=""), "reference[0]: bash: 'command'"),
    (lambda d: d.update(extra=1), "unknown fields ['extra']"),
])
def test_bad_packages_name_file_and_field(tmp_path, mutate, needle):
  d = json.loads(json.dumps(GOOD))
  mutate(d)
  path = tmp_path / "task.json"
  path.write_text(json.dumps(d))
  with pytest.raises((PackageError, ValueError)) as e:
    load_package(str(tmp_path))
  assert str(path) in str(e.value) and needle in str(e.value)


def test_invalid_json_names_line(tmp_path):
  (tmp_path / "t.json").write_text('{\n"id": "x",\n oops}')
  with pytest.raises(PackageError, match=r"t\.json:3: invalid JSON"):
    load_package(str(tmp_path / "t.json"))


@needs_sandbox
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mutate,gate", [
    (lambda d: None, None),
    (lambda d: d.update(checker={"type": "file_absent", "path": "hello.txt"}), "initial_zero"),  # accepts the start
    (lambda d: d.update(near_miss=d["reference"]), "near_miss_below_one"),                     # accepts anything
    (lambda d: d.update(reference=d["near_miss"]), "reference_one"),
    (lambda d: d.update(setup=[{"type": "script", "script": "exit 7"}]), "setup"),
    (lambda d: d.update(kind="gui", setup=[{"type": "app", "config": {"kind": "nope"}}]), "setup"),
    (lambda d: d.update(kind="banana"), "schema"),
])
def test_gates(mutate, gate):
  d = json.loads(json.dumps(GOOD))
  mutate(d)
  res = gates.check_package(d, local_env)
  assert res.passed == (gate is None), str(res)
  assert res.gate == gate, str(res)
  if gate:
    assert res.reason


def test_builtin_suite_shape():
  pkgs = builtin_packages()
  kinds = [p.kind for p in pkgs]
  assert len(pkgs) >= 30 and len({p.id for p in pkgs}) == len(pkgs)
  assert min(kinds.count(k) for k in ("terminal", "gui", "hybrid")) >= 5
  assert sum("easy" in p.skills for p in pkgs) >= 5
  for p in pkgs:
    assert p.reference and p.near_miss, p.id
    names = {c["name"] for c in p.reference}
    if p.kind == "gui":
      assert names == {"computer_use"}, p.id   # GUI-only references act on the screen alone
    if p.kind == "terminal":
      assert names <= {"bash", "computer_use"} and not any(
          c["arguments"].get("action") not in (None, "terminate") for c in p.reference), p.id
    if p.kind == "hybrid":
      assert names == {"bash", "computer_use"} or any(s["type"] == "app" for s in p.setup), p.id


@needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_builtin_task_passes_the_gates():
  results, _, _ = builtin_suite_run()   # shared with the scripted eval in test_agent_episode
  assert len(results) == len(builtin_packages())
  failed = [str(r) for r in results if not r.passed]
  assert not failed, "\n".join(failed)
  assert all(r.scores["initial"] == 0 and r.scores["reference"] == 1 and r.scores["near_miss"] < 1 for r in results)
  # no_blind_exploit: every exploit that can touch the checker ran and scored exactly 0
  for r in results:
    ran = {o.name for o in r.exploits if o.skipped is None}
    assert ran and all(o.score == 0.0 and o.error is None for o in r.exploits if o.name in ran), str(r)
    pkg_kind = r.task_id.split("_", 1)[0]
    assert ("click_spray_reading_order" in ran) == (pkg_kind != "term"), str(r)


@needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_builtin_episodes_record_spray_metrics():
  _, episodes, _ = builtin_suite_run()
  by_id = {e.task_id: e for e in episodes if e is not None}
  click = by_id["gui_click_red"]     # one click, then terminate
  assert click.spray == {"shell_output_bytes_per_step": 0.0, "clicks_per_step": 0.5, "click_targets": 1}
  mult = by_id["term_multiply"]      # `echo $((37 * 43))` prints 1591, then terminate
  assert mult.spray == {"shell_output_bytes_per_step": 2.0, "clicks_per_step": 0.0, "click_targets": 0}
  assert mult.records[0]["shell_output_bytes"] == 4 and click.records[0]["clicks"] == 1
