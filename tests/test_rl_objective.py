"""RL objective vs a NumPy reference written here from DESIGN.md "RL objective":
group advantages, ratio, both clip sides, the TIS cap, the policy-token mask,
and the gradient w.r.t. logp_new (-A*w*rho where unclipped, 0 where clipped)."""
import jax
import jax.numpy as jnp
import numpy as np

from mage_jax.rl import objective as obj

CFG = obj.RLLossConfig(clip_eps_low=0.2, clip_eps_high=0.28, tis_cap=2.0)


def np_advantages(r, eps):
  """float64 reference: a group is flat when its rewards are exactly equal (then A = 0)."""
  r = np.asarray(r, np.float64)
  out = np.zeros_like(r)
  for g in range(r.shape[0]):
    if np.all(r[g] == r[g][0]):
      continue
    out[g] = (r[g] - r[g].mean()) / (r[g].std() + eps)  # population std (ddof=0)
  return out


def np_reference(new, old, rollout, adv, mask, cfg):
  """(loss, dloss/dnew, clipped count, truncated count) from the DESIGN.md formula."""
  rho = np.exp(new - old)
  w = np.minimum(np.exp(old - rollout), cfg.tis_cap)
  lo, hi = 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high
  per_token = w * np.maximum(-adv * rho, -adv * np.clip(rho, lo, hi))
  m = mask > 0
  n = m.sum()
  loss = per_token[m].sum() / n
  # The clipped term wins (and has zero slope) when A > 0 and rho > hi, or A < 0 and rho < lo.
  clipped = ((adv > 0) & (rho > hi)) | ((adv < 0) & (rho < lo))
  grad = np.where(m & ~clipped, -adv * w * rho, 0.0) / n
  truncated = m & (np.exp(old - rollout) > cfg.tis_cap)
  return loss, grad, int((m & clipped).sum()), int(truncated.sum())


def test_group_advantages_matches_numpy_and_constant_groups_are_zero():
  rewards = np.array([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 1.0],
                      [0.0, 0.0, 0.0, 0.0]], np.float32)
  got = np.asarray(obj.group_advantages(jnp.asarray(rewards), eps=1e-6))
  np.testing.assert_allclose(got, np_advantages(rewards, 1e-6), rtol=1e-5, atol=1e-6)
  assert np.all(got[1] == 0) and np.all(got[3] == 0)
  assert np.all(np.isfinite(np.asarray(obj.group_advantages(jnp.asarray(rewards), eps=0.0))))
  np.testing.assert_allclose(got[0], [1, -1, -1, 1], rtol=1e-5)   # mean .5, std .5


def test_flat_groups_of_non_dyadic_rewards_get_exactly_zero_advantage():
  # 2/3, 0.7, 123.456 are not exact in fp32: a float32 mean can land one rounding step off,
  # leaving a ~1e-8 std that a `std > 0` guard lets through (+0.056 per episode, ~1 at eps=0).
  flat = np.array([[2 / 3] * 8, [0.7] * 8, [123.456] * 8, [0.1] * 3 + [0.1] * 5], np.float32)
  mixed = np.array([[2 / 3, 0.7, 0.7, 123.456, 2 / 3, 0.7, 0.1, 0.7]], np.float32)
  for eps in (0.0, 1e-6):
    got = np.asarray(obj.group_advantages(jnp.asarray(flat), eps=eps))
    assert np.all(got == 0.0), (eps, got)
    got_mixed = np.asarray(obj.group_advantages(jnp.asarray(mixed), eps=eps))
    np.testing.assert_allclose(got_mixed, np_advantages(mixed, eps), rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(got_mixed)) and np.abs(got_mixed).max() > 0.1


def _inputs(seed=0, b=3, t=40):
  rng = np.random.default_rng(seed)
  old = rng.normal(-2.0, 0.5, (b, t))
  # Ratios spread over both clip edges: log rho in [-0.6, 0.6] -> rho in [0.55, 1.82].
  new = old + rng.uniform(-0.6, 0.6, (b, t))
  # TIS weights on both sides of the cap: exp(old - rollout) in [0.37, 7.4].
  rollout = old - rng.uniform(-1.0, 2.0, (b, t))
  adv = rng.choice([-1.5, -0.4, 0.7, 1.2], (b, t))
  mask = (rng.random((b, t)) < 0.6).astype(np.float64)
  return new, old, rollout, adv, mask


