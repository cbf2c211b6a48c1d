"""configs/proof.py's vision tower (issue 36): `config.vision_tower` sets the Mage-ViT's fields in
every stage that builds the model (vision, SFT, RL, eval), so one stage's params load into the
next; the text-only base is left alone, a stage run alone gets the same default, and a field the
tower does not have fails before any stage runs, named."""
from __future__ import annotations

import pytest
from flax import nnx

from configs import proof
from mage_jax.models.config import build_model_config
from mage_jax.runs import curriculum
from mage_jax.train import run_setup

TOWER_STAGES = ("vision", "sft", "eval_sft", "rl", "eval_rl", "eval_init")


def _stages(top):
  return {name: curriculum.stage_config(top, s, "", "/tmp/proof_vt/synth") for name, s in top.stages.items()}


def test_default_depth_is_every_stages_and_a_stage_run_alone_gets_it():
  stages = _stages(proof.get_config())
  assert proof.get_config().vision_tower.num_hidden_layers == proof.VISION_LAYERS
  for name in TOWER_STAGES:
    assert stages[name].model.vision.num_hidden_layers == proof.VISION_LAYERS, name
  for kind in ("vision", "sft", "rl", "eval"):   # configs/proof.py:<stage>, run without the curriculum
    assert proof.get_config(kind).model.vision.num_hidden_layers == proof.VISION_LAYERS, kind


@pytest.mark.parametrize("arg", ["", "smoke"])
def test_one_field_sets_the_tower_of_every_stage_that_builds_it(arg):
  top = proof.get_config(arg)
  top.vision_tower.num_hidden_layers = 3
  top.vision_tower.intermediate_size = 96
  stages = _stages(top)
  for name in TOWER_STAGES:
    vision = stages[name].model.vision
    assert (vision.num_hidden_layers, vision.intermediate_size) == (3, 96), name
  assert "vision" not in stages["base"].model and stages["data"].get("model") is None
  # the built model has the 3 blocks (the config is what the trainer builds from)
  cfg = build_model_config(stages["sft"].model)
  model = nnx.eval_shape(lambda: run_setup.model_factory(cfg)(nnx.Rngs(0)))
  blocks = model.visual.encoder.layers
  assert len(blocks) == 3 and blocks[0].mlp.fc1.kernel.shape[-1] == 96


def test_a_field_the_tower_lacks_is_named_before_any_stage_runs(tmp_path):
  top = proof.get_config("smoke")
  top.vision_tower.num_layers = 4   # the field is num_hidden_layers
  with pytest.raises(run_setup.ConfigError, match=r"config\.vision_tower\.num_layers: not a field of "
                                                  r"the vision tower.*num_hidden_layers"):
    curriculum.check_stages(top, str(tmp_path / "synth"))
