"""Qwen3 vs a NumPy reference written from DESIGN.md; packing invariance; remat policies."""
import dataclasses

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from mage_jax.models.config import Qwen3Config
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from tests import _qwen3_reference as reference

# GQA (4 q heads, 2 kv heads) and head_dim 16 != hidden 32 / 4 heads.
BASE = Qwen3Config(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, intermediate_size=48, rope_theta=10_000.0,
                   rms_norm_eps=1e-6)


def make_model(cfg: Qwen3Config, seed: int = 0) -> Qwen3ForCausalLM:
  """Random model with non-trivial norm scales (ones would hide a missing norm weight)."""
  model = Qwen3ForCausalLM(cfg, rngs=nnx.Rngs(seed))
  r = np.random.default_rng(seed + 100)
  graphdef, state = nnx.split(model)

  def perturb(path, x):
    name = "/".join(str(getattr(p, "key", p)) for p in path)
    if "norm" in name:
      return x + jnp.asarray(r.normal(scale=0.3, size=x.shape), x.dtype)
    return x * 4.0  # larger weights so attention is not uniform
  state = jax.tree_util.tree_map_with_path(perturb, state)
  return nnx.merge(graphdef, state)


def params_numpy(model) -> dict:
  flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
  return {"/".join(map(str, path)): np.asarray(v[...], np.float64) for path, v in flat}


# ------------------------------------------------------------------ NumPy reference


def numpy_qwen3_logits(p: dict, cfg: Qwen3Config, tokens: np.ndarray) -> np.ndarray:
  """One unpacked sequence [T] -> logits [T, V]: the NumPy forward written from DESIGN.md
  (tests/_qwen3_reference.py) on our params under their HF names and layout."""
  w = {"model.embed_tokens.weight": p["model/embed_tokens/embedding"],
       "model.norm.weight": p["model/norm/scale"]}
  for i in range(cfg.num_hidden_layers):
    ours, hf = f"model/layers/{i}/", f"model.layers.{i}."
    for name in ("self_attn/q_proj", "self_attn/k_proj", "self_attn/v_proj", "self_attn/o_proj",
                 "mlp/gate_proj", "mlp/up_proj", "mlp/down_proj"):
      w[hf + name.replace("/", ".") + ".weight"] = p[ours + name + "/kernel"].T   # [in, out] -> [out, in]
    for name in ("self_attn/q_norm", "self_attn/k_norm", "input_layernorm", "post_attention_layernorm"):
      w[hf + name.replace("/", ".") + ".weight"] = p[ours + name + "/scale"]
  if not cfg.tie_word_embeddings:
    w["lm_head.weight"] = p["lm_head/kernel"].T
  return reference.logits(w, dataclasses.asdict(cfg), tokens)


@jax.jit(static_argnums=0)
def _jit_logits(graphdef, state, tokens, positions, segment_ids):
  model = nnx.merge(graphdef, state)
  return model.logits(model(tokens, positions, segment_ids))


def _forward_logits(model, tokens, positions, segment_ids):
  graphdef, state = nnx.split(model)
  return np.asarray(_jit_logits(graphdef, state, jnp.asarray(tokens), jnp.asarray(positions),
                                jnp.asarray(segment_ids)))


@pytest.mark.parametrize("tied", [False, True])
def test_matches_numpy_reference(tied):
  cfg = dataclasses.replace(BASE, tie_word_embeddings=tied)
  model = make_model(cfg)
  assert (model.lm_head is None) == tied
  tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, 11)
  ours = _forward_logits(model, tokens[None], np.arange(11)[None], np.ones((1, 11), np.int32))[0]
  ref = numpy_qwen3_logits(params_numpy(model), cfg, tokens)
  assert np.abs(ref).max() > 1.0  # non-trivial logits
  np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)
  kernel = np.asarray(model.lm_head_kernel())
  assert kernel.shape == (cfg.hidden_size, cfg.vocab_size)


