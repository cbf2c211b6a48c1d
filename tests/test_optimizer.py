"""Optimizer vs a NumPy AdamW written from its definition (warmup+cosine, clip, groups)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mage_jax.train import optimizer as opt_lib


def _np_lr(step, peak, warmup, total, end_ratio):
  if step < warmup:
    return peak * step / warmup
  frac = min((step - warmup) / (total - warmup), 1.0)
  end = peak * end_ratio
  return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * frac))


def _np_adamw(params, grads_seq, cfg, mults, frozen):
  """params: dict name -> array. Returns params after applying all grads."""
  p = {k: v.astype(np.float64).copy() for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v = {k: np.zeros_like(x) for k, x in p.items()}
  for t, grads in enumerate(grads_seq):
    g = {k: (np.zeros_like(x) if k in frozen else x.astype(np.float64)) for k, x in grads.items()}
    norm = math.sqrt(sum((x ** 2).sum() for x in g.values()))
    scale = min(1.0, cfg.clip_norm / norm) if norm > 0 else 1.0
    for k in p:
      if k in frozen:
        continue
      gk = g[k] * scale
      m[k] = cfg.b1 * m[k] + (1 - cfg.b1) * gk
      v[k] = cfg.b2 * v[k] + (1 - cfg.b2) * gk ** 2
      mh = m[k] / (1 - cfg.b1 ** (t + 1))
      vh = v[k] / (1 - cfg.b2 ** (t + 1))
      lr = _np_lr(t, cfg.learning_rate * mults.get(k, 1.0), cfg.warmup_steps,
                  cfg.total_steps, cfg.end_lr_ratio)
      upd = mh / (np.sqrt(vh) + cfg.eps)
      if p[k].ndim >= 2:
        upd = upd + cfg.weight_decay * p[k]
      p[k] = p[k] - lr * upd
  return p


def test_matches_numpy_reference_with_groups():
  rng = np.random.default_rng(0)
  params = {
      "language_model": {"layers": {"0": {"kernel": rng.normal(size=(4, 3)).astype(np.float32),
                                          "scale": np.ones(3, np.float32)}}},
      "lm_head": {"kernel": rng.normal(size=(3, 5)).astype(np.float32)},
      "visual": {"fc": {"kernel": rng.normal(size=(2, 2)).astype(np.float32)}},
  }
  flat_names = {"language_model/layers/0/kernel": ("language_model", "layers", "0", "kernel"),
                "language_model/layers/0/scale": ("language_model", "layers", "0", "scale"),
                "lm_head/kernel": ("lm_head", "kernel"), "visual/fc/kernel": ("visual", "fc", "kernel")}

  def get(tree, path):
    for k in path:
      tree = tree[k]
    return tree

  cfg = opt_lib.OptimizerConfig(learning_rate=1e-2, warmup_steps=3, total_steps=10,
                                end_lr_ratio=0.1, weight_decay=0.1, clip_norm=0.5,
                                lr_multipliers={"lm_head": 3.0}, freeze=("visual",))
  tx = opt_lib.make_optimizer(cfg, params)
  state = tx.init(jax.tree_util.tree_map(jnp.asarray, params))
  jp = jax.tree_util.tree_map(jnp.asarray, params)
  grads_seq = []
  for _ in range(8):
    g = jax.tree_util.tree_map(lambda x: rng.normal(size=x.shape).astype(np.float32), params)
    grads_seq.append(g)
    upd, state = tx.update(jax.tree_util.tree_map(jnp.asarray, g), state, jp)
    jp = optax.apply_updates(jp, upd)
  want = _np_adamw({n: get(params, p) for n, p in flat_names.items()},
                   [{n: get(g, p) for n, p in flat_names.items()} for g in grads_seq],
                   cfg, {"lm_head/kernel": 3.0}, {"visual/fc/kernel"})
  for n, p in flat_names.items():
    np.testing.assert_allclose(np.asarray(get(jp, p)), want[n], rtol=2e-5, atol=1e-6, err_msg=n)
  # Frozen params are bit-identical.
  np.testing.assert_array_equal(np.asarray(jp["visual"]["fc"]["kernel"]), params["visual"]["fc"]["kernel"])


def test_labels_longest_prefix_and_boundaries():
  cfg = opt_lib.OptimizerConfig(lr_multipliers={"visual": 0.1, "visual/merger": 2.0},
                                freeze=("visual/encoder",))
  assert opt_lib.label_for("visual/merger/fc1/kernel", cfg) == "lr=2.0"
  assert opt_lib.label_for("visual/encoder/layers/0/qkv/kernel", cfg) == opt_lib.FROZEN
  assert opt_lib.label_for("visual/embeddings/x", cfg) == "lr=0.1"
  assert opt_lib.label_for("visualx/kernel", cfg) == "lr=1.0"  # not a component prefix


def test_from_config_rejects_unknown_field():
  with pytest.raises(ValueError, match="learning_rat"):
    opt_lib.OptimizerConfig.from_config({"learning_rat": 1.0}, total_steps=5)


def test_a_freeze_or_multiplier_prefix_that_names_no_parameter_is_an_error():
  params = {"language_model": {"embed_tokens": {"embedding": np.zeros((4, 2), np.float32)}},
            "visual": {"fc": {"kernel": np.zeros((2, 2), np.float32)}}}
  opt_lib.make_optimizer(opt_lib.OptimizerConfig(freeze=("language_model/embed_tokens",)), params)
  with pytest.raises(ValueError, match=r"optimizer.freeze prefix 'language_model/embed' names no parameter"):
    opt_lib.make_optimizer(opt_lib.OptimizerConfig(freeze=("language_model/embed",)), params)
  with pytest.raises(ValueError, match=r"optimizer.lr_multipliers prefix 'vision' names no parameter"):
    opt_lib.make_optimizer(opt_lib.OptimizerConfig(lr_multipliers={"vision": 0.1}), params)
