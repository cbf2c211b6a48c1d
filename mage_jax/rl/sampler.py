"""Frontier task sampling for online RL.

A task teaches the policy most when its pass rate is neither 0 nor 1: a group
of N episodes with identical rewards has zero group-relative advantage and so
no gradient. Each task is drawn with probability proportional to

    w = p (1 - p) + floor,   p = (passes + prior_attempts / 2) / (attempts + prior_attempts)

where `passes` sums the episode rewards clipped to [0, 1] (the pass count for
binary task scores) and the prior is `prior_attempts` pseudo-attempts at a 50%
pass rate, so an unseen task starts at the maximum weight 0.25 + floor. The
floor keeps solved and unsolved tasks coming back (a task's pass rate drifts
as the policy changes). Seeded; `state_dict` / `load_state_dict` resume the
counts and the random stream exactly (JSON-able, stored with the checkpoint).
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np


class FrontierSampler:
  """Draws task ids, favouring tasks whose pass rate is in (0, 1). Thread-safe."""

  def __init__(self, task_ids: Sequence[str], *, seed: int, floor: float = 0.05,
               prior_attempts: int = 1):
    if not task_ids:
      raise ValueError("FrontierSampler: no task ids to sample from")
    if len(set(task_ids)) != len(task_ids):
      raise ValueError("FrontierSampler: task ids are not unique")
    if floor < 0 or prior_attempts < 0:
      raise ValueError(f"FrontierSampler: floor={floor} and prior_attempts={prior_attempts} must be >= 0")
    if floor == 0 and prior_attempts == 0:
      raise ValueError("FrontierSampler: floor=0 with prior_attempts=0 can give every task weight 0")
    self.task_ids = list(task_ids)
    self.floor, self.prior_attempts = float(floor), int(prior_attempts)
    self._index = {t: i for i, t in enumerate(self.task_ids)}
    self.passes = np.zeros(len(self.task_ids), np.float64)
    self.attempts = np.zeros(len(self.task_ids), np.float64)
    self._rng = np.random.Generator(np.random.PCG64(seed))
    self._lock = threading.Lock()

  def pass_rates(self) -> np.ndarray:
    """The prior-smoothed pass rate p of every task."""
    return ((self.passes + 0.5 * self.prior_attempts) /
            np.maximum(self.attempts + self.prior_attempts, 1e-12))

  def weights(self) -> np.ndarray:
    """Unnormalised sampling weights p (1 - p) + floor, in task_ids order."""
    p = self.pass_rates()
    return p * (1.0 - p) + self.floor

  def probabilities(self) -> np.ndarray:
    w = self.weights()
    return w / w.sum()

  def sample(self, n: int) -> list[str]:
    """n task ids; without replacement while n <= the number of tasks."""
    with self._lock:
      idx = self._rng.choice(len(self.task_ids), size=n, replace=n > len(self.task_ids),
                             p=self.probabilities())
    return [self.task_ids[i] for i in idx]

  def update(self, task_id: str, rewards: Sequence[float]) -> None:
    if task_id not in self._index:
      raise KeyError(f"FrontierSampler.update: unknown task id {task_id!r}")
    r = np.clip(np.asarray(rewards, np.float64), 0.0, 1.0)
    with self._lock:
      i = self._index[task_id]
      self.passes[i] += float(r.sum())
      self.attempts[i] += float(r.size)

  def state_dict(self) -> dict[str, Any]:
    with self._lock:
      return {"task_ids": list(self.task_ids), "passes": self.passes.tolist(),
              "attempts": self.attempts.tolist(), "rng": self._rng.bit_generator.state}

  def load_state_dict(self, state: dict[str, Any]) -> None:
    """Restore counts (matched by task id: tasks added since keep zero counts) and the rng."""
    with self._lock:
      self.passes[:] = 0.0
      self.attempts[:] = 0.0
      for t, p, a in zip(state["task_ids"], state["passes"], state["attempts"]):
        if t in self._index:
          self.passes[self._index[t]] = p
          self.attempts[self._index[t]] = a
      self._rng.bit_generator.state = state["rng"]
