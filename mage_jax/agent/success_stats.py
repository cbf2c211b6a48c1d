"""Statistics for task-success figures: binomial intervals and paired tests (pure NumPy).

  wilson_interval(k, n)        95% Wilson score interval of a success rate k / n
  mcnemar_exact(a, b)          exact two-sided McNemar p-value of two paired 0/1 outcome lists
  paired_bootstrap(a, b)       mean difference b - a, its 95% percentile interval and a two-sided
                               bootstrap p-value, resampling instances (pairs stay together)

Used by the learning proof (mage_jax/runs/proof_eval.py) to compare checkpoints on the SAME
held-out instances; scipy is not a dependency, so the binomial tail is summed exactly.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
  """Wilson score interval for k successes in n trials ((0, 1) when n == 0)."""
  if n < 0 or k < 0 or k > n:
    raise ValueError(f"wilson_interval: need 0 <= k <= n, got k={k}, n={n}")
  if n == 0:
    return 0.0, 1.0
  p = k / n
  denom = 1 + z * z / n
  centre = (p + z * z / (2 * n)) / denom
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
  # k = 0 and k = n give exactly 0 and 1 on paper; keep float rounding from cutting p out
  return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def _pairs(a: Sequence, b: Sequence) -> tuple[np.ndarray, np.ndarray]:
  a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
  if a.shape != b.shape or a.ndim != 1:
    raise ValueError(f"paired outcomes must be two 1-D lists of one length, got {a.shape} and {b.shape}")
  return a, b


def mcnemar_exact(a: Sequence[int], b: Sequence[int]) -> dict[str, float]:
  """Exact McNemar test on paired 0/1 outcomes: only discordant pairs count; under H0 the
  count where only b succeeded is Binomial(discordant, 1/2). Two-sided p = 2 x the smaller
  tail, capped at 1."""
  a, b = _pairs(a, b)
  only_a = int(np.sum((a > 0) & (b <= 0)))
  only_b = int(np.sum((b > 0) & (a <= 0)))
  n = only_a + only_b
  tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2.0 ** n if n else 1.0
  return {"only_a": only_a, "only_b": only_b, "p_value": min(1.0, 2.0 * tail)}


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, samples: int = 10_000,
                     seed: int = 0) -> dict[str, float]:
  """Bootstrap over instances of mean(b) - mean(a): the observed difference, a 95%
  percentile interval and a two-sided p-value (twice the share of resampled differences on
  the far side of 0, capped at 1)."""
  a, b = _pairs(a, b)
  if a.size == 0:
    raise ValueError("paired_bootstrap: no instances")
  d = b - a
  idx = np.random.default_rng(seed).integers(0, d.size, size=(samples, d.size))
  boot = d[idx].mean(axis=1)
  diff = float(d.mean())
  lo, hi = np.percentile(boot, [2.5, 97.5])
  far = np.mean(boot <= 0) if diff > 0 else np.mean(boot >= 0) if diff < 0 else 1.0
  return {"diff": diff, "lo": float(lo), "hi": float(hi), "p_value": float(min(1.0, 2.0 * far))}
