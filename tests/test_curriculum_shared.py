"""Shared curriculum stages (mage_jax/runs/curriculum.py): a seed-independent stage runs once at
shared_seed under shared_dir, every seed's run links it, and a change of its config or inputs
makes another one."""
from __future__ import annotations

import json
import os

import ml_collections

from mage_jax.runs import curriculum

STAGE_CONFIG = '''
import ml_collections
def get_config(arg=None):
  c = ml_collections.ConfigDict()
  c.job = "tests.test_curriculum_shared:record"
  c.seed = -1
  c.note = "first"
  c.input = ""
  return c
'''


def record(cfg, stage_dir, previous, workdir):
  """A step job: appends this run's seed and workdir to <stage_dir>/runs.jsonl."""
  del previous
  with open(os.path.join(stage_dir, "runs.jsonl"), "a") as f:
    f.write(json.dumps({"seed": cfg.seed, "workdir": workdir}) + "\n")
  return {"wall_s": 0.0, "row": {"seed": cfg.seed}}


def _config(tmp_path, seed, shared_dir, **overrides):
  path = tmp_path / "stage_config.py"
  path.write_text(STAGE_CONFIG)
  c = ml_collections.ConfigDict()
  c.arg, c.seed, c.init_from = "", seed, ""
  c.synth = ml_collections.ConfigDict(dict(enabled=False))
  c.shared_dir, c.shared_seed = shared_dir, 7
  c.stages = ml_collections.ConfigDict()
  for i, name in enumerate(("data", "train")):
    c.stages[name] = ml_collections.ConfigDict(dict(
        order=i + 1, config=str(path), arg="", enabled=True, shared=name == "data",
        overrides=overrides.get(name, "")))
  return c


def _runs(stage_dir):
  with open(os.path.join(stage_dir, "runs.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_a_shared_stage_runs_once_for_every_seed(tmp_path):
  shared = str(tmp_path / "shared")
  for seed in (0, 1, 2):
    rows = curriculum.run(_config(tmp_path, seed, shared), str(tmp_path / f"s{seed}"))
    assert [r["summary"]["seed"] for r in rows] == [7, seed]   # the shared stage at shared_seed
  # one shared folder, run once (by seed 0), linked from every run; the other stage is per run
  (folder,) = os.listdir(shared)
  assert folder.startswith("data-")
  assert _runs(os.path.join(shared, folder)) == [{"seed": 7, "workdir": str(tmp_path / "s0")}]
  for seed in (0, 1, 2):
    link = tmp_path / f"s{seed}" / "data"
    assert link.is_symlink() and os.path.realpath(link) == os.path.join(shared, folder)
    assert not (tmp_path / f"s{seed}" / "train").is_symlink()
    assert _runs(tmp_path / f"s{seed}" / "train") == [{"seed": seed, "workdir": str(tmp_path / f"s{seed}")}]


def test_another_config_or_input_is_another_shared_stage(tmp_path):
  shared = str(tmp_path / "shared")
  curriculum.run(_config(tmp_path, 0, shared), str(tmp_path / "a"))
  curriculum.run(_config(tmp_path, 0, shared, data="note=second"), str(tmp_path / "b"))
  assert len(os.listdir(shared)) == 2
  # an input path counts by its content's real place: two targets, two stages
  for target in ("x", "y"):
    (tmp_path / target).mkdir()
    link = tmp_path / "input"
    if link.is_symlink():
      link.unlink()
    link.symlink_to(tmp_path / target)
    curriculum.run(_config(tmp_path, 0, shared, data=f"input={link}"), str(tmp_path / f"c{target}"))
  assert len(os.listdir(shared)) == 4


def test_without_shared_dir_every_stage_is_the_runs_own(tmp_path):
  rows = curriculum.run(_config(tmp_path, 3, ""), str(tmp_path / "w"))
  assert [r["summary"]["seed"] for r in rows] == [3, 3]
  assert not (tmp_path / "w" / "data").is_symlink()
  # a run that already has a real folder there keeps it (made before sharing was turned on)
  rows = curriculum.run(_config(tmp_path, 3, str(tmp_path / "shared")), str(tmp_path / "w"))
  assert not (tmp_path / "w" / "data").is_symlink() and not (tmp_path / "shared").exists()
  assert len(_runs(tmp_path / "w" / "data")) == 1
