"""`RaySlotPool`: the `SlotPool` interface over a Ray cluster (the `ray` extra: pip install -e .[ray]).

One Ray actor per slot, each holding one long-lived environment (an `EnvSlot`: sandbox +
desktop, rebuilt in place after an env crash exactly as in the local pool). Actors ask for one
unit of the custom resource `env_slot`, so they land only on environment hosts, which advertise
how many slots they hold (`ray start --address=HEAD --resources='{"env_slot": K}'`; README,
"Environment fleet"). `run(jobs)` hands each job to an idle actor and yields its `EpisodeResult`
as it finishes (`ray.wait`), like `LocalSlotPool`.

What comes back: the actor returns the result and the job's policy as it stands after the
episode. A policy that records per-episode state (`rl.rollouts.RolloutPolicy`: samples with
their screenshots as numpy arrays) gets it through Ray's object store and takes it over with
`absorb_remote(remote_policy)`, so the learner receives the images it trains on. Trajectory
screenshots are written under `EpisodeConfig.out_dir` on the env host: a shared directory when
the hosts are many.

Faults. The episode is run at most once: actors are created with max_restarts=0 and
max_task_retries=0, so Ray never replays a job (replaying could score an episode twice or apply
its side effects twice). A job whose actor died (worker killed, node lost, object lost with it)
is reported as an `env_error` result naming the slot, node and episode, counted in `lost_jobs`
and never resubmitted; the slot's actor is replaced by a fresh one, which Ray places as soon as
some host has a free `env_slot` (the pool recovers when a host comes back). Jobs go only to
actors that answered `where()`, so surviving slots carry on while a replacement waits for room.
"""
from __future__ import annotations

import collections
import contextlib
import os
import socket
import time
from typing import Any, Callable, Iterable, Iterator

from mage_jax.agent import cgroup
from mage_jax.agent.env import Env
from mage_jax.agent.episode import EpisodeConfig, EpisodeResult
from mage_jax.agent.slots import EnvSlot, Job, SlotPool

try:
  import ray
  from ray import exceptions as ray_errors
except ImportError as e:  # the extra is optional; the local pool needs none of this
  raise ImportError("env.backend=ray needs Ray: pip install -e '.[ray]' "
                    f"(or the pinned ray in requirements-test.txt): {e}") from None

SLOT_RESOURCE = "env_slot"

# Failures that mean the actor (or the node under it) is gone, so the slot needs a new actor.
# RayTaskError is absent: it is an exception raised inside run_job, and the actor lives on.
# OutOfMemoryError: Ray's memory monitor killed the actor's worker (the host ran short).
_ACTOR_GONE = (ray_errors.RayActorError, ray_errors.WorkerCrashedError, ray_errors.NodeDiedError,
               ray_errors.ObjectLostError, ray_errors.OutOfMemoryError)


class SlotActor:
  """The actor body: one EnvSlot, its environment kept between jobs."""

  def __init__(self, env_factory: Callable[[], Env], cfg: EpisodeConfig, slots_on_host: int = 1):
    # the node runs up to `slots_on_host` such actors: each sandbox's default cgroup memory is the
    # node's budget over them, and a node too small for them is refused (cgroup.declare_slots)
    self._memory_share = contextlib.ExitStack()
    self._memory_share.enter_context(cgroup.declare_slots(slots_on_host))
    self.slot = EnvSlot(env_factory, cfg)

  def where(self) -> dict[str, Any]:
    return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
            "pid": os.getpid()}

  def run_job(self, job: Job) -> tuple[EpisodeResult, Any]:
    return self.slot.run_job(job), job.policy

  def close(self) -> None:
    self.slot.close()
    self._memory_share.close()


def connect(address: str = "", local_slots: int = 2) -> None:
  """Join the cluster at `address` ("auto", "host:port"); "" starts a private one-node Ray on
  this machine advertising `local_slots` env slots (development, `make demo`-size runs)."""
  if ray.is_initialized():
    return
  if address:
    ray.init(address=address, log_to_driver=False)
  else:
    ray.init(num_cpus=1, resources={SLOT_RESOURCE: local_slots}, include_dashboard=False,
             object_store_memory=200 * 2 ** 20, log_to_driver=False)


