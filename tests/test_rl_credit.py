"""Per-token credit from a group's shared prefixes (mage_jax/rl/credit.py) against values worked
out by hand from the definition (a node's value = mean reward of the episodes through it)."""
from __future__ import annotations

import numpy as np
import pytest

from mage_jax.rl.credit import prefix_tree_advantages


def test_only_the_tokens_where_episodes_part_get_credit_and_it_telescopes_to_grpo():
  p = [1, 2]
  # three episodes, one call each: A and B share "5 6", then part; C parts at the first token
  eps = [[(p, [5, 6, 7, 8])], [(p, [5, 6, 9, 8])], [(p, [4, 6, 7, 8])]]
  r = np.array([1.0, 0.0, 1.0])
  std = r.std()
  adv = prefix_tree_advantages(eps, r, eps=0.0)
  root, v56 = r.mean(), 0.5      # the node after "5" holds A and B
  np.testing.assert_allclose(adv[0][0], np.array([v56 - root, 0, 1 - v56, 0]) / std, atol=1e-6)
  np.testing.assert_allclose(adv[1][0], np.array([v56 - root, 0, 0 - v56, 0]) / std, atol=1e-6)
  np.testing.assert_allclose(adv[2][0], np.array([1 - root, 0, 0, 0]) / std, atol=1e-6)
  # with the same prompt for all, each episode's credits sum to its GRPO advantage
  for a, reward in zip(adv, r):
    assert a[0].sum() == pytest.approx((reward - root) / std, abs=1e-6)


def test_a_prompt_seen_by_some_episodes_only_splits_the_tree_and_its_step_goes_to_no_token():
  # the same first call; the environment answered differently, then the same second completion
  eps = [[([1], [5]), ([1, 5, 30], [7])], [([1], [5]), ([1, 5, 31], [7])],
         [([1], [5]), ([1, 5, 30], [7])]]
  r = [1.0, 0.0, 1.0]
  adv = prefix_tree_advantages(eps, r, eps=0.0)
  for a in adv:     # the one policy choice everyone made alike carries nothing, nor does the second
    np.testing.assert_array_equal(np.concatenate(a), [0.0, 0.0])


def test_equal_rewards_and_identical_episodes_give_zero():
  eps = [[([1], [5, 6])], [([1], [5, 7])]]
  assert all(not a[0].any() for a in prefix_tree_advantages(eps, [1.0, 1.0], eps=1e-6))
  same = [[([1], [5, 6])], [([1], [5, 6])]]
  assert all(not a[0].any() for a in prefix_tree_advantages(same, [1.0, 0.0], eps=1e-6))
  with pytest.raises(ValueError, match="2 episodes but 3 rewards"):
    prefix_tree_advantages(eps, [1.0, 0.0, 1.0], eps=1e-6)


def test_the_learner_packs_per_token_credit_with_the_parse_rule_and_weights():
  from mage_jax.rl.batch import RLSample, pack_rl_batch
  from mage_jax.rl.loop import samples_with_advantages, samples_with_gradient
  from mage_jax.rl.rollouts import EpisodeSamples, RolloutGroup

  def ep(reward, completion, parsed=True):
    return EpisodeSamples("e", reward, [RLSample([1, 2], completion, [-1.0] * len(completion), 0.0, 0,
                                                 parsed=parsed)])
  group = RolloutGroup("t", "g", [ep(1.0, [5, 6, 7]), ep(0.0, [5, 6, 9]), ep(1.0, [4, 6, 7], parsed=False)])
  r = np.array([1.0, 0.0, 1.0])
  expect = prefix_tree_advantages([[([1, 2], [5, 6, 7])], [([1, 2], [5, 6, 9])], [([1, 2], [4, 6, 7])]],
                                  r, eps=1e-6)
  samples, flat = samples_with_advantages([group], eps=1e-6, weights=(1.0, 0.5), credit="prefix_tree")
  assert flat == 0
  for s, e in zip(samples[:2], expect[:2]):   # negative credit x 0.5, positive kept
    np.testing.assert_allclose(s.token_advantages, np.where(e[0] < 0, 0.5 * e[0], e[0]), rtol=1e-6)
  assert (expect[0][0] < 0).any() and (expect[0][0] > 0).any()   # both signs in one success
  # the unparsed call's positive credit is dropped (min(A, 0)), so it carries no gradient at all
  assert expect[2][0][0] > 0 and not samples[2].token_advantages.any()
  kept, left_out = samples_with_gradient(samples)
  assert left_out == 1
  batch, _ = pack_rl_batch(kept, rows=2, seq_len=8)
  on = batch["loss_mask"] > 0
  packed = sorted(batch["advantages"][on].tolist())
  want = sorted(np.concatenate([s.token_advantages for s in kept]).tolist())
  np.testing.assert_allclose(packed, want, rtol=1e-6)
  with pytest.raises(ValueError, match="credit='token'"):
    samples_with_advantages([group], eps=1e-6, credit="token")
  bad = RLSample([1], [5, 6], [-1.0, -1.0], 0.5, 0, token_advantages=np.zeros(3, np.float32))
  with pytest.raises(ValueError, match=r"token_advantages of shape \(3,\) for 2 completion_ids"):
    pack_rl_batch([bad], rows=1, seq_len=8)
