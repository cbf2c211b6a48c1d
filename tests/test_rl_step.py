"""The RL update through the one trainer step (train.step.jit_train_step with
objective=rl_objective) on the tiny Qwen3: packed log-probs match each
sample's own forward, ratio 1 gives loss -mean(A), a few updates move
completion log-probs in the advantage's direction, and grad accumulation equals
the big batch."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

from mage_jax.bench.lm_step import TINY, qwen3_factory
from mage_jax.rl import objective as obj
from mage_jax.rl.batch import RLSample, pack_rl_batch
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import state as state_lib
from mage_jax.train import step as step_lib

ROWS, SEQ = 4, 32
CHUNK = 8           # several loss chunks per row: the chunked head path is exercised
FACTORY = qwen3_factory(TINY)
RL_CFG = obj.RLLossConfig(clip_eps_low=0.2, clip_eps_high=0.28, tis_cap=2.0)


def full_softmax_logps(model, tokens):
  """log_softmax over the whole vocabulary of one unpacked row [1, T] -> [T, V]."""
  n = tokens.shape[1]
  hidden = model(tokens, jnp.arange(n, dtype=jnp.int32)[None], jnp.ones((1, n), jnp.int32))
  return jax.nn.log_softmax(hidden[0] @ model.lm_head_kernel(), axis=-1)


def reference_completion_logps(logps_fn, prompt, completion):
  """log p(completion token k | prefix) from the sample alone in its own row (right-padded
  to SEQ so one compile serves all samples; causal attention keeps the padding invisible)."""
  toks = np.zeros((1, SEQ), np.int32)
  n = len(prompt) + len(completion)
  toks[0, :n] = np.concatenate([prompt, completion])
  logp = np.asarray(logps_fn(jnp.asarray(toks)))
  rows = np.arange(len(prompt) - 1, n - 1)
  return logp[rows, toks[0, rows + 1]]


def make_samples(logps_fn):
  """2 task groups x 2 episodes; rewards [[1, 0], [1, 0]]; rollout log-probs = the policy's."""
  rng = np.random.default_rng(0)
  rewards = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
  adv = np.asarray(obj.group_advantages(jnp.asarray(rewards)))
  samples = []
  for g in range(2):
    prompt = rng.integers(1, TINY.vocab_size, 7 + 3 * g)
    for e in range(2):
      completion = rng.integers(1, TINY.vocab_size, 5 + 2 * e + g)
      logps = reference_completion_logps(logps_fn, prompt, completion)
      samples.append(RLSample(prompt_ids=prompt.tolist(), completion_ids=completion.tolist(),
                              rollout_logprobs=logps.tolist(), advantage=float(adv[g, e]),
                              version=0, task_id=f"task{g}", episode_id=f"ep{g}-{e}"))
  return samples


def setup(lr, accum=1, devices=1):
  mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
  ocfg = opt_lib.OptimizerConfig(learning_rate=lr, warmup_steps=0, total_steps=100,
                                 weight_decay=0.0, clip_norm=0.0)
  abstract_params = state_lib.split_model(nnx.eval_shape(lambda: FACTORY(nnx.Rngs(0))))[1]
  tx = opt_lib.make_optimizer(ocfg, abstract_params)
  graphdef, rest, abstract = state_lib.abstract_state(FACTORY, tx)
  rep = state_lib.replicated(mesh)
  shardings = state_lib.state_shardings(
      tx, abstract, jax.tree_util.tree_map(lambda _: rep, abstract.params), mesh)
  state, rest = state_lib.init_state(FACTORY, tx, seed=0, shardings=shardings)
  return graphdef, rest, tx, mesh, shardings, state


def rl_step(graphdef, rest, tx, mesh, shardings, batch, accum=1):
  cfg = step_lib.StepConfig(grad_accum_steps=accum, loss_chunk_size=CHUNK)
  return step_lib.jit_train_step(graphdef, rest, tx, cfg, mesh, shardings, batch,
                                 objective=obj.rl_objective(RL_CFG, CHUNK))


