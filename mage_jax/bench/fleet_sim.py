"""Slot utilisation of the RL environment fleet (`python -m launch.bench --suite=fleet`).

Utilisation = busy slot-seconds / slot-seconds. Two measurements:

* `simulate`: an event simulation of the stage-5 shape (1,120 slots, 96 groups x 8 episodes per
  update, admission window lag + 1 = 4 updates of groups, a learner update of `update_s` after
  each 96 groups) with episode durations drawn from a log-normal spread, for today's per-worker
  pools (96 threads with 11 slots each, a thread waits for its group's slowest episode) and the
  shared group queue (every admitted group's episodes in one FIFO over all slots, with optional
  redundancy: extras still running when their group fills keep their slot busy and are dropped).
* `replay`: the same two schemes at a small scale through the real pools (`LocalSlotPool`, and
  `RaySlotPool` on a private one-node Ray) and the real `GroupQueue` / per-thread pools of
  `HarnessRollouts`, episodes being scripted waits of durations from the same spread (no
  sandbox, no engine), all groups admitted at once; busy time is each episode's wall time.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import os
import tempfile
import threading
import time
from typing import Any

import numpy as np

from mage_jax.agent.env import Env, Observation


@dataclasses.dataclass
class Shape:
  slots: int = 1_120
  groups_per_update: int = 96
  episodes_per_group: int = 8
  window: int = 4                    # admission window in updates (max_policy_lag + 1)
  workers: int = 96                  # per-worker scheme: threads, each with slots // workers slots
  median_s: float = 300.0            # episode duration: log-normal, this median ...
  sigma: float = 0.6                 # ... and this log-space spread (p90 / median ~ 2.2)
  update_s: float = 60.0             # learner step + weight sync per update
  updates: int = 40


def durations(rng: np.random.Generator, shape: Shape, n: int) -> np.ndarray:
  return shape.median_s * np.exp(shape.sigma * rng.standard_normal(n))


def simulate(shape: Shape, scheme: str, redundancy: int = 0, seed: int = 0) -> dict[str, float]:
  """Run `shape.updates` updates; utilisation is measured after the first `window` updates
  (the start-up ramp) until the last update is collected."""
  if scheme not in ("per_worker", "shared"):
    raise ValueError(f"scheme={scheme!r}: 'per_worker' or 'shared'")
  rng = np.random.default_rng(seed)
  n, g = shape.episodes_per_group, shape.groups_per_update
  threads = shape.workers if scheme == "per_worker" else shape.window * g
  per_worker_slots = shape.slots // shape.workers
  if scheme == "per_worker" and per_worker_slots < n:
    raise ValueError(f"{shape.slots} slots over {shape.workers} workers: {per_worker_slots} per "
                     f"worker, fewer than a group's {n} episodes (not modelled)")
  jobs_per_group = n + (redundancy if scheme == "shared" else 0)
  # Events: (time, order, kind, payload). Kinds: "admit" (a thread may start a group), "end" (an
  # episode ends on a slot), "update" (the learner applied an update).
  events: list = []
  order = itertools.count()
  push = lambda t, kind, payload=None: heapq.heappush(events, (t, next(order), kind, payload))
  in_flight = 0                       # groups admitted and not yet released by an update
  done_groups: list[int] = []         # groups finished, waiting for the learner
  learner_busy_until, updates = 0.0, 0
  idle_threads = threads
  free_slots = shape.slots if scheme == "shared" else None
  worker_free = [per_worker_slots] * shape.workers
  queue: list[tuple[int, float]] = []            # shared FIFO: (group, duration)
  group_left = {}                                 # group -> episodes still needed
  group_worker = {}
  busy, window_start, window_end = 0.0, None, None
  gid = itertools.count()

  busy_spans: list[tuple[float, float]] = []

  def start(t: float, slot_owner: Any, group: int, dur: float) -> None:
    push(t + dur, "end", (slot_owner, group))
    busy_spans.append((t, t + dur))

  def admit(t: float) -> None:
    nonlocal in_flight, idle_threads
    while idle_threads and in_flight < shape.window * g:
      idle_threads -= 1
      in_flight += 1
      gr = next(gid)
      group_left[gr] = n
      ds = durations(rng, shape, jobs_per_group)
      if scheme == "per_worker":
        w = next(i for i, free in enumerate(worker_free) if free == per_worker_slots)
        worker_free[w] -= n
        group_worker[gr] = w
        for d in ds:
          start(t, w, gr, d)
      else:
        queue.extend((gr, d) for d in ds)
    dispatch(t)

  def dispatch(t: float) -> None:
    nonlocal free_slots
    if scheme != "shared":
      return
    while free_slots and queue:
      gr, d = queue.pop(0)
      if group_left.get(gr, 0) <= 0:      # the group filled while this extra was queued
        continue
      free_slots -= 1
      start(t, None, gr, d)

  def learner(t: float) -> None:
    nonlocal learner_busy_until
    if t >= learner_busy_until and len(done_groups) >= g:
      del done_groups[:g]
      learner_busy_until = t + shape.update_s
      push(learner_busy_until, "update")

  admit(0.0)
  while events and updates < shape.updates:
    t, _, kind, payload = heapq.heappop(events)
    if kind == "end":
      owner, gr = payload
      if scheme == "shared":
        free_slots += 1
      if gr in group_left and group_left[gr] > 0:
        group_left[gr] -= 1
        if group_left[gr] == 0:
          done_groups.append(gr)
          if scheme == "per_worker":
            group_left[gr] = -1          # the thread waits for the rest (ends below)
          else:
            idle_threads += 1
            queue[:] = [q for q in queue if q[0] != gr]      # cancel queued extras
      if scheme == "per_worker":
        worker_free[owner] += 1
        if worker_free[owner] == per_worker_slots:          # the group's slowest episode ended
          idle_threads += 1
      learner(t)
      admit(t)
    elif kind == "update":
      updates += 1
      in_flight -= g
      if updates == shape.window:
        window_start = t
      window_end = t
      learner(t)
      admit(t)
  span = (window_end or 0.0) - (window_start or 0.0)
  if span <= 0:
    raise RuntimeError(f"simulate: only {updates} updates happened; raise shape.updates")
  for a, b in busy_spans:
    busy += max(0.0, min(b, window_end) - max(a, window_start))
  return {"utilisation": busy / (shape.slots * span), "updates_per_hour": (updates - shape.window) / span * 3600,
          "threads": float(threads)}


def arithmetic_bound(shape: Shape) -> float:
  """Today's ceiling by arithmetic: slots a per-worker scheme can ever have busy."""
  return min(shape.episodes_per_group, shape.slots // shape.workers) * shape.workers / shape.slots


# --- replay through the real pools ----------------------------------------------------------------


class WaitEnv(Env):
  """No machine behind it: the episode's time is spent in its policy's wait."""

  def reset(self, task):
    return Observation(text="$ ")

  def step(self, name, arguments):
    return Observation(text="ok", done=arguments.get("action") == "terminate",
                       status=arguments.get("status"))

  def screenshot(self):
    return None

  def score(self):
    return 1.0

  def close(self):
    pass


class WaitPolicy:
  """Waits `seconds` on its first call, then terminates (one model call per episode)."""

  def __init__(self, seconds: float):
    self.seconds = seconds

  def act(self, request):
    from mage_jax.agent.episode import PolicyOutput   # the bare GPU image runs this module: each path imports only what it needs
    time.sleep(self.seconds)
    return PolicyOutput(text='<tool_call>\n{"name": "computer_use", "arguments": '
                             '{"action": "terminate", "status": "success"}}\n</tool_call>')


def replay(backend: str, scheme: str, *, slots: int, workers: int, groups: int, episodes: int,
           median_s: float, sigma: float = 0.6, seed: int = 0) -> dict[str, float]:
  """`groups` groups of `episodes` waits through real pools, all admitted at once (the window
  never binds): per_worker = `workers` threads with slots // workers slots each; shared = one
  pool of `slots` fed by the GroupQueue, one thread per group."""
  from mage_jax.agent.episode import EpisodeConfig   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.agent.slots import Job, make_pool   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.tasks.builtin import builtin_packages   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.rl.group_queue import GroupQueue   # the bare GPU image runs this module: each path imports only what it needs
  task = builtin_packages()[0]
  cfg = EpisodeConfig(out_dir=tempfile.mkdtemp(prefix="fleet_sim_"), score_settle=0)
  rng = np.random.default_rng(seed)
  waits = median_s * np.exp(sigma * rng.standard_normal((groups, episodes)))
  results, lock = [], threading.Lock()

  def jobs(gr: int) -> list:
    return [Job(task, WaitPolicy(float(w)), f"g{gr}-e{i}") for i, w in enumerate(waits[gr])]

  pools = []
  if scheme == "shared":
    pool = make_pool(backend, WaitEnv, cfg, slots, slots_per_node=slots)
    pools.append(pool)
    _warm(pool, slots, task)
    q = GroupQueue(pool)
    work = lambda gr: q.run_group(jobs(gr), keep=episodes)
    threads = [threading.Thread(target=lambda gr=gr: _collect(results, lock, work(gr))) for gr in range(groups)]
  else:
    per = slots // workers
    todo = list(range(groups))

    def worker(pool) -> None:
      while True:
        with lock:
          if not todo:
            return
          gr = todo.pop(0)
        _collect(results, lock, list(pool.run(jobs(gr))))

    for _ in range(workers):
      pools.append(make_pool(backend, WaitEnv, cfg, per, slots_per_node=slots))
      _warm(pools[-1], per, task)
    threads = [threading.Thread(target=worker, args=(p,)) for p in pools]
  t0 = time.perf_counter()
  for th in threads:
    th.start()
  for th in threads:
    th.join()
  wall = time.perf_counter() - t0
  if scheme == "shared":
    q.close()
  for p in pools:
    p.close()
  busy = sum(r.wall_time for r in results)
  ok = sum(r.status != "env_error" for r in results)
  return {"utilisation": busy / (slots * wall), "wall_s": wall, "episodes": float(ok),
          "ideal_s": float(waits.sum() / slots)}


def _collect(results: list, lock: threading.Lock, rs: list) -> None:
  with lock:
    results.extend(rs)


def _warm(pool, slots: int, task) -> None:
  """One short episode per slot so environments (and Ray actors) are up before the clock starts."""
  from mage_jax.agent.slots import Job   # the bare GPU image runs this module: each path imports only what it needs
  list(pool.run([Job(task, WaitPolicy(0.0), f"warm{i}") for i in range(slots)]))


def run_suite(quick: bool = False, with_ray: bool = True) -> tuple[list, dict[str, Any]]:
  from mage_jax.bench.results import Row, goal_row   # the bare GPU image runs this module: each path imports only what it needs
  os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
  shape = Shape(updates=12 if quick else 40)
  cmd = "python -m launch.bench --suite=fleet"
  rows, details = [], {"shape": dataclasses.asdict(shape)}
  bound = arithmetic_bound(shape)
  rows.append(Row("fleet_per_worker_ceiling_arithmetic", bound, "fraction", command=cmd,
                  note=f"{min(shape.episodes_per_group, shape.slots // shape.workers) * shape.workers} "
                       f"of {shape.slots} slots ever busy"))
  for scheme, k in (("per_worker", 0), ("shared", 0), ("shared", 1)):
    sim = simulate(shape, scheme, k)
    details[f"sim_{scheme}_k{k}"] = sim
    name = f"fleet_sim_{scheme}" + (f"_redundancy{k}" if k else "")
    note = (f"stage-5 shape, episodes log-normal median {shape.median_s:g} s sigma {shape.sigma}, "
            f"update {shape.update_s:g} s; {sim['updates_per_hour']:.1f} updates/h")
    rows.append(goal_row(name, sim["utilisation"], "fraction", 0.9, command=cmd, note=note)
                if scheme == "shared" else Row(name, sim["utilisation"], "fraction", command=cmd, note=note))
  # Real pools at a small scale: 6 slots, 3 workers of 2, groups of 2 (the shape's slot surplus
  # per worker is 11 - 8 = 3 of 11; here 0 of 2, so the per-worker loss is only the straggler wait).
  small = dict(slots=6, workers=3, groups=6 if quick else 12, episodes=2, median_s=0.5 if quick else 1.0)
  details["replay_shape"] = small
  for backend in (("local", "ray") if with_ray else ("local",)):
    for scheme in ("per_worker", "shared"):
      rep = replay(backend, scheme, **small)
      details[f"replay_{backend}_{scheme}"] = rep
      rows.append(Row(f"fleet_replay_{backend}_{scheme}", rep["utilisation"], "fraction", command=cmd,
                      note=f"{small['slots']} slots, {int(rep['episodes'])} scripted waits, "
                           f"{rep['wall_s']:.1f} s (ideal {rep['ideal_s']:.1f} s)"))
      print(backend, scheme, rep, flush=True)
  return rows, details
