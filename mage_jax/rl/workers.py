"""Rollout threads of the async GRPO loop (`mage_jax.rl.loop.train_rl`).

Each thread admits one group at a time while the admission window allows it (at most
(max_policy_lag + 1) x groups_per_update groups in flight, counted until the update that
trains them is applied, and none while a weight sync is pending), draws a task from the
FrontierSampler, plays one task x N episodes through `rollout_fn` and queues the group for
the learner. A group lost to an engine error is dropped and counted; several in a row
mean the engine is gone, and the learner's `take` raises.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Callable

from mage_jax.rl.admission import AdmissionWindow
from mage_jax.engine.rollout_client import RolloutError
from mage_jax.rl.rollouts import RolloutContext, RolloutFn, RolloutGroup
from mage_jax.rl.sampler import FrontierSampler

MAX_FAILED_GROUPS_IN_A_ROW = 3


class RolloutWorkers:
  """Threads that keep at most (lag + 1) batches of groups admitted and not yet consumed."""

  def __init__(self, rollout_fn: RolloutFn, ctx: RolloutContext, sampler: FrontierSampler,
               admission: AdmissionWindow, *, groups_per_update: int, episodes_per_group: int,
               num_workers: int, learner_version: int, group_prefix: str,
               served_version: Callable[[], int] | None = None):
    self.rollout_fn, self.ctx, self.sampler, self.admission = rollout_fn, ctx, sampler, admission
    # the learner's record of the last sync that landed (no engine request under the lock);
    # ctx.version, read at each model call, is what stamps the samples
    self.served_version = served_version or ctx.version
    self.g, self.n = groups_per_update, episodes_per_group
    self.cond = threading.Condition()
    self.queue: collections.deque[RolloutGroup] = collections.deque()
    self.in_flight = 0            # groups admitted and not yet taken by the learner
    self.learner_version = learner_version
    self.error: BaseException | None = None
    self.failed_groups = 0        # groups lost to an engine error (dropped and counted)
    self.abandoned_groups = 0     # groups whose engine call failed after stop(): the run had ended
    self._failures_in_a_row = 0
    self.started_groups = 0
    self.prefix = group_prefix
    self._stop = threading.Event()
    self.threads = [threading.Thread(target=self._work, daemon=True, name=f"rollout-{i}")
                    for i in range(num_workers)]

  def start(self) -> "RolloutWorkers":
    for t in self.threads:
      t.start()
    return self

  def _work(self) -> None:
    while True:
      with self.cond:
        # Also hold new work while a sync is pending (served < learner): DESIGN.md admits
        # rollouts at a new version only once its weights are verified live, and work stamped
        # with the old version would start one update behind and could outlive the lag.
        while not self._stop.is_set() and self.error is None and (
            self.served_version() < self.learner_version or
            not self.admission.may_admit(self.learner_version, self.in_flight / self.g)):
          self.cond.wait(0.5)
        if self._stop.is_set() or self.error is not None:
          return
        self.in_flight += 1
        group_id = f"{self.prefix}g{self.started_groups:05d}"
        self.started_groups += 1
      task_id = self.sampler.sample(1)[0]
      try:
        group = self.rollout_fn(self.ctx, task_id, self.n, group_id)
      except RolloutError as e:
        # One slow or failed engine call must not end a days-long run: drop the group and
        # count it; several failures in a row mean the engine is gone, and the learner raises.
        with self.cond:
          self.in_flight -= 1
          if self._stop.is_set():   # the run ended under it (its engine stopped): not a drop
            self.abandoned_groups += 1
            self.cond.notify_all()
            return
          self.failed_groups += 1
          self._failures_in_a_row += 1
          print(f"rollout group {group_id} (task {task_id!r}) dropped: {e}", flush=True)
          if self._failures_in_a_row >= MAX_FAILED_GROUPS_IN_A_ROW:
            self.error = self.error or e
          self.cond.notify_all()
        continue
      except BaseException as e:  # noqa: BLE001 - a bug, not the engine: handed to the learner
        with self.cond:
          self.error = self.error or e
          self.in_flight -= 1
          self.cond.notify_all()
        return
      if group.episodes:
        self.sampler.update(task_id, group.rewards.tolist())
      with self.cond:
        self._failures_in_a_row = 0
        self.queue.append(group)
        self.cond.notify_all()

  def take(self, timeout_s: float, stop: Callable[[], bool] = lambda: False
           ) -> RolloutGroup | None:
    """The oldest finished group (still in flight until `release`d); None once `stop()` is
    true; raises the first worker error, or on timeout."""
    deadline = time.monotonic() + timeout_s
    with self.cond:
      while not self.queue:
        if stop():
          return None
        if self.error is not None:
          raise RolloutError(f"rollout worker failed: {type(self.error).__name__}: {self.error}"
                             ) from self.error
        if time.monotonic() > deadline:
          raise RolloutError(f"no rollout group finished in {timeout_s:.0f} s "
                             f"({self.in_flight} in flight); is the rollout engine alive?")
        self.cond.wait(0.5)
      return self.queue.popleft()

  def release(self, groups: int) -> None:
    """Taken groups stop counting as work in flight: dropped ones at once, trained ones once
    their update is applied (the batch being trained still counts against the window, or
    work admitted during the update could be consumed lag + 1 updates later)."""
    with self.cond:
      self.in_flight -= groups
      self.cond.notify_all()

  def set_learner_version(self, version: int) -> None:
    """Called after each update (holds admission until the sync lands) and after the sync."""
    with self.cond:
      self.learner_version = version
      self.cond.notify_all()

  def stop(self) -> None:
    """No new group is admitted; threads exit once their group returns."""
    self._stop.set()
    with self.cond:
      self.cond.notify_all()

  def close(self, timeout_s: float = 60.0) -> None:
    self.stop()
    deadline = time.monotonic() + timeout_s
    for t in self.threads:
      t.join(max(0.0, deadline - time.monotonic()))