@pytest.fixture(scope="module")
def packed():
  graphdef, rest, _, _, _, state = setup(1e-2)
  logps_fn = jax.jit(lambda p, toks: full_softmax_logps(state_lib.merge_model(graphdef, p, rest),
                                                         toks))
  samples = make_samples(lambda toks: logps_fn(state.params, toks))
  batch, report = pack_rl_batch(samples, rows=ROWS, seq_len=SEQ, pad_id=0)
  assert report["packed"] == 4 and report["left_out"] == 0
  return samples, batch, report


def completion_logp_sums(logp, batch, report):
  """Per sample: summed logp over its completion targets, in sample order."""
  out = {}
  for r, members in enumerate(report["row_samples"]):
    for seg, i in enumerate(members, start=1):
      sel = (batch["segment_ids"][r] == seg) & (batch["loss_mask"][r] > 0)
      out[i] = float(np.asarray(logp)[r, sel].sum())
  return np.array([out[i] for i in sorted(out)])


def test_ratio_one_gives_minus_mean_advantage(packed):
  samples, batch, report = packed
  graphdef, rest, tx, mesh, shardings, state = setup(1e-2)
  logp_fn = obj.make_logp_fn(graphdef, rest, CHUNK)
  logp_old = np.asarray(logp_fn(state.params, batch))
  # The packed, chunked recomputation equals each sample's own forward (= the rollout log-probs).
  mask = batch["loss_mask"] > 0
  np.testing.assert_allclose(logp_old[mask], batch["logp_rollout"][mask], atol=2e-5)
  assert np.all(logp_old[~mask] == 0)
  batch = dict(batch, logp_old=logp_old)
  step = rl_step(graphdef, rest, tx, mesh, shardings, batch)
  state, m = step(state, batch)
  expected = -(batch["advantages"] * batch["loss_mask"]).sum() / batch["loss_mask"].sum()
  assert abs(expected) > 0.05   # unequal completion lengths: the token mean is not 0
  np.testing.assert_allclose(float(m["loss"]), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(float(m["mean_ratio"]), 1.0, atol=1e-6)
  assert float(m["clip_frac"]) == 0.0 and float(m["tis_trunc_frac"]) == 0.0
  assert abs(float(m["approx_kl"])) < 1e-6
  assert int(m["policy_tokens"]) == int(mask.sum()) == sum(len(s.completion_ids) for s in samples)
  assert int(m["nonfinite"]) == 0 and float(m["grad_norm"]) > 0
  assert int(state.step) == 1


@pytest.mark.slow
def test_updates_move_logprobs_in_the_advantage_direction(packed):
  samples, batch, report = packed
  graphdef, rest, tx, mesh, shardings, state = setup(1e-2)
  logp_fn = obj.make_logp_fn(graphdef, rest, CHUNK)
  step = rl_step(graphdef, rest, tx, mesh, shardings, batch)
  before = completion_logp_sums(logp_fn(state.params, batch), batch, report)
  for _ in range(4):  # the learner's loop: recompute logp_old, then update
    batch = dict(batch, logp_old=np.asarray(logp_fn(state.params, batch)))
    state, m = step(state, batch)
    assert int(m["nonfinite"]) == 0
  after = completion_logp_sums(logp_fn(state.params, batch), batch, report)
  adv = np.array([s.advantage for s in samples])
  assert set(np.sign(adv)) == {-1.0, 1.0}
  delta = after - before
  assert np.all(delta[adv > 0] > 0.5), delta
  assert np.all(delta[adv < 0] < -0.5), delta
  assert step._cache_size() == 1


@pytest.mark.slow
def test_grad_accumulation_equals_one_big_batch(packed):
  _, batch, _ = packed
  graphdef, rest, tx, mesh, shardings, state = setup(1e-2, devices=2)
  logp = np.asarray(obj.make_logp_fn(graphdef, rest, CHUNK)(state.params, batch))
  rng = np.random.default_rng(1)
  mask = batch["loss_mask"]
  # Off-policy enough that both clip sides and the TIS cap are active.
  batch = dict(batch, logp_old=(logp + rng.uniform(-0.5, 0.5, logp.shape) * mask).astype(np.float32),
               logp_rollout=(logp + rng.uniform(-1.0, 1.0, logp.shape) * mask).astype(np.float32))
  # Micro-batches (rows 0,2 and 1,3) train different numbers of tokens: a mean of means would differ.
  assert mask[0::2].sum() != mask[1::2].sum()
  results = []
  for accum in (1, 2):
    graphdef, rest, tx, mesh, shardings, state = setup(1e-2, devices=2)
    cfg = step_lib.StepConfig(grad_accum_steps=accum, loss_chunk_size=CHUNK)
    objective = obj.rl_objective(RL_CFG, CHUNK)
    grads, sums = jax.jit(lambda p, b: step_lib.grads_and_sums(graphdef, cfg, p, rest, b,
                                                               objective))(state.params, batch)
    grads = [np.asarray(g) / float(sums.denominator) for g in jax.tree_util.tree_leaves(grads)]
    _, m = rl_step(graphdef, rest, tx, mesh, shardings, batch, accum)(state, batch)
    results.append((grads, m))
  (g1, m1), (g2, m2) = results
  assert float(m1["clip_frac"]) > 0 and float(m1["tis_trunc_frac"]) > 0
  for k in ("loss", "clip_frac", "tis_trunc_frac", "mean_ratio", "approx_kl", "grad_norm"):
    np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-6, err_msg=k)
  # Gradients, not updated params: Adam's first step is ~lr * sign(g), which turns float
  # rounding on near-zero gradient entries into lr-sized differences.
  for a, b in zip(g2, g1):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_logp_old_from_the_update_forward_equals_the_separate_forward(packed):
  """One optimizer step per batch: logp_old = stop_gradient(the update's own forward) gives
  the loss, metrics and gradient of a separate logp_old forward (also with grad accumulation,
  whose micro-batches see the same params), and ignores batch["logp_old"]."""
  _, batch, _ = packed
  graphdef, rest, tx, mesh, shardings, state = setup(1e-2)
  logp = np.asarray(obj.make_logp_fn(graphdef, rest, CHUNK)(state.params, batch))
  mask = batch["loss_mask"]
  rng = np.random.default_rng(2)
  # Engine log-probs off the learner's, so the TIS weight is not 1 and the cap is hit.
  rollout = (logp + rng.uniform(-1.5, 1.0, logp.shape) * mask).astype(np.float32)
  separate = dict(batch, logp_old=logp, logp_rollout=rollout)
  in_update = dict(separate, logp_old=np.full_like(logp, np.nan))  # must not be read

  compiled = {}

  def grads_metrics(b, accum, in_update_logp):
    objective = obj.rl_objective(RL_CFG, CHUNK, logp_old_in_update=in_update_logp)
    if (accum, in_update_logp) not in compiled:
      cfg = step_lib.StepConfig(grad_accum_steps=accum, loss_chunk_size=CHUNK)
      compiled[accum, in_update_logp] = jax.jit(
          lambda p, bb: step_lib.grads_and_sums(graphdef, cfg, p, rest, bb, objective))
    grads, sums = compiled[accum, in_update_logp](state.params, b)
    den = float(sums.denominator)
    return [np.asarray(g) / den for g in jax.tree_util.tree_leaves(grads)], objective.finalize(sums)

  g_ref, m_ref = grads_metrics(separate, 1, False)
  assert float(m_ref["tis_trunc_frac"]) > 0 and abs(float(m_ref["mean_ratio"]) - 1) < 1e-5
  for accum in (1, 2):
    g, m = grads_metrics(in_update, accum, True)
    for k in ("loss", "clip_frac", "tis_trunc_frac", "mean_ratio", "approx_kl", "policy_tokens"):
      np.testing.assert_allclose(float(m[k]), float(m_ref[k]), rtol=1e-5, atol=1e-6, err_msg=k)
    for a, b in zip(g, g_ref):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  # The comparison can fail: a logp_old that is not the current policy's moves the gradient.
  stale = dict(separate, logp_old=(logp + 0.3 * mask).astype(np.float32))
  g_stale, _ = grads_metrics(stale, 1, False)
  assert max(np.abs(a - b).max() for a, b in zip(g_stale, g_ref)) > 1e-4


