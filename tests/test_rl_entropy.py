"""The RL loss's entropy term (rl.entropy_coeff, docs/rl.md): the chunked head's per-token entropy
against NumPy's -sum p log p (also on a compact vocabulary, against the expanded full vocabulary),
the loss term and its gradient against a reference written from the formula, a few steps of
minimisation that sharpen a toy policy without changing its mode, and the loop's handling."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.rl import objective as obj
from mage_jax.train import loss as loss_lib


def np_entropy(logits):
  z = logits - logits.max(-1, keepdims=True)
  logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  return -(np.exp(logp) * logp).sum(-1)


def _inputs(seed=0, b=2, t=20, d=16, v=50):
  rng = np.random.default_rng(seed)
  hidden = rng.normal(size=(b, t, d)).astype(np.float32)
  kernel = (rng.normal(size=(d, v)) * rng.uniform(0.1, 1.5, size=(1, v))).astype(np.float32)
  targets = rng.integers(0, v, (b, t))
  mask = (rng.random((b, t)) < 0.6).astype(np.int32)
  return hidden, kernel, targets, mask


@pytest.mark.parametrize("chunk", [64, 8, 3])   # one chunk; chunks with masked reordering and skips
def test_token_entropy_matches_numpy(chunk):
  hidden, kernel, targets, mask = _inputs()
  stats = loss_lib.token_stats(jnp.asarray(hidden), jnp.asarray(kernel), jnp.asarray(targets),
                               chunk_size=chunk, mask=jnp.asarray(mask), with_entropy=True)
  want = np.where(mask > 0, np_entropy(hidden.astype(np.float64) @ kernel), 0.0)
  np.testing.assert_allclose(np.asarray(stats.entropy), want, rtol=1e-4, atol=1e-5)
  assert np.all(np.asarray(stats.entropy)[mask == 0] == 0)
  # without the flag the field is absent and the other stats are unchanged
  plain = loss_lib.token_stats(jnp.asarray(hidden), jnp.asarray(kernel), jnp.asarray(targets),
                               chunk_size=chunk, mask=jnp.asarray(mask))
  assert plain.entropy is None
  np.testing.assert_allclose(np.asarray(plain.nll), np.asarray(stats.nll), rtol=1e-6)


def test_compact_vocabulary_entropy_is_the_full_vocabularys():
  """A compact head's rest row (bias log n) stands for n left-out ids with equal logits: the
  entropy reported is the expanded full distribution's, not the compact one's."""
  full = 300
  vocab = CompactVocab.from_token_ids(np.sort(np.random.default_rng(1).choice(full, 40, replace=False)), full)
  rng = np.random.default_rng(2)
  hidden = rng.normal(size=(2, 9, 16)).astype(np.float32)
  kernel = rng.normal(size=(16, vocab.size)).astype(np.float32)
  kernel[:, vocab.rest_row] += 1.0            # give the rest row real mass
  bias = np.zeros(vocab.size, np.float32)
  bias[vocab.rest_row] = vocab.rest_logit()
  targets = rng.integers(0, vocab.size, (2, 9))
  got = loss_lib.token_stats(jnp.asarray(hidden), jnp.asarray(kernel), jnp.asarray(targets),
                             bias=jnp.asarray(bias), with_entropy=True).entropy
  full_logits = hidden.astype(np.float64) @ kernel[:, vocab.table]     # [2, 9, 300]
  np.testing.assert_allclose(np.asarray(got), np_entropy(full_logits), rtol=1e-4, atol=1e-5)
  compact_only = np_entropy(hidden.astype(np.float64) @ kernel + bias)
  assert np.max(np_entropy(full_logits) - compact_only) > 0.5     # the difference is real


def test_loss_term_and_its_gradient_match_the_formula():
  rng = np.random.default_rng(3)
  shape = (3, 7)
  new = rng.normal(-1.0, 0.3, shape).astype(np.float32)
  old = (new + rng.normal(0, 0.2, shape)).astype(np.float32)
  rollout = (old + rng.normal(0, 0.2, shape)).astype(np.float32)
  adv = rng.normal(size=shape).astype(np.float32)
  mask = (rng.random(shape) < 0.7).astype(np.float32)
  ent = rng.uniform(0, 2, shape).astype(np.float32)
  ent_bad = np.where(mask > 0, ent, np.nan).astype(np.float32)    # garbage off the policy tokens
  base_cfg = obj.RLLossConfig()
  base = obj.rl_finalize(obj.grpo_sums(*map(jnp.asarray, (new, old, rollout, adv, mask)), base_cfg))
  n = mask.sum()
  for c in (-0.3, 0.0, 0.5):
    cfg = obj.RLLossConfig(entropy_coeff=c)

    def loss(e):
      return obj.rl_finalize(obj.grpo_sums(*map(jnp.asarray, (new, old, rollout, adv, mask)), cfg, e))["loss"]
    got, grad = jax.value_and_grad(loss)(jnp.asarray(ent_bad))
    want = float(base["loss"]) - c * (ent * mask).sum() / n
    np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), np.where(mask > 0, -c / n, 0.0), rtol=1e-5, atol=1e-7)
    metrics = obj.rl_finalize(obj.grpo_sums(*map(jnp.asarray, (new, old, rollout, adv, mask)), cfg,
                                            jnp.asarray(ent_bad)))
    np.testing.assert_allclose(float(metrics["entropy"]), (ent * mask).sum() / n, rtol=1e-5)
  with pytest.raises(ValueError, match="entropy_coeff"):
    obj.grpo_sums(*map(jnp.asarray, (new, old, rollout, adv, mask)), obj.RLLossConfig(entropy_coeff=-0.1))


def _policy_tokens(seed, shape, ent_max):
  """Random surrogate inputs (log-probs, advantages), an all-ones mask and entropy weight, and
  per-token entropies in [0, ent_max), as numpy arrays."""
  rng = np.random.default_rng(seed)
  new = rng.normal(-1.0, 0.3, shape).astype(np.float32)
  adv = rng.normal(size=shape).astype(np.float32)
  ent = rng.uniform(0, ent_max, shape).astype(np.float32)
  return new, new + 0.1, new - 0.1, adv, np.ones(shape, np.float32), ent, np.ones(shape, np.float32)


def _check_entropy_term(inputs, cfg, ent, weight, live_w):
  """The loss is GRPO's plus -c * sum(H * live_w) / n, its gradient in H is -c * live_w / n, and
  the entropy metric averages H over every policy token whatever the weights."""
  mask = inputs[-1]
  args = tuple(map(jnp.asarray, inputs))
  base = float(obj.rl_finalize(obj.grpo_sums(*args, obj.RLLossConfig()))["loss"])

  def loss(e):
    return obj.rl_finalize(obj.grpo_sums(*args, cfg, e, jnp.asarray(weight)))["loss"]
  got, grad = jax.value_and_grad(loss)(jnp.asarray(ent))
  n, c = mask.sum(), cfg.entropy_coeff
  np.testing.assert_allclose(float(got), base - c * (ent * live_w).sum() / n, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(grad), -c * live_w / n, rtol=1e-5, atol=1e-7)
  metrics = obj.rl_finalize(obj.grpo_sums(*args, cfg, jnp.asarray(ent), jnp.asarray(weight)))
  np.testing.assert_allclose(float(metrics["entropy"]), (ent * mask).sum() / n, rtol=1e-5)
  return metrics


def test_entropy_weight_scales_the_term_per_token_and_not_the_metric():
  """e = 0 on a token (an unparsable call's): the term neither adds to the loss nor sends a gradient
  there; the entropy metric still averages every policy token; the surrogate is untouched."""
  new, old, rollout, adv, mask, ent, weight = _policy_tokens(5, (2, 6), 2.0)
  mask[1, 4:] = 0
  weight[0, 2:5] = 0
  weight[1, 5] = np.nan                           # off the policy tokens: never read
  live_w = np.where(mask > 0, np.nan_to_num(weight), 0.0)
  _check_entropy_term((new, old, rollout, adv, mask), obj.RLLossConfig(entropy_coeff=-0.4), ent, weight,
                      live_w)


def test_entropy_gate_keeps_the_term_off_tokens_above_it():
  """rl.entropy_gate_nats = g: a token whose entropy is above g gets no entropy term and no entropy
  gradient (its mode-less distribution is not sharpened); at or below g the term is as without a
  gate; the metric still averages every token; g = 0 is no gate."""
  new, old, rollout, adv, mask, ent, weight = _policy_tokens(7, (3, 5), 6.0)
  mask[2, 3:] = 0
  ent[0, 0] = 1.0                                  # exactly at the gate: kept
  weight[1, 1] = 0
  g = 1.0
  for gate, on in ((g, (ent <= g)), (0.0, np.ones(ent.shape, bool))):
    metrics = _check_entropy_term((new, old, rollout, adv, mask),
                                  obj.RLLossConfig(entropy_coeff=-0.7, entropy_gate=gate), ent, weight,
                                  mask * weight * on)
    np.testing.assert_allclose(float(metrics["entropy_above_gate_frac"]),
                               (mask * ~on).sum() / mask.sum(), rtol=1e-6)
  assert 0 < (mask * (ent <= g)).sum() < mask.sum()       # the gate splits this batch


def test_the_entropy_gate_is_a_config_field_checked_at_set_up():
  from mage_jax.rl import loop as rl_loop
  from mage_jax.train.run_setup import ConfigError
  import configs.stage5_rl as stage5
  c = stage5.get_config("tiny")
  assert rl_loop.loss_config(c.rl).entropy_gate == 0.0      # default: no gate
  c.rl.entropy_gate_nats = 1.5
  rl_loop.validate(c)
  assert rl_loop.loss_config(c.rl).entropy_gate == 1.5
  for bad in (-0.1, float("nan"), float("inf")):
    c.rl.entropy_gate_nats = bad
    with pytest.raises(ConfigError, match="entropy_gate_nats"):
      rl_loop.validate(c)


def test_minimising_entropy_sharpens_a_toy_policy_and_keeps_its_mode():
  """Zero advantages, c < 0: gradient steps through the chunked head lower the entropy at every
  policy token and leave each token's most likely id where it was; c > 0 raises it."""
  hidden, kernel, targets, mask = _inputs(seed=4, b=1, t=12, v=30)
  mask[:] = 1
  zeros = jnp.zeros(mask.shape, jnp.float32)

  def run(c, steps=30, lr=0.5):
    cfg = obj.RLLossConfig(entropy_coeff=c)

    def loss(k):
      st = loss_lib.token_stats(jnp.asarray(hidden), k, jnp.asarray(targets), chunk_size=5,
                                mask=jnp.asarray(mask), with_entropy=True)
      return obj.rl_finalize(obj.grpo_sums(-st.nll, jax.lax.stop_gradient(-st.nll), -st.nll, zeros,
                                           jnp.asarray(mask), cfg, st.entropy))["loss"]
    k = jnp.asarray(kernel)
    grad = jax.jit(jax.grad(loss))
    for _ in range(steps):
      k = k - lr * grad(k)
    return np.asarray(k)

  h0 = np_entropy(hidden @ kernel)
  sharp = run(-0.5)
  h1 = np_entropy(hidden @ sharp)
  assert np.all(h1 < h0) and h1.mean() < 0.7 * h0.mean()
  np.testing.assert_array_equal((hidden @ sharp).argmax(-1), (hidden @ kernel).argmax(-1))
  assert np_entropy(hidden @ run(0.5)).mean() > h0.mean()


def test_the_loop_keeps_every_sample_with_an_entropy_term_and_checks_its_range():
  from mage_jax.rl import loop as rl_loop
  from mage_jax.rl.batch import RLSample
  from mage_jax.train.run_setup import ConfigError
  import configs.stage5_rl as stage5
  samples = [RLSample([1], [2], [-1.0], a, 0) for a in (0.0, 1.0, 0.0, -1.0)]
  kept, left_out = rl_loop.samples_with_gradient(samples)
  assert left_out == 2 and [s.advantage for s in kept] == [1.0, -1.0]
  kept, left_out = rl_loop.samples_with_gradient(samples, entropy_coeff=-0.1)
  assert left_out == 0 and len(kept) == 4       # zero advantage, but an entropy gradient
  c = stage5.get_config("tiny")
  assert rl_loop.loss_config(c.rl).entropy_coeff == 0.0     # default: GRPO's loss
  c.rl.entropy_coeff = -0.05
  rl_loop.validate(c)
  assert rl_loop.loss_config(c.rl).entropy_coeff == -0.05
  for bad in (-1.5, 2.0, float("nan")):
    c.rl.entropy_coeff = bad
    with pytest.raises(ConfigError, match="entropy_coeff"):
      rl_loop.validate(c)


def test_rewarded_groups_only_leaves_out_groups_no_episode_solved():
  """rl.entropy_groups="rewarded": with the term on, a group whose rewards are all 0 (its only
  gradient the entropy term's, toward a failing mode) is not trained; flat solved groups are."""
  from mage_jax.rl import loop as rl_loop
  from mage_jax.rl.batch import RLSample
  from mage_jax.rl.rollouts import EpisodeSamples, RolloutGroup
  from mage_jax.train.run_setup import ConfigError
  import configs.stage5_rl as stage5

  def group(name, rewards):
    return RolloutGroup(name, name, [EpisodeSamples(f"{name}-{i}", r, [RLSample([1], [2], [-1.0], 0.0, 0)])
                                     for i, r in enumerate(rewards)])

  groups = [group("failed", [0.0, 0.0]), group("mixed", [1.0, 0.0]), group("solved", [1.0, 1.0]),
            group("partial", [0.0, 0.25])]
  c = stage5.get_config("tiny")
  for coeff, rule, kept in ((0.0, "rewarded", 4), (-1.0, "all", 4), (-1.0, "rewarded", 3)):
    c.rl.entropy_coeff, c.rl.entropy_groups = coeff, rule
    rl_loop.validate(c)
    out, left_out = rl_loop.groups_for_update(groups, c.rl)
    assert (len(out), left_out) == (kept, 4 - kept), (coeff, rule)
  assert [g.task_id for g in out] == ["mixed", "solved", "partial"]
  samples, flat = rl_loop.samples_with_advantages(out, 1e-6)
  samples, _ = rl_loop.samples_with_gradient(samples, entropy_coeff=-1.0)
  assert flat == 1 and len(samples) == 6     # the solved group's flat samples keep the entropy term
  c.rl.entropy_groups = "failed"
  with pytest.raises(ConfigError, match="config.rl.entropy_groups='failed'"):
    rl_loop.validate(c)
