"""Environment slots: a bounded pool that runs episodes concurrently.

`SlotPool` is the interface: `run(jobs)` yields one `EpisodeResult` per job
as they finish. `LocalSlotPool` backs it with N threads, each owning one
environment (its sandboxes are separate processes, so the GIL is not the
bottleneck: the Python side mostly waits on pipes and X). A job whose
environment raises (sandbox/X/app crash, setup failure) is reported with
status "env_error" (never scored as a policy failure) and the slot's
environment is closed and rebuilt before its next job.

`serve(feed)` is the streaming form: many producers put jobs into one `JobFeed` (FIFO, a queued
job can be cancelled) and every slot takes the next job as soon as it is free, until the feed is
closed and drained (the RL loop's fleet-wide group queue, rl/group_queue.py).

A job that runs past `EpisodeConfig.deadline_s` ends at its next policy call as an `env_error`
with `error_reason="deadline"` (run_episode raises `EpisodeDeadline`); the Ray pool also kills a
slot whose job overruns the deadline by `DEADLINE_GRACE_S` (a step that never returns).

`RaySlotPool` (agent/ray_slots.py, the optional `ray` extra) backs the same interface
with one Ray actor per slot on environment hosts; `make_pool` picks the backend from config
(`env.backend = "local" | "ray"`). See the README's "Environment fleet".
"""
from __future__ import annotations

import abc
import collections
import contextlib
import dataclasses
import queue
import threading
import traceback
from typing import Callable, Iterable, Iterator

from mage_jax.agent.env import Env
from mage_jax.agent.episode import EpisodeConfig, EpisodeDeadline, EpisodeResult, Policy, run_episode
from mage_jax.machine import cgroup
from mage_jax.tasks.package import TaskPackage


@dataclasses.dataclass
class Job:
  task: TaskPackage
  policy: Policy
  episode_id: str


OnDone = Callable[[EpisodeResult], None]


class JobFeed:
  """A thread-safe FIFO of (job, on_done) that many producers fill and one pool drains."""

  def __init__(self):
    self._items: collections.deque[tuple[Job, OnDone]] = collections.deque()
    self._cond = threading.Condition()
    self._closed = False

  def put(self, job: Job, on_done: OnDone) -> None:
    self.put_all([job], on_done)

  def put_all(self, jobs: Iterable[Job], on_done: OnDone) -> None:
    """Queue the jobs back to back (another producer's jobs never land between them)."""
    with self._cond:
      jobs = list(jobs)
      if self._closed:
        raise RuntimeError(f"JobFeed is closed: episodes {[j.episode_id for j in jobs]} cannot be queued")
      self._items.extend((job, on_done) for job in jobs)
      self._cond.notify_all()

  def take(self, timeout_s: float = 0.0) -> tuple[Job, OnDone] | None:
    """The oldest queued job, waiting up to timeout_s for one; None if there is none."""
    with self._cond:
      if not self._items and timeout_s > 0 and not self._closed:
        self._cond.wait(timeout_s)
      return self._items.popleft() if self._items else None

  def wait(self, timeout_s: float) -> None:
    """Until a job is queued or the feed is closed (at most timeout_s)."""
    with self._cond:
      if not self._items and not self._closed:
        self._cond.wait(timeout_s)

  def cancel(self, episode_ids: Iterable[str]) -> int:
    """Drop still-queued jobs with these episode ids; returns how many were dropped."""
    ids = set(episode_ids)
    with self._cond:
      keep = [it for it in self._items if it[0].episode_id not in ids]
      dropped = len(self._items) - len(keep)
      self._items = collections.deque(keep)
      return dropped

  def cancel_all(self) -> int:
    with self._cond:
      dropped, self._items = len(self._items), collections.deque()
      return dropped

  def close(self) -> None:
    """No more jobs: `serve` returns once the queued ones have run."""
    with self._cond:
      self._closed = True
      self._cond.notify_all()

  @property
  def drained(self) -> bool:
    with self._cond:
      return self._closed and not self._items

  def __len__(self) -> int:
    with self._cond:
      return len(self._items)


class SlotPool(abc.ABC):
  @abc.abstractmethod
  def run(self, jobs: Iterable[Job]) -> Iterator[EpisodeResult]: ...

  @abc.abstractmethod
  def serve(self, feed: JobFeed) -> None:
    """Run the feed's jobs on free slots as they come, calling each job's on_done with its
    result, until the feed is closed and drained."""


