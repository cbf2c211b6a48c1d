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
A slot idle for more than IDLE_PROBE_S is asked `where()` again before it gets a job: an actor
whose node died while it sat idle is not yet known dead to Ray (the node's health checks take
seconds to fail), and the job handed to it would be lost without ever having run. Such a slot
is replaced without losing a job (`idle_deaths`); `wait_ready` probes every idle slot.
A job still running DEADLINE_GRACE_S after `EpisodeConfig.deadline_s` (stuck inside one step,
where the episode's own deadline check cannot run) is handled the same way, reported with
`error_reason="deadline"` and counted in `deadline_kills`.

`serve(feed)` drives the same loop from a `JobFeed` that many threads fill (the RL loop's
fleet-wide group queue). `connect` is safe from many threads. `env_nodes` / `probe_url` let the
RL loop check, at start-up, that every env host can reach the rollout engine.
"""
from __future__ import annotations

import collections
import contextlib
import ipaddress
import os
import socket
import threading
import time
from typing import Any, Callable, Iterable, Iterator
import urllib.request

from mage_jax.agent.env import Env
from mage_jax.agent.episode import EpisodeConfig, EpisodeResult
from mage_jax.agent.slots import EnvSlot, Job, JobFeed, OnDone, SlotPool
from mage_jax.machine import cgroup

try:
  import ray
  from ray import exceptions as ray_errors
except ImportError as e:  # the extra is optional; the local pool needs none of this
  raise ImportError("env.backend=ray needs Ray: pip install -e '.[ray]' "
                    f"(or the pinned ray in requirements-test.txt): {e}") from None

SLOT_RESOURCE = "env_slot"
# A job still running this long past EpisodeConfig.deadline_s (the episode checks it before each
# policy call) is stuck inside one step: its actor is killed and replaced.
DEADLINE_GRACE_S = 60.0
# A slot idle this long is probed (one where() round trip) before its next job.
IDLE_PROBE_S = 1.0


def _keep(result: EpisodeResult) -> None:
  """on_done of run(): results are yielded, nothing else to do."""

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


_CONNECT_LOCK = threading.Lock()


def _is_loopback_ip(host: str) -> bool:
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def connect(address: str = "", local_slots: int = 2) -> None:
  """Join the cluster at `address` ("auto", "host:port"); "" starts a private one-node Ray on
  this machine advertising `local_slots` env slots (development, `make demo`-size runs).
  Safe from many threads at once: the first caller connects, the others wait and return
  (ray.init is not: a second concurrent call raises "called ray.init twice")."""
  with _CONNECT_LOCK:
    if ray.is_initialized():
      return
    if address:
      # A head on a loopback address is on this host: join as that address too (Ray would
      # otherwise take this host's LAN address and find no raylet there).
      host = address.rsplit(":", 1)[0]
      local = {"_node_ip_address": host} if _is_loopback_ip(host) else {}
      ray.init(address=address, log_to_driver=False, **local)
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
    self._starting: dict[Any, int] = {}    # where() ref -> slot index (a new actor)
    self._probing: dict[Any, int] = {}     # where() ref -> slot index (an idle actor, re-checked)
    self.idle: collections.deque[int] = collections.deque()
    self._idle_since: dict[int, float] = {}
    self.restarts = 0                      # actors replaced after their actor or node died
    self.lost_jobs: list[str] = []         # episode ids reported as env_error for that reason
    self.start_failures = 0                # actors that died before answering where()
    self.deadline_kills = 0                # actors killed because their job overran the deadline
    self.idle_deaths = 0                   # idle actors found dead by a probe (no job lost)
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

  def _lost(self, i: int, job: Job, err: BaseException, reason: str = "slot_lost") -> EpisodeResult:
    self.lost_jobs.append(job.episode_id)
    node = (self.where[i] or {}).get("host", "?")
    self._replace(i)
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return EpisodeResult(job.task.id, job.task.kind, None, status="env_error", episode_id=job.episode_id,
                         error=f"env slot {i} on {node} lost during episode {job.episode_id}: "
                               f"{type(err).__name__}: {first[:300]}", error_reason=reason)

  def _set_idle(self, i: int) -> None:
    self.idle.append(i)
    self._idle_since[i] = time.monotonic()

  def _probe(self, i: int) -> None:
    self._probing[self.actors[i].where.remote()] = i

  def _take_idle(self) -> int | None:
    """An idle slot fit for a job now; slots idle too long go to a probe first."""
    while self.idle:
      i = self.idle.popleft()
      if time.monotonic() - self._idle_since[i] <= IDLE_PROBE_S:
        return i
      self._probe(i)
    return None

  def _answered(self, ref: Any) -> None:
    """A where() came back: a new actor is up, or a probed idle one is still alive."""
    if ref in self._probing:
      i = self._probing.pop(ref)
      try:
        self.where[i] = ray.get(ref)
        self._set_idle(i)
      except _ACTOR_GONE:
        self.idle_deaths += 1
        self._replace(i)
      return
    i = self._starting.pop(ref)
    try:
      self.where[i] = ray.get(ref)
      self._set_idle(i)
    except _ACTOR_GONE as e:
      self.start_failures += 1
      if self.start_failures > 3 * len(self.actors):
        raise RuntimeError(f"RaySlotPool: {self.start_failures} env slot actors died while "
                           f"starting; the last: {type(e).__name__}: {e}") from e
      self._replace(i)

  def wait_ready(self, timeout_s: float) -> int:
    """Wait (up to timeout_s) for slots still starting, e.g. replacements waiting for a host to
    come back, after asking every idle slot whether its actor still lives. Returns how many
    slots have an actor not known dead: idle ones that answered, plus probes still out when the
    time ran out. Call it between runs (a running job's slot is not counted)."""
    while self.idle:
      self._probe(self.idle.popleft())
    deadline = time.monotonic() + timeout_s
    while (self._starting or self._probing) and time.monotonic() < deadline:
      ready, _ = ray.wait(list(self._starting) + list(self._probing), num_returns=1,
                          timeout=max(0.0, deadline - time.monotonic()))
      for ref in ready:
        self._answered(ref)
    return len(self.idle) + len(self._probing)

  def run(self, jobs: Iterable[Job]) -> Iterator[EpisodeResult]:
    feed = JobFeed()
    for job in jobs:
      feed.put(job, _keep)
    feed.close()
    for _, result in self._drive(feed):
      yield result

  def serve(self, feed: JobFeed) -> None:
    for on_done, result in self._drive(feed):
      on_done(result)

  def _drive(self, feed: JobFeed) -> Iterator[tuple[OnDone, EpisodeResult]]:
    """Hand queued jobs to idle actors and yield (on_done, result) as jobs finish, until the
    feed is closed and drained and nothing runs."""
    running: dict[Any, tuple[int, Job, OnDone, float]] = {}   # run_job ref -> (slot, job, cb, t0)
    deadline = self.cfg.deadline_s + DEADLINE_GRACE_S if self.cfg.deadline_s > 0 else 0.0
    last_progress = time.monotonic()
    while running or not feed.drained:
      while self.idle and len(feed):
        i = self._take_idle()
        if i is None:
          break
        item = feed.take()
        if item is None:
          self._set_idle(i)
          break
        running[self.actors[i].run_job.remote(item[0])] = (i, item[0], item[1], time.monotonic())
      if deadline:
        for ref in [r for r, v in running.items() if time.monotonic() - v[3] > deadline]:
          i, job, on_done, t0 = running.pop(ref)
          self.deadline_kills += 1
          yield on_done, self._lost(i, job, TimeoutError(
              f"still running {time.monotonic() - t0:.0f} s after it started (deadline_s="
              f"{self.cfg.deadline_s:g} + {DEADLINE_GRACE_S:g} s grace): slot killed"), "deadline")
      waiting = list(running) + list(self._starting) + list(self._probing)
      if not waiting:   # every slot idle, the feed empty: wait for a job (or the close)
        feed.wait(1.0)
        continue
      # Short waits while the feed may bring work for an idle slot; else wait for Ray.
      ready, _ = ray.wait(waiting, num_returns=1, timeout=0.2 if self.idle else 1.0)
      if not ready:
        if len(feed) and not running and time.monotonic() - last_progress > self.start_timeout_s:
          raise RuntimeError(
              f"RaySlotPool: no env slot came up in {self.start_timeout_s:.0f}s with {len(feed)} jobs "
              f"left; the cluster has {ray.cluster_resources().get(SLOT_RESOURCE, 0)} "
              f"'{SLOT_RESOURCE}' resources (`ray status`; env hosts start with "
              f"--resources='{{\"{SLOT_RESOURCE}\": K}}')")
        if not len(feed):
          last_progress = time.monotonic()
        continue
      last_progress = time.monotonic()
      ref = ready[0]
      if ref in self._starting or ref in self._probing:
        self._answered(ref)
        continue
      i, job, on_done, _ = running.pop(ref)
      try:
        result, remote_policy = ray.get(ref)
      except _ACTOR_GONE as e:
        yield on_done, self._lost(i, job, e)
        continue
      except ray_errors.RayTaskError as e:   # the job could not run or come back (e.g. unpicklable)
        self._set_idle(i)
        yield on_done, EpisodeResult(job.task.id, job.task.kind, None, status="env_error",
                                     episode_id=job.episode_id,
                                     error=f"env slot {i}: episode {job.episode_id} failed in Ray: {e}")
        continue
      self._set_idle(i)
      absorb = getattr(job.policy, "absorb_remote", None)
      if absorb is not None:
        absorb(remote_policy)
      yield on_done, result

  def close(self) -> None:
    # Only actors that came up: one still waiting for a host would never answer.
    refs = [a.close.remote() for a, w in zip(self.actors, self.where) if a is not None and w is not None]
    try:
      ray.get(refs, timeout=60)
    except (ray_errors.RayError, ray_errors.GetTimeoutError):  # a dead slot has nothing to close
      pass
    for a in self.actors:
      ray.kill(a, no_restart=True)
    self.actors, self._starting, self._probing, self.idle = [], {}, {}, collections.deque()


# --- what the env hosts can reach (the RL loop's start-up checks, rl/engine_checks.py) -----------


def env_nodes() -> dict[str, str]:
  """Alive nodes that advertise env slots: node id -> node IP (Ray's address for the host)."""
  return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()
          if n["Alive"] and n["Resources"].get(SLOT_RESOURCE)}


def driver_ip() -> str:
  """The IP of the Ray node this process joined (what Ray knows this host by)."""
  me = ray.get_runtime_context().get_node_id()
  return next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == me)


def _fetch(url: str, timeout_s: float) -> str:
  try:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
      r.read(1)
    return ""
  except Exception as e:  # noqa: BLE001 - any failure is the answer: this host cannot reach it
    return f"{type(e).__name__}: {e}"


def probe_url(url: str, timeout_s: float = 10.0) -> dict[str, str]:
  """GET `url` once from every env node (a zero-CPU task pinned to the node); returns
  "<node IP>/<node id prefix>" -> "" if it answered, else the error (also when the task could
  not run there in time)."""
  from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy   # optional dependency: the `ray` extra
  fetch = ray.remote(num_cpus=0, max_retries=0)(_fetch)
  refs = {fetch.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                        ).remote(url, timeout_s): f"{ip}/{node[:8]}" for node, ip in env_nodes().items()}
  out = {}
  for ref, ip in refs.items():
    try:
      out[ip] = ray.get(ref, timeout=timeout_s + 120.0)   # + a worker process's start on a busy host
    except (ray_errors.RayError, ray_errors.GetTimeoutError) as e:
      out[ip] = f"probe task failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
  return out
