"""The fleet utilisation simulation (mage_jax/bench/fleet_sim.py) on shapes whose answer is known
by hand: equal episode durations, a learner that never binds."""
import pytest

from mage_jax.bench import fleet_sim

# 12 slots, 4 workers of 3 slots, groups of 2: a worker keeps 2 of its 3 slots busy all the time.
EVEN = fleet_sim.Shape(slots=12, groups_per_update=2, episodes_per_group=2, window=4, workers=4,
                       median_s=10.0, sigma=0.0, update_s=0.01, updates=24)


def test_per_worker_pools_keep_only_a_groups_worth_of_each_pool_busy():
  assert fleet_sim.arithmetic_bound(EVEN) == pytest.approx(8 / 12)
  assert fleet_sim.simulate(EVEN, "per_worker")["utilisation"] == pytest.approx(8 / 12, abs=1e-6)


def test_the_shared_queue_keeps_every_slot_busy_while_the_window_has_work():
  # 8 groups x 2 episodes in flight >= 12 slots: the only idle time is the learner's 0.01 s
  # updates releasing the window after each wave of equal-length episodes.
  sim = fleet_sim.simulate(EVEN, "shared")
  assert 0.99 < sim["utilisation"] <= 1.0 + 1e-9 and sim["threads"] == 8


def test_stragglers_cost_the_per_worker_scheme_and_not_the_queue():
  spread = fleet_sim.Shape(**{**EVEN.__dict__, "sigma": 0.8, "updates": 60})
  per_worker = fleet_sim.simulate(spread, "per_worker", seed=1)["utilisation"]
  shared = fleet_sim.simulate(spread, "shared", seed=1)["utilisation"]
  # (the small window, 16 episodes for 12 slots, still binds now and then for the queue)
  assert per_worker < 8 / 12 - 0.1 and shared > per_worker + 0.3


def test_bad_shapes_are_refused():
  with pytest.raises(ValueError, match="scheme"):
    fleet_sim.simulate(EVEN, "round_robin")
  with pytest.raises(ValueError, match="fewer than a group"):
    fleet_sim.simulate(fleet_sim.Shape(**{**EVEN.__dict__, "workers": 12}), "per_worker")
