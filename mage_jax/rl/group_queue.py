"""One fleet-wide queue of rollout groups feeding every environment slot (ROLL's GroupQueue).

Each rollout thread of the RL loop submits its group's episodes (`group_size + redundancy`
jobs) to one `JobFeed` that a single slot pool (local threads or Ray actors, `env.backend`)
drains in FIFO order: every free slot takes the oldest queued episode, whichever group it
belongs to, so no slot waits for a per-thread pool's slowest episode and no slot is left
unallocated by an `env_slots / rollout_workers` split.

A group is done once `group_size` of its episodes have finished without an environment error
(the first to finish are kept), or once every job has reported. Its extra episodes still queued
are cancelled; those still running finish on their slot and their results are dropped. Both are
counted as the group's `dropped_extras`. Keeping the first finishers favours shorter episodes
within a group (ROLL accepts the same bias for the straggler time it saves); redundancy 0 (the
default) keeps every episode.
"""
from __future__ import annotations

import threading
from typing import Sequence

from mage_jax.agent.episode import EpisodeResult
from mage_jax.agent.slots import Job, JobFeed, SlotPool


class _Group:
  """The results of one group's jobs as they arrive (`add` runs on the pool's thread)."""

  def __init__(self, keep: int, jobs: Sequence[Job], feed: JobFeed):
    self.keep, self.ids, self.feed = keep, [j.episode_id for j in jobs], feed
    self.cond = threading.Condition()
    self.results: list[EpisodeResult] = []

  def add(self, result: EpisodeResult) -> None:
    with self.cond:
      if self.complete():   # a late extra: dropped (counted by run_group)
        return
      self.results.append(result)
      if self.complete():   # cancel the queued extras before this slot takes its next job
        reported = {r.episode_id for r in self.results}
        self.feed.cancel(i for i in self.ids if i not in reported)
      self.cond.notify_all()

  def complete(self) -> bool:
    ok = sum(r.status != "env_error" for r in self.results)
    return ok >= self.keep or len(self.results) >= len(self.ids)


class GroupQueue:
  """A slot pool served from one feed; `run_group` blocks its caller until the group is done."""

  def __init__(self, pool: SlotPool, redundancy: int = 0):
    if redundancy < 0:
      raise ValueError(f"GroupQueue: redundancy={redundancy} must be >= 0")
    self.pool, self.redundancy = pool, int(redundancy)
    self.feed = JobFeed()
    self.error: BaseException | None = None
    self.dropped_extras = 0           # extra episodes cancelled in the queue or dropped when late
    self.closed = False
    self._lock = threading.Lock()
    self._thread = threading.Thread(target=self._serve, daemon=True, name="group-queue")
    self._thread.start()

  def _serve(self) -> None:
    try:
      self.pool.serve(self.feed)
    except BaseException as e:  # noqa: BLE001 - handed to every waiting group, then re-raised there
      self.error = e

  def run_group(self, jobs: Sequence[Job], keep: int) -> list[EpisodeResult]:
    """Queue the jobs (`keep` + redundancy of them); returns, in finishing order, the results
    received until `keep` episodes finished without an env error (or every job reported)."""
    group = _Group(keep, jobs, self.feed)
    self.feed.put_all(jobs, group.add)   # a group's episodes are contiguous in the queue
    with group.cond:
      while not group.complete():
        if self.closed:
          raise RuntimeError(f"the group queue was closed with {len(group.results)} of {keep} "
                             "episodes back (the run is ending)")
        if self.error is not None:
          raise RuntimeError(f"the slot pool stopped: {type(self.error).__name__}: {self.error}"
                             ) from self.error
        group.cond.wait(0.5)
      results = list(group.results)
    # Queued extras were cancelled when the group filled; running ones finish and are dropped.
    with self._lock:
      self.dropped_extras += len(jobs) - len(results)
    return results

  def close(self, timeout_s: float = 60.0) -> None:
    """Drop every queued episode, end the waiting groups, let running episodes finish."""
    self.closed = True
    self.feed.close()
    self.feed.cancel_all()
    self._thread.join(timeout_s)
