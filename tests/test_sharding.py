"""Mesh construction, rules table, sharded == single-device forward/backward, 24-GPU memory report."""
import math

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from configs import models
from mage_jax import sharding
from mage_jax.models.config import Qwen3Config
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM

CFG = Qwen3Config(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=128, rope_theta=10_000.0)


def test_make_mesh_fills_and_validates():
  mesh = sharding.make_mesh({"data": 2, "fsdp": -1, "tensor": 2})
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
  mesh = sharding.make_mesh({"fsdp": -1, "sequence": 2})
  assert dict(mesh.shape) == {"data": 1, "fsdp": 4, "sequence": 2, "tensor": 1}
  with pytest.raises(ValueError, match="needs 12 devices"):
    sharding.make_mesh({"data": 3, "fsdp": 4})
  with pytest.raises(ValueError, match="at most one axis"):
    sharding.make_mesh({"data": -1, "fsdp": -1})


def test_logical_to_spec_and_errors():
  names = ("data", "fsdp", "tensor")
  assert sharding.logical_to_spec(("embed", "mlp"), mesh_axis_names=names) == P("fsdp", "tensor")
  assert sharding.logical_to_spec(("act_batch", "act_seq", "act_embed"),
                                  mesh_axis_names=names) == P(("data", "fsdp"), None, None)
  with pytest.raises(ValueError, match=r"layer/w: logical axes \('mlp', 'q_heads'\) map mesh axis 'tensor' twice"):
    sharding.logical_to_spec(("mlp", "q_heads"), name="layer/w")
  with pytest.raises(ValueError, match="'nonsense'"):
    sharding.logical_to_spec(("nonsense",))


def test_collision_in_a_model_names_the_param():
  model = nnx.eval_shape(lambda: Qwen3ForCausalLM(CFG, rngs=nnx.Rngs(0)))
  state = nnx.state(model)
  kernel = state["model"]["layers"][0]["mlp"]["up_proj"]["kernel"]
  state["model"]["layers"][0]["mlp"]["up_proj"]["kernel"] = kernel.replace(
      kernel.get_value(), axes=("mlp", "vocab"))
  with pytest.raises(ValueError, match=r"model/layers/0/mlp/up_proj/kernel.*'tensor' twice"):
    sharding.param_shardings(state, sharding.make_mesh({"fsdp": 4, "tensor": 2}))


def _batch(b=8, t=12):
  r = np.random.default_rng(0)
  tokens = r.integers(0, CFG.vocab_size, (b, t)).astype(np.int32)
  seg = np.ones((b, t), np.int32)
  seg[::2, 7:] = 2  # two packed segments in even rows
  seg[1::4, 10:] = 0  # padding
  pos = np.where(seg == 2, np.arange(t) - 7, np.arange(t)).astype(np.int32)
  return tokens, pos, seg


def _loss_fn(graphdef):
  def loss(state, tokens, pos, seg):
    m = nnx.merge(graphdef, state)
    logits = m.logits(m(tokens, pos, seg))
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - logits[..., 0])
  return loss


@pytest.mark.parametrize("mesh_cfg", [{"fsdp": 8}, {"data": 2, "fsdp": 2, "tensor": 2}])
def test_sharded_forward_backward_matches_single_device(mesh_cfg):
  model = Qwen3ForCausalLM(CFG, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  batch = _batch()
  loss = _loss_fn(graphdef)
  ref_loss, ref_grads = jax.jit(jax.value_and_grad(loss))(state, *batch)

  mesh = sharding.make_mesh(mesh_cfg)
  state_sh = sharding.param_shardings(state, mesh)
  batch_sh = NamedSharding(mesh, P(("data", "fsdp")))
  step = jax.jit(jax.value_and_grad(loss), in_shardings=(state_sh, batch_sh, batch_sh, batch_sh),
                 out_shardings=(NamedSharding(mesh, P()), state_sh))
  with jax.set_mesh(mesh):  # activates the model's activation constraints
    sharded_state = jax.device_put(state, state_sh)
    got_loss, got_grads = step(sharded_state, *batch)
  q_kernel = sharded_state["model"]["layers"][0]["self_attn"]["q_proj"]["kernel"]
  assert q_kernel.get_value().sharding.spec == P("fsdp", "tensor")  # tensor may be size 1
  assert len(q_kernel.get_value().sharding.device_set) == 8
  np.testing.assert_allclose(float(got_loss), float(ref_loss), rtol=1e-6, atol=1e-6)
  for a, b in zip(jax.tree.leaves(got_grads), jax.tree.leaves(ref_grads)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_mage_vl_tiny_params_all_have_shardings():
  cfg = models.build_model_config(models.get_config("mage_vl_tiny"))
  model = nnx.eval_shape(lambda: MageVL(cfg, rngs=nnx.Rngs(0)))
  specs = sharding.param_shardings(nnx.state(model), sharding.make_mesh({"fsdp": 4, "tensor": 2}))
  leaves = jax.tree.leaves(specs)
  assert leaves and all(isinstance(s, NamedSharding) for s in leaves)


def test_mage_vl_4b_report_on_24_gpus():
  cfg = models.build_model_config(models.get_config("mage_vl_4b"))
  model = nnx.eval_shape(lambda: MageVL(cfg, rngs=nnx.Rngs(0)))
  state = nnx.state(model, nnx.Param)
  mesh = sharding.abstract_mesh(data=3, fsdp=8)
  report = sharding.memory_report(state, mesh)
  n = sum(math.prod(x.shape) for x in jax.tree.leaves(state))
  assert report["params"] == n and report["devices"] == 24
  # Every matrix is split 8 ways over fsdp; only norm vectors are replicated.
  assert n * 4 / 8 <= report["param_bytes_per_device"] < n * 4 / 8 * 1.001
  assert report["adam_bytes_per_device"] == pytest.approx(2 * report["param_bytes_per_device"])
  text = sharding.format_memory_report(report)
  assert "24 devices" in text and "GiB" in text
