"""FrontierSampler and AdmissionWindow: weights against hand-computed numbers, the lag bound."""
import collections
import json

import numpy as np
import pytest

from mage_jax.rl.admission import AdmissionWindow
from mage_jax.rl.sampler import FrontierSampler


def test_frontier_weights_hand_computed():
  s = FrontierSampler(["solved", "half", "unsolved", "unseen"], seed=0, floor=0.05, prior_attempts=2)
  s.update("solved", [1, 1, 1, 1, 1, 1])      # p = (6 + 1) / (6 + 2) = 0.875
  s.update("half", [1, 0, 1, 0])              # p = (2 + 1) / (4 + 2) = 0.5
  s.update("unsolved", [0, 0, 0, 0, 0, 0, 0, 0])  # p = (0 + 1) / (8 + 2) = 0.1
  # unseen: p = 1 / 2 = 0.5
  expected_w = [0.875 * 0.125 + 0.05, 0.25 + 0.05, 0.1 * 0.9 + 0.05, 0.25 + 0.05]
  np.testing.assert_allclose(s.weights(), expected_w, rtol=1e-12)
  np.testing.assert_allclose(s.probabilities(), np.array(expected_w) / sum(expected_w), rtol=1e-12)


def test_fractional_rewards_count_as_partial_passes_and_are_clipped():
  s = FrontierSampler(["a"], seed=0, floor=0.0, prior_attempts=1)
  s.update("a", [0.5, 2.0, -1.0])             # clipped to 0.5, 1, 0: passes 1.5 of 3
  np.testing.assert_allclose(s.pass_rates(), [(1.5 + 0.5) / 4])


def test_sampling_follows_the_weights_and_is_seeded():
  ids = ["frontier", "solved"]
  s = FrontierSampler(ids, seed=3, floor=0.01, prior_attempts=1)
  s.update("solved", [1.0] * 99)              # p = 99.5/100 -> w = 0.004975 + 0.01
  draws = collections.Counter(s.sample(1)[0] for _ in range(4000))
  p_solved = (0.995 * 0.005 + 0.01) / (0.995 * 0.005 + 0.01 + 0.25 + 0.01)
  assert abs(draws["solved"] / 4000 - p_solved) < 0.015
  assert draws["solved"] > 0                  # the floor keeps solved tasks coming back
  a = FrontierSampler(ids, seed=7).sample(10)
  b = FrontierSampler(ids, seed=7).sample(10)
  assert a == b
  assert len(set(FrontierSampler(["x", "y", "z"], seed=1).sample(3))) == 3  # no repeats when n <= tasks


def test_state_dict_resumes_counts_and_random_stream():
  s = FrontierSampler(["a", "b", "c"], seed=11)
  s.update("a", [1, 0])
  s.sample(5)
  state = json.loads(json.dumps(s.state_dict()))   # goes through the JSON checkpoint record
  expected = [s.sample(1)[0] for _ in range(20)]
  r = FrontierSampler(["a", "b", "c"], seed=999)
  r.load_state_dict(state)
  np.testing.assert_array_equal(r.attempts, [2, 0, 0])
  assert [r.sample(1)[0] for _ in range(20)] == expected


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="no task ids"):
    FrontierSampler([], seed=0)
  with pytest.raises(KeyError, match="nope"):
    FrontierSampler(["a"], seed=0).update("nope", [1.0])


def test_admission_window_holds_lag_plus_one_batches():
  w = AdmissionWindow(max_policy_lag=3)
  assert w.window == 4
  assert w.may_admit(0, 0) and w.may_admit(5, 3.75)
  assert not w.may_admit(5, 4) and not w.may_admit(0, 4.5)
  with pytest.raises(ValueError):
    w.may_admit(-1, 0)


def test_lag_bound():
  w = AdmissionWindow(max_policy_lag=3)
  assert [w.is_fresh(v, 10) for v in (10, 9, 8, 7, 6, 0)] == [True, True, True, True, False, False]
  assert w.staleness(7, 10) == 3
  assert AdmissionWindow(0).is_fresh(4, 4) and not AdmissionWindow(0).is_fresh(3, 4)
  with pytest.raises(ValueError, match="newer"):
    w.is_fresh(11, 10)


def test_admission_schedule_never_trains_beyond_the_lag():
  """Simulate the loop's accounting: workers admit while the window allows, stamp the
  learner's version at admission; the learner consumes one batch (G groups) per update.
  Every consumed group is within the lag bound."""
  lag, g = 2, 3
  w = AdmissionWindow(lag)
  version, in_flight, queue, worst = 0, 0, [], 0
  rng = np.random.default_rng(0)
  while version < 30:
    while w.may_admit(version, in_flight / g) and rng.random() < 0.9:
      queue.append(version)
      in_flight += 1
    if len(queue) >= g:
      batch, queue = queue[:g], queue[g:]
      in_flight -= g
      worst = max(worst, max(w.staleness(v, version) for v in batch))
      assert all(w.is_fresh(v, version) for v in batch)
      version += 1
  assert worst == lag   # the window is used to its bound, not beyond
