"""Train step: accumulation == big batch with uneven token counts, NaN guard,
sharded jit on the 8-device mesh, and no recompilation over varied batches."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh

from mage_jax.train import optimizer as opt_lib
from mage_jax.train import state as state_lib
from mage_jax.train import step as step_lib

V, D = 64, 16


class ToyLM(nnx.Module):
  """Tiny causal-ish LM (embedding + mixing over previous token + MLP): the
  step only needs __call__(tokens, positions, segment_ids) and lm_head_kernel()."""

  def __init__(self, rngs: nnx.Rngs, vocab: int = V, dim: int = D):
    init = jax.nn.initializers.normal(0.5)
    self.embed = nnx.Param(init(rngs.params(), (vocab, dim)))
    self.mix = nnx.Param(init(rngs.params(), (dim, dim)))
    self.head = nnx.Param(init(rngs.params(), (dim, vocab)))

  def __call__(self, tokens, positions, segment_ids):
    x = self.embed[...][tokens]
    prev = jnp.where((positions > 0)[..., None], jnp.roll(x, 1, axis=1), 0.0)
    return jnp.tanh(x + prev @ self.mix[...])

  def lm_head_kernel(self):
    return self.head[...]


def _batch(seed, b=4, t=32):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, V, size=(b, t)).astype(np.int32)
  segs = np.zeros((b, t), np.int32)
  positions = np.zeros((b, t), np.int32)
  mask = np.zeros((b, t), np.float32)
  # Very uneven trained-token counts per row (and thus per micro-batch).
  lengths = [(3, 5), (30,), (12, 2, 9), (20,)]
  for r, segs_len in enumerate(lengths):
    start = 0
    for s, n in enumerate(segs_len):
      segs[r, start:start + n] = s + 1
      positions[r, start:start + n] = np.arange(n)
      mask[r, start:start + n - 1] = rng.random(n - 1) < (0.9 if r % 2 else 0.2)
      start += n
  targets = np.where(segs > 0, np.roll(tokens, -1, axis=1), 0).astype(np.int32)
  return {"tokens": tokens, "targets": targets, "loss_mask": mask, "segment_ids": segs,
          "positions": positions}


def _setup(accum, per_sequence=False, mesh=None, **toy):
  ocfg = opt_lib.OptimizerConfig(learning_rate=1e-2, warmup_steps=0, total_steps=10,
                                 clip_norm=0.0, weight_decay=0.0)
  model = ToyLM(nnx.Rngs(0), **toy)
  graphdef, params, rest = state_lib.split_model(model)
  tx = opt_lib.make_optimizer(ocfg, params)
  state = state_lib._fresh(params, tx, jnp.zeros((2,), jnp.uint32))
  cfg = step_lib.StepConfig(grad_accum_steps=accum, loss_chunk_size=8,
                            per_sequence_loss=per_sequence)
  return graphdef, rest, tx, cfg, state


@pytest.mark.parametrize("per_sequence", [False, True])
def test_accumulation_equals_big_batch(per_sequence):
  batch = _batch(0)
  results = {}
  for accum in (1, 2, 4):
    graphdef, rest, tx, cfg, state = _setup(accum, per_sequence)
    fn = jax.jit(lambda s, b: step_lib.train_step(graphdef, rest, tx, cfg, s, b))
    new_state, m = fn(state, batch)
    results[accum] = (jax.tree_util.tree_leaves(new_state.params), m)
  p1, m1 = results[1]
  for accum in (2, 4):
    p, m = results[accum]
    np.testing.assert_allclose(m["loss"], m1["loss"], rtol=1e-6)
    np.testing.assert_allclose(m["grad_norm"], m1["grad_norm"], rtol=1e-5)
    for a, b in zip(p, p1):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  # The micro-batches really are uneven: the mean of micro-batch means differs.
  graphdef, rest, tx, cfg, state = _setup(1, per_sequence)
  micro = step_lib.split_micro(batch, 2)
  one = jax.jit(lambda s, b: step_lib.train_step(graphdef, rest, tx, cfg, s, b)[1]["loss"])
  means = [float(one(state, jax.tree_util.tree_map(lambda x: x[j], micro))) for j in range(2)]
  assert abs(np.mean(means) - float(m1["loss"])) > 1e-4  # >> the 1e-6 tolerance


def test_nonfinite_update_is_skipped_and_counted():
  graphdef, rest, tx, cfg, state = _setup(1)
  bad = jax.tree_util.tree_map_with_path(
      lambda p, x: x.at[0, 0].set(jnp.nan) if "head" in opt_lib.path_str(p) else x, state.params)
  state = state.replace(params=bad)
  new_state, m = jax.jit(lambda s, b: step_lib.train_step(graphdef, rest, tx, cfg, s, b))(
      state, _batch(1))
  assert int(m["nonfinite"]) == 1 and int(new_state.nonfinite_steps) == 1
  for a, b in zip(jax.tree_util.tree_leaves(new_state.params), jax.tree_util.tree_leaves(bad)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert int(new_state.step) == 1


def test_a_skipped_step_leaves_params_and_a_finite_optimizer_state():
  graphdef, rest, tx, cfg, state = _setup(1)
  fn = jax.jit(lambda s, b: step_lib.train_step(graphdef, rest, tx, cfg, s, b))
  state, m = fn(state, _batch(1))   # a real step first: non-zero Adam moments
  assert int(m["nonfinite"]) == 0
  nan_batch = dict(_batch(2), loss_mask=np.full((4, 32), np.nan, np.float32))
  skipped, m = fn(state, nan_batch)
  assert int(m["nonfinite"]) == 1 and float(m["update_norm"]) == 0.0
  for a, b in zip(jax.tree_util.tree_leaves(skipped.params), jax.tree_util.tree_leaves(state.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(skipped.opt_state))
  after, m = fn(skipped, _batch(3))   # and training goes on
  assert int(m["nonfinite"]) == 0 and int(after.nonfinite_steps) == 1
  moved = [np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in
           zip(jax.tree_util.tree_leaves(after.params), jax.tree_util.tree_leaves(skipped.params))]
  assert min(moved) > 0


def test_nonfinite_guard_adds_no_temporaries():
  """XLA's own buffer accounting of the compiled, donated step: the guarded update needs no
  more temporaries than an unguarded one. (On this toy model a lax.cond guard happens to
  cost nothing either; on an 18M-parameter Qwen3 it cost 1.37x the parameter bytes:
  BENCHMARKS.md, measured with the same memory_analysis.)"""
  graphdef, rest, tx, cfg, state = _setup(1, vocab=4096, dim=128)
  batch = {k: jnp.asarray(v) % 4096 if k == "tokens" else jnp.asarray(v)
           for k, v in _batch(0).items()}
  param_bytes = sum(x.size * 4 for x in jax.tree_util.tree_leaves(state.params))

  def unguarded(s, b):
    grads, sums = step_lib.grads_and_sums(graphdef, cfg, s.params, rest, b)
    grads = jax.tree_util.tree_map(lambda g: g / jnp.maximum(sums.denominator, 1.0), grads)
    updates, opt = tx.update(grads, s.opt_state, s.params)
    return s.replace(params=optax.apply_updates(s.params, updates), opt_state=opt), sums.loss

  def temp_bytes(fn):
    compiled = jax.jit(fn, donate_argnums=0).lower(state, batch).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  ours = temp_bytes(lambda s, b: step_lib.train_step(graphdef, rest, tx, cfg, s, b))
  plain = temp_bytes(unguarded)
  assert ours <= plain + 0.05 * param_bytes, (ours, plain, param_bytes)


def test_sharded_jit_trains_without_recompiling():
  devices = np.array(jax.devices()[:8]).reshape(2, 4)
  mesh = Mesh(devices, ("data", "fsdp"))
  graphdef, rest, tx, cfg, state = _setup(2)
  rep = state_lib.replicated(mesh)
  param_sh = jax.tree_util.tree_map(lambda _: rep, state.params)
  abstract = jax.eval_shape(lambda: state)
  shardings = state_lib.state_shardings(tx, abstract, param_sh, mesh)
  state = jax.device_put(state, shardings)
  batch0 = _batch(0, b=8)
  fn = step_lib.jit_train_step(graphdef, rest, tx, cfg, mesh, shardings, batch0)
  losses = []
  for i in range(20):
    # Different packings each step (same shapes): must reuse the one executable.
    batch = _batch(i % 3, b=8)
    state, m = fn(state, batch)
    losses.append(float(m["loss"]))
  assert fn._cache_size() == 1
  assert int(state.step) == 20
  assert np.mean(losses[-3:]) < np.mean(losses[:3])
  # Batch really is split over the 8 devices.
  sh = step_lib.batch_shardings(mesh, batch0)["tokens"]
  assert sh.shard_shape((8, 32)) == (1, 32)


def test_frozen_tower_state_shardings_follow_params():
  """Frozen groups (MaskedNode in the optimizer state) and Adam moments on a real model."""
  from configs import stage3_code_sft
  from mage_jax.train import loop
  c = stage3_code_sft.get_config("tiny")
  c.data.batch_size = 8
  t = loop.build(c, "/tmp/mage_test_build", prepare_data=False)
  specs = {opt_lib.path_str(p): s.spec
           for p, s in jax.tree_util.tree_flatten_with_path(t.shardings.opt_state)[0]}
  mu = [v for k, v in specs.items() if k.endswith("mu/language_model/embed_tokens/embedding/value")]
  assert mu and mu[0] != jax.sharding.PartitionSpec()
  assert not any("visual" in k for k in specs)  # frozen: no Adam moments for the ViT