def test_grpo_loss_gradient_and_counts_match_numpy():
  new, old, rollout, adv, mask = _inputs()
  ref_loss, ref_grad, ref_clipped, ref_trunc = np_reference(new, old, rollout, adv, mask, CFG)
  assert ref_clipped > 0 and ref_trunc > 0  # the example exercises both clips and the cap
  rho = np.exp(new - old)
  m = mask > 0
  assert ((adv > 0) & (rho > 1.28) & m).any() and ((adv < 0) & (rho < 0.8) & m).any()
  args = [jnp.asarray(x, jnp.float32) for x in (new, old, rollout, adv, mask)]

  def loss_fn(logp_new):
    return obj.rl_finalize(obj.grpo_sums(logp_new, *args[1:], CFG))["loss"]

  loss, grad = jax.value_and_grad(loss_fn)(args[0])
  np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(grad), ref_grad, rtol=1e-4, atol=1e-7)
  sums = obj.grpo_sums(*args, CFG)
  assert float(sums.denominator) == float(sums.tokens) == mask.sum()
  assert int(sums.clipped) == ref_clipped
  assert int(sums.truncated) == ref_trunc
  metrics = obj.rl_finalize(sums)
  np.testing.assert_allclose(float(metrics["mean_ratio"]), rho[m].mean(), rtol=1e-5)
  np.testing.assert_allclose(float(metrics["approx_kl"]),
                             ((rho - 1) - np.log(rho))[m].mean(), rtol=1e-4)
  np.testing.assert_allclose(float(metrics["clip_frac"]), ref_clipped / mask.sum(), rtol=1e-6)
  np.testing.assert_allclose(float(metrics["rollout_logp_gap"]), np.abs(old - rollout)[m].mean(), rtol=1e-5)


def test_tis_weight_is_capped_and_has_no_gradient():
  old = jnp.array([0.0, -1.0, -3.0])
  rollout = jnp.array([-1.0, -1.0, 0.0])   # exp(1) > cap
  w = obj.tis_weight(old, rollout, 2.0)
  np.testing.assert_allclose(np.asarray(w), [2.0, 1.0, np.exp(-3.0)], rtol=1e-6)
  g = jax.grad(lambda o: obj.tis_weight(o, rollout, 2.0).sum())(old)
  assert np.all(np.asarray(g) == 0)


def test_masked_tokens_with_garbage_contribute_nothing():
  new, old, rollout, adv, mask = _inputs(seed=1)
  off = mask == 0
  garbage = [x.copy() for x in (new, old, rollout, adv)]
  for x, v in zip(garbage, (np.inf, -np.inf, np.nan, 1e30)):
    x[off] = v
  clean_args = [jnp.asarray(x, jnp.float32) for x in (new, old, rollout, adv, mask)]
  dirty_args = [jnp.asarray(x, jnp.float32) for x in (*garbage, mask)]

  def loss_fn(logp_new, rest):
    return obj.rl_finalize(obj.grpo_sums(logp_new, *rest, CFG))["loss"]

  l_clean, g_clean = jax.value_and_grad(loss_fn)(clean_args[0], clean_args[1:])
  l_dirty, g_dirty = jax.value_and_grad(loss_fn)(dirty_args[0], dirty_args[1:])
  assert np.isfinite(float(l_dirty))
  assert float(l_dirty) == float(l_clean)
  g_dirty = np.asarray(g_dirty)
  assert np.all(np.isfinite(g_dirty)) and np.all(g_dirty[off] == 0)
  np.testing.assert_array_equal(g_dirty, np.asarray(g_clean))
  dirty_sums = obj.grpo_sums(*dirty_args, CFG)
  assert all(np.isfinite(float(x)) for x in dirty_sums)


def test_empty_batch_gives_zero_loss_not_nan():
  z = jnp.zeros((2, 5), jnp.float32)
  metrics = obj.rl_finalize(obj.grpo_sums(z, z, z, z, z, CFG))
  assert all(float(v) == 0.0 for v in metrics.values())


def test_denominator_is_policy_tokens_and_sums_add_over_splits():
  new, old, rollout, adv, mask = _inputs(seed=2, b=4)
  args = [jnp.asarray(x, jnp.float32) for x in (new, old, rollout, adv, mask)]
  whole = obj.grpo_sums(*args, CFG)
  halves = [obj.grpo_sums(*[a[sl] for a in args], CFG) for sl in (slice(0, 1), slice(1, 4))]
  for f in obj.RLSums._fields:
    np.testing.assert_allclose(float(getattr(halves[0], f) + getattr(halves[1], f)),
                               float(getattr(whole, f)), rtol=1e-5)
  ref_loss = np_reference(new, old, rollout, adv, mask, CFG)[0]
  np.testing.assert_allclose(float(whole.loss / whole.denominator), ref_loss, rtol=1e-5)


def test_loop_zero_advantage_count_is_what_the_objective_did():
  # Groups the old np.allclose count called flat although the objective pushes them (fp32
  # rewards that differ by one ulp), and flat groups of non-dyadic rewards.
  from mage_jax.rl.batch import RLSample
  from mage_jax.rl.loop import samples_with_advantages
  from mage_jax.rl.rollouts import EpisodeSamples, RolloutGroup

  def group(name, rewards):
    eps = [EpisodeSamples("e", r, [RLSample([1], [2], [-1.0], 0.0, 0)]) for r in rewards]
    return RolloutGroup(name, name, eps)
  near = float(np.nextafter(np.float32(0.7), np.float32(1.0)))
  groups = [group("flat_23", [2 / 3] * 4), group("flat_07", [0.7] * 4),
            group("one_ulp", [0.7, 0.7, 0.7, near])]
  samples, flat = samples_with_advantages(groups, eps=0.0)
  adv = np.array([s.advantage for s in samples]).reshape(3, 4)
  assert np.all(adv[:2] == 0) and np.any(adv[2] != 0)
  assert flat == 2