class RaySlotPool(SlotPool):
  def __init__(self, env_factory: Callable[[], Env], cfg: EpisodeConfig, num_slots: int = 2, *,
               address: str = "", slots_per_node: int = 2, start_timeout_s: float = 300.0):
    connect(address, max(slots_per_node, num_slots))
    self.env_factory, self.cfg, self.slots_per_node = env_factory, cfg, slots_per_node
    self.start_timeout_s = start_timeout_s
    self._remote = ray.remote(num_cpus=0, resources={SLOT_RESOURCE: 1}, max_restarts=0,
                              max_task_retries=0)(SlotActor)
    self.actors: list[Any] = [None] * max(1, num_slots)
    self.where: list[dict[str, Any] | None] = [None] * len(self.actors)
    self._starting: dict[Any, int] = {}    # where() ref -> slot index
    self.idle: collections.deque[int] = collections.deque()
    self.restarts = 0                      # actors replaced after their actor or node died
    self.lost_jobs: list[str] = []         # episode ids reported as env_error for that reason
    self.start_failures = 0                # actors that died before answering where()
    for i in range(len(self.actors)):
      self._spawn(i)

  def _spawn(self, i: int) -> None:
    self.actors[i] = self._remote.remote(self.env_factory, self.cfg, self.slots_per_node)
    self.where[i] = None
    self._starting[self.actors[i].where.remote()] = i

  def _replace(self, i: int) -> None:
    self.restarts += 1
    try:
      ray.kill(self.actors[i], no_restart=True)
    except Exception:  # noqa: BLE001 - the actor is already gone; killing is only tidying up
      pass
    self._spawn(i)

  def _lost(self, i: int, job: Job, err: BaseException) -> EpisodeResult:
    self.lost_jobs.append(job.episode_id)
    node = (self.where[i] or {}).get("host", "?")
    self._replace(i)
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return EpisodeResult(job.task.id, job.task.kind, None, status="env_error",
                         error=f"env slot {i} on {node} lost during episode {job.episode_id}: "
                               f"{type(err).__name__}: {first[:300]}")

  def _started(self, ref: Any) -> None:
    i = self._starting.pop(ref)
    try:
      self.where[i] = ray.get(ref)
      self.idle.append(i)
    except _ACTOR_GONE as e:
      self.start_failures += 1
      if self.start_failures > 3 * len(self.actors):
        raise RuntimeError(f"RaySlotPool: {self.start_failures} env slot actors died while "
                           f"starting; the last: {type(e).__name__}: {e}") from e
      self._replace(i)

  def wait_ready(self, timeout_s: float) -> int:
    """Wait (up to timeout_s) for slots still starting, e.g. replacements waiting for a host to
    come back; returns how many slots have a live actor."""
    deadline = time.monotonic() + timeout_s
    while self._starting and time.monotonic() < deadline:
      ready, _ = ray.wait(list(self._starting), num_returns=1,
                          timeout=max(0.0, deadline - time.monotonic()))
      for ref in ready:
        self._started(ref)
    return sum(w is not None for w in self.where)

  def run(self, jobs: Iterable[Job]) -> Iterator[EpisodeResult]:
    todo = collections.deque(jobs)
    running: dict[Any, tuple[int, Job]] = {}   # run_job ref -> (slot, job)
    last_progress = time.monotonic()
    while todo or running:
      while todo and self.idle:
        i, job = self.idle.popleft(), todo.popleft()
        running[self.actors[i].run_job.remote(job)] = (i, job)
      waiting = list(running) + list(self._starting)
      ready, _ = ray.wait(waiting, num_returns=1, timeout=1.0)
      if not ready:
        if not running and time.monotonic() - last_progress > self.start_timeout_s:
          raise RuntimeError(
              f"RaySlotPool: no env slot came up in {self.start_timeout_s:.0f}s with {len(todo)} jobs "
              f"left; the cluster has {ray.cluster_resources().get(SLOT_RESOURCE, 0)} "
              f"'{SLOT_RESOURCE}' resources (`ray status`; env hosts start with "
              f"--resources='{{\"{SLOT_RESOURCE}\": K}}')")
        continue
      last_progress = time.monotonic()
      ref = ready[0]
      if ref in self._starting:
        self._started(ref)
        continue
      i, job = running.pop(ref)
      try:
        result, remote_policy = ray.get(ref)
      except _ACTOR_GONE as e:
        yield self._lost(i, job, e)
        continue
      except ray_errors.RayTaskError as e:   # the job could not run or come back (e.g. unpicklable)
        self.idle.append(i)
        yield EpisodeResult(job.task.id, job.task.kind, None, status="env_error",
                            error=f"env slot {i}: episode {job.episode_id} failed in Ray: {e}")
        continue
      self.idle.append(i)
      absorb = getattr(job.policy, "absorb_remote", None)
      if absorb is not None:
        absorb(remote_policy)
      yield result

  def close(self) -> None:
    refs = [a.close.remote() for a in self.actors if a is not None]
    try:
      ray.get(refs, timeout=60)
    except (ray_errors.RayError, ray_errors.GetTimeoutError):  # a dead slot has nothing to close
      pass
    for a in self.actors:
      ray.kill(a, no_restart=True)
    self.actors, self._starting, self.idle = [], {}, collections.deque()
