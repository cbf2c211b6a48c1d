"""Which params a curriculum stage starts from (mage_jax/runs/curriculum.py): the last training stage
before it, also when that stage is disabled in this invocation but finished in the workdir (running
only `rl` after an earlier `sft` once started RL from random init, silently)."""
from __future__ import annotations

import json
import os

import ml_collections

from mage_jax.runs import curriculum
from mage_jax.train import checkpoint as ckpt_lib

STAGE_CONFIG = '''
import ml_collections
def get_config(arg=None):
  c = ml_collections.ConfigDict()
  c.job = "tests.test_curriculum_chain:record_previous"
  return c
'''


def record_previous(cfg, stage_dir, previous, workdir):
  """A step job: the params it was given (`previous`), in its row."""
  del cfg, stage_dir, workdir
  return {"wall_s": 0.0, "row": {"previous": previous}}


def _config(tmp_path, sft_enabled: bool, init_from: str = "") -> ml_collections.ConfigDict:
  path = tmp_path / "stage_config.py"
  path.write_text(STAGE_CONFIG)
  c = ml_collections.ConfigDict()
  c.arg, c.seed, c.init_from = "", 0, init_from
  c.synth = ml_collections.ConfigDict(dict(enabled=False))
  c.shared_dir, c.shared_seed = "", 0
  c.stages = ml_collections.ConfigDict()
  # "sft" is only ever disabled here (a training stage would need a model): what counts is its folder
  for i, (name, enabled) in enumerate((("sft", sft_enabled), ("eval", True))):
    c.stages[name] = ml_collections.ConfigDict(dict(order=i + 1, config=str(path), arg="", enabled=enabled,
                                                    shared=False, overrides=""))
  return c


def _finish(stage_dir) -> None:
  """Mark a training stage's folder finished the way the trainer does (final params + meta)."""
  os.makedirs(ckpt_lib.final_params_dir(stage_dir), exist_ok=True)
  with open(ckpt_lib.final_params_dir(stage_dir) + ".meta.json", "w") as f:
    json.dump({}, f)


def test_a_disabled_but_finished_training_stage_feeds_the_next_stage(tmp_path):
  work = tmp_path / "w"
  _finish(work / "sft")
  (row,) = curriculum.run(_config(tmp_path, sft_enabled=False, init_from="/elsewhere"), str(work))
  assert row["summary"]["previous"] == os.path.abspath(work / "sft")


def test_a_disabled_unfinished_stage_leaves_the_chain_as_it_was(tmp_path):
  work = tmp_path / "w"
  (work / "sft").mkdir(parents=True)   # started, never finished: no final params
  (row,) = curriculum.run(_config(tmp_path, sft_enabled=False, init_from="/elsewhere"), str(work))
  assert row["summary"]["previous"] == "/elsewhere"
  (row,) = curriculum.run(_config(tmp_path, sft_enabled=False), str(tmp_path / "fresh"))
  assert row["summary"]["previous"] == ""