@dataclasses.dataclass(frozen=True)
class PoisonedOnPadding:
  """The RL objective, but NaN on a micro-batch without a trained token: a step that computes
  such a micro-batch returns NaN, one that skips it the objective's own figures."""
  inner: obj.RLObjective

  def sums(self, model, batch):
    s = self.inner.sums(model, batch)
    return s._replace(loss=s.loss + jnp.where(jnp.any(batch["loss_mask"] > 0), 0.0, jnp.nan))

  def finalize(self, sums):
    return self.inner.finalize(sums)


def test_micro_batches_of_padding_are_skipped_and_the_rest_add_up_exactly(packed):
  """rl.batch.pack_rl_update fills the first micro-batches and leaves the rest padding; the step
  must give the gradient of the live rows alone, without computing the padding ones."""
  _, batch, _ = packed
  graphdef, rest, _, _, _, state = setup(1e-2)
  logp = np.asarray(obj.make_logp_fn(graphdef, rest, CHUNK)(state.params, batch))
  batch = dict(batch, logp_old=logp, logp_rollout=logp)
  # rows [b0, pad, b1, pad, ...]: with 2 micro-batches (rows j, j+2, ...) micro 0 holds the whole
  # batch and micro 1 only padding, whose tokens are garbage ids
  padded = {k: np.stack([x for row in v for x in (row, np.zeros_like(row))]) for k, v in batch.items()}
  padded["tokens"][1::2] = 7
  objective = PoisonedOnPadding(obj.rl_objective(RL_CFG, CHUNK))
  out = {}
  for accum, b in ((1, batch), (2, padded)):
    cfg = step_lib.StepConfig(grad_accum_steps=accum, loss_chunk_size=CHUNK)
    grads, sums = jax.jit(lambda p, bb: step_lib.grads_and_sums(graphdef, cfg, p, rest, bb, objective)
                          )(state.params, b)
    out[accum] = ([np.asarray(g) for g in jax.tree_util.tree_leaves(grads)], sums)
  (g1, s1), (g2, s2) = out[1], out[2]
  assert np.isfinite(float(s2.loss)), "the padding micro-batch was computed"
  assert float(s2.denominator) == float(s1.denominator) == batch["loss_mask"].sum()
  np.testing.assert_allclose(float(s2.loss), float(s1.loss), rtol=1e-6, atol=1e-7)
  for a, b in zip(g2, g1):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_logp_old_by_micro_batches_is_each_samples_own_forward_in_row_order(packed):
  """rl.epochs_per_update > 1 fills logp_old one micro-batch at a time in train.step's split
  (rows j, j + n, ...): put back in row order it is each sample's own full-softmax forward (the
  rollout log-probs of `packed`), and a micro-batch of padding gives zeros."""
  _, batch, _ = packed
  graphdef, rest, _, _, _, state = setup(1e-2)
  # rows [b0, pad, b1, pad, b2, pad, b3, pad] (the 4 samples fill b0 and b1): with 4
  # micro-batches (rows j, j + 4) micro 0 holds b0, micro 2 holds b1, micros 1 and 3 only padding
  padded = {k: np.stack([x for row in v for x in (row, np.zeros_like(row))]) for k, v in batch.items()}
  padded["tokens"][1::2] = 7
  logp = np.asarray(obj.make_logp_fn(graphdef, rest, CHUNK, micro_batches=4)(state.params, padded))
  assert logp.shape == padded["loss_mask"].shape
  mask = padded["loss_mask"] > 0
  assert mask[0].any() and mask[2].any() and not mask[1::2].any()
  np.testing.assert_allclose(logp[mask], padded["logp_rollout"][mask], atol=2e-5)
  assert np.all(logp[~mask] == 0)
