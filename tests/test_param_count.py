"""Full-size parameter counts from abstract init (nnx.eval_shape: nothing allocated)."""
import dataclasses
import math

import jax
import pytest
from flax import nnx

from configs import models
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM


def count(tree) -> int:
  leaves = jax.tree.leaves(tree)
  assert all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)  # abstract: nothing allocated
  return sum(math.prod(x.shape) for x in leaves)


@pytest.fixture(scope="module")
def mage_vl_4b():
  cfg = models.build_model_config(models.get_config("mage_vl_4b"))
  return nnx.eval_shape(lambda: MageVL(cfg, rngs=nnx.Rngs(0)))


def test_mage_vl_4b_counts(mage_vl_4b):
  params = nnx.state(mage_vl_4b, nnx.Param)
  total = count(params)
  lm = count(params["language_model"])
  head = count(params["lm_head"])
  vision = count(params["visual"])
  assert total == lm + head + vision
  assert abs(total / 4.74e9 - 1) < 0.005, total
  assert abs(lm / 4.02e9 - 1) < 0.005, lm
  assert abs(head / 0.39e9 - 1) < 0.005, head     # 2560 x 151936 untied head
  assert abs(vision / 0.33e9 - 1) < 0.02, vision  # "0.33B" in DESIGN.md has 2 digits


@pytest.mark.parametrize("tied, expected", [(True, 4.02e9), (False, 4.41e9)])
def test_qwen3_4b_counts(tied, expected):
  cfg = models.build_model_config(models.get_config("qwen3_4b"))
  cfg = dataclasses.replace(cfg, tie_word_embeddings=tied)
  model = nnx.eval_shape(lambda: Qwen3ForCausalLM(cfg, rngs=nnx.Rngs(0)))
  n = count(nnx.state(model, nnx.Param))
  assert abs(n / expected - 1) < 0.005, n
  assert (model.lm_head is None) == tied