def test_packing_invariance():
  model = make_model(BASE, seed=3)
  r = np.random.default_rng(2)
  lens = [5, 8, 4]
  total = 20
  tokens = np.full(total, 7, np.int32)
  seg = np.zeros(total, np.int32)
  pos = np.zeros(total, np.int32)
  pieces = []
  start = 0
  for sid, n in enumerate(lens, 1):
    piece = r.integers(0, BASE.vocab_size, n)
    pieces.append(piece)
    tokens[start:start + n] = piece
    seg[start:start + n] = sid
    pos[start:start + n] = np.arange(n)
    start += n
  packed = _forward_logits(model, tokens[None], pos[None], seg[None])[0]
  assert np.isfinite(packed).all()
  # Each sample alone in its own row (right-padded to 8, one compile).
  width = max(lens)
  alone_tok = np.zeros((3, width), np.int32)
  alone_seg = np.zeros((3, width), np.int32)
  for i, piece in enumerate(pieces):
    alone_tok[i, :len(piece)] = piece
    alone_seg[i, :len(piece)] = 1
  alone_pos = np.broadcast_to(np.arange(width), (3, width))
  alone = _forward_logits(model, alone_tok, alone_pos, alone_seg)
  start = 0
  for i, n in enumerate(lens):
    np.testing.assert_allclose(packed[start:start + n], alone[i, :n], atol=1e-5)
    start += n


@pytest.mark.slow
def test_remat_policies_same_outputs_and_grads():
  tokens = jnp.asarray(np.random.default_rng(4).integers(0, BASE.vocab_size, (2, 9)))
  pos = jnp.broadcast_to(jnp.arange(9), (2, 9))
  seg = jnp.ones((2, 9), jnp.int32)
  results = {}
  for policy in ("none", "full", "dots", "dots_no_batch", "save_attn_out"):
    model = make_model(dataclasses.replace(BASE, remat_policy=policy), seed=5)
    graphdef, state = nnx.split(model)

    @jax.jit
    def loss_fn(state):
      m = nnx.merge(graphdef, state)
      return jnp.mean(jnp.square(m.logits(m(tokens, pos, seg))))

    jaxpr = str(jax.make_jaxpr(jax.grad(loss_fn))(state))
    assert ("checkpoint" in jaxpr or "remat" in jaxpr) == (policy != "none"), policy
    loss, grads = jax.value_and_grad(loss_fn)(state)
    results[policy] = (float(loss), jax.tree.leaves(grads))
  base_loss, base_grads = results["none"]
  for policy, (loss, grads) in results.items():
    assert loss == pytest.approx(base_loss, rel=1e-6), policy
    for a, b in zip(grads, base_grads):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-5)


def test_bf16_compute_keeps_fp32_params_and_is_close():
  cfg16 = dataclasses.replace(BASE, compute_dtype="bfloat16")
  m32, m16 = make_model(BASE, seed=6), make_model(cfg16, seed=6)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(m16, nnx.Param)))
  tokens = np.random.default_rng(5).integers(0, BASE.vocab_size, (1, 8))
  args = (tokens, np.arange(8)[None], np.ones((1, 8), np.int32))
  graphdef, state = nnx.split(m16)
  h16 = jax.eval_shape(lambda st, *a: nnx.merge(graphdef, st)(*a), state, *map(jnp.asarray, args))
  assert h16.dtype == jnp.bfloat16
  l32, l16 = _forward_logits(m32, *args), _forward_logits(m16, *args)
  assert np.abs(l32 - l16).max() < 0.1 * np.abs(l32).max()


def test_logical_axes_on_every_param():
  model = make_model(BASE)
  for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    axes = var.get_metadata().get("axes")
    assert axes is not None and len(axes) == var[...].ndim, path
  kernel = model.model.layers[0].self_attn.q_proj.kernel
  assert kernel.get_metadata()["axes"] == ("embed", "q_heads")