class EnvSlot:
  """One environment and the episodes it runs; rebuilt after a crash."""

  def __init__(self, env_factory: Callable[[], Env], cfg: EpisodeConfig):
    self.env_factory, self.cfg = env_factory, cfg
    self.env: Env | None = None
    self.restarts = 0

  def run_job(self, job: Job) -> EpisodeResult:
    if self.env is None:
      self.env = self.env_factory()
    try:
      return run_episode(self.env, job.task, job.policy, self.cfg, job.episode_id)
    except EpisodeDeadline as e:   # the env is sound (checked between steps): no rebuild
      return deadline_result(job, str(e), getattr(self.cfg.harness, "variant_id", ""))
    except Exception as e:  # noqa: BLE001 - any env failure is an env error, not a policy failure
      self.restart()
      return EpisodeResult(job.task.id, job.task.kind, None, status="env_error", episode_id=job.episode_id,
                           harness=getattr(self.cfg.harness, "variant_id", ""),
                           error=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")

  def restart(self) -> None:
    self.restarts += 1
    try:
      if self.env is not None:
        self.env.close()
    except Exception:  # noqa: BLE001 - the env is being discarded
      pass
    self.env = None

  def close(self) -> None:
    if self.env is not None:
      self.env.close()
      self.env = None


def deadline_result(job: Job, why: str, harness: str = "") -> EpisodeResult:
  return EpisodeResult(job.task.id, job.task.kind, None, status="env_error", episode_id=job.episode_id,
                       harness=harness, error=f"deadline: {why}", error_reason="deadline")


class LocalSlotPool(SlotPool):
  def __init__(self, env_factory: Callable[[], Env], cfg: EpisodeConfig, num_slots: int = 2):
    self.slots = [EnvSlot(env_factory, cfg) for _ in range(max(1, num_slots))]
    # until close: every sandbox's default cgroup memory is the host's budget over these slots,
    # and a pool too large for the host is refused here (cgroup.declare_slots)
    self._memory_share = contextlib.ExitStack()
    self._memory_share.enter_context(cgroup.declare_slots(len(self.slots)))

  def run(self, jobs: Iterable[Job]) -> Iterator[EpisodeResult]:
    todo: queue.Queue = queue.Queue()
    n = 0
    for job in jobs:
      todo.put(job)
      n += 1
    done: queue.Queue = queue.Queue()

    def worker(slot: EnvSlot) -> None:
      while True:
        try:
          job = todo.get_nowait()
        except queue.Empty:
          return
        done.put(slot.run_job(job))

    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in self.slots]
    for th in threads:
      th.start()
    for _ in range(n):
      yield done.get()
    for th in threads:
      th.join()

  def serve(self, feed: JobFeed) -> None:
    def worker(slot: EnvSlot) -> None:
      while not feed.drained:
        item = feed.take(timeout_s=0.5)
        if item is not None:
          job, on_done = item
          on_done(slot.run_job(job))

    threads = [threading.Thread(target=worker, args=(s,), daemon=True, name=f"env-slot-{i}")
               for i, s in enumerate(self.slots)]
    for th in threads:
      th.start()
    for th in threads:
      th.join()

  def close(self) -> None:
    for s in self.slots:
      s.close()
    self._memory_share.close()

  @property
  def restarts(self) -> int:
    return sum(s.restarts for s in self.slots)


BACKENDS = ("local", "ray")


def make_pool(backend: str, env_factory: Callable[[], Env], cfg: EpisodeConfig, num_slots: int, *,
              ray_address: str = "", slots_per_node: int = 2) -> SlotPool:
  """The pool config.env.backend names; Ray is imported only when asked for."""
  if backend == "local":
    return LocalSlotPool(env_factory, cfg, num_slots)
  if backend == "ray":
    from mage_jax.agent.ray_slots import RaySlotPool   # optional dependency: ray_slots imports Ray (the `ray` extra)
    return RaySlotPool(env_factory, cfg, num_slots, address=ray_address, slots_per_node=slots_per_node)
  raise ValueError(f"config.env.backend={backend!r}: expected one of {BACKENDS}")
