"""Wilson interval, exact McNemar and paired bootstrap against hand-computed values and an
independent NumPy reference."""
import math

import numpy as np
import pytest

from mage_jax.agent.success_stats import mcnemar_exact, paired_bootstrap, wilson_interval


@pytest.mark.parametrize("k,n,lo,hi", [
    (0, 10, 0.0, 0.27753),      # z^2/(n+z^2) = 3.8415/13.8415
    (5, 10, 0.23659, 0.76341),
    (10, 10, 0.72247, 1.0),
    (1, 20, 0.00889, 0.23612),   # the textbook 1/20 example
])
def test_wilson_matches_hand_computed(k, n, lo, hi):
  got = wilson_interval(k, n)
  assert got == pytest.approx((lo, hi), abs=2e-5)
  assert got[0] <= k / n <= got[1]


def test_wilson_rejects_bad_counts():
  with pytest.raises(ValueError, match="k=3, n=2"):
    wilson_interval(3, 2)
  assert wilson_interval(0, 0) == (0.0, 1.0)


def test_mcnemar_exact_hand_computed():
  # 6 pairs only b solved, none only a: p = 2 * 0.5^6
  a = [0] * 6 + [1] * 4 + [0] * 5
  b = [1] * 6 + [1] * 4 + [0] * 5
  r = mcnemar_exact(a, b)
  assert (r["only_a"], r["only_b"]) == (0, 6) and r["p_value"] == pytest.approx(2 / 64)
  # 1 vs 9 discordant: p = 2 * (C(10,0) + C(10,1)) / 2^10 = 22/1024
  a = [1] + [0] * 9 + [1, 1]
  b = [0] + [1] * 9 + [1, 1]
  assert mcnemar_exact(a, b)["p_value"] == pytest.approx(22 / 1024)
  # symmetric and capped at 1
  assert mcnemar_exact(b, a)["p_value"] == pytest.approx(22 / 1024)
  assert mcnemar_exact([1, 0], [0, 1])["p_value"] == 1.0
  assert mcnemar_exact([1, 1], [1, 1])["p_value"] == 1.0


def test_mcnemar_matches_binomial_reference():
  rng = np.random.default_rng(3)
  a, b = rng.integers(0, 2, 60), rng.integers(0, 2, 60)
  c, d = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
  pmf = np.array([math.comb(c + d, i) for i in range(c + d + 1)], float) / 2 ** (c + d)
  ref = min(1.0, 2 * pmf[:min(c, d) + 1].sum())
  assert mcnemar_exact(a, b)["p_value"] == pytest.approx(ref)


def test_paired_bootstrap_against_numpy_reference():
  rng = np.random.default_rng(0)
  a = rng.integers(0, 2, 80).astype(float)
  b = np.where(rng.random(80) < 0.3, 1.0, a)
  got = paired_bootstrap(a, b, samples=4000, seed=7)
  # independent reference: loop over resamples
  ref_rng = np.random.default_rng(7)
  idx = ref_rng.integers(0, 80, size=(4000, 80))
  diffs = np.array([np.mean(b[i] - a[i]) for i in idx])
  assert got["diff"] == pytest.approx(np.mean(b - a))
  assert got["lo"] == pytest.approx(np.percentile(diffs, 2.5))
  assert got["hi"] == pytest.approx(np.percentile(diffs, 97.5))
  assert got["p_value"] == pytest.approx(min(1.0, 2 * np.mean(diffs <= 0)))
  assert got["diff"] > 0 and got["p_value"] < 0.05
  # no difference: p = 1
  assert paired_bootstrap(a, a, samples=100)["p_value"] == 1.0
  with pytest.raises(ValueError, match="one length"):
    paired_bootstrap([1, 0], [1])
