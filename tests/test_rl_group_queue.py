"""The fleet-wide group queue (rl/group_queue.py) over the local slot pool with a fake
environment: redundancy keeps the first finishers and counts the dropped extras, queued extras
never start, an env error is replaced by an extra, every slot serves every group, and the
per-episode deadline ends an episode as env_error "deadline" (counted per group:
tests/test_rl_loop.py)."""
import threading
import time

from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.policies import ScriptedPolicy
from mage_jax.agent.slots import Job, LocalSlotPool
from mage_jax.tasks.builtin import builtin_packages
from mage_jax.rl.group_queue import GroupQueue
from tests._agent_helpers import SleepingEnv

TASK = next(p for p in builtin_packages() if p.id == "term_hello_file")   # 2 scripted steps


class TimedPolicy(ScriptedPolicy):
  """The scripted policy, sleeping `delay` (or until `hold` is set) before each call; logs
  (episode, start time, slot thread) when an episode starts."""

  def __init__(self, delay, log, crash=False, hold=None):
    super().__init__()
    self.delay, self.log, self.crash, self.hold = delay, log, crash, hold

  def act(self, request):
    if request.t == 1:
      self.log.append(("start", request.episode.id, time.monotonic(), threading.current_thread().name))
    if self.hold is not None:
      assert self.hold.wait(300)
    time.sleep(self.delay)
    if self.crash:   # what a dying sandbox looks like to the slot: an exception in the episode
      raise OSError("sandbox died")
    return super().act(request)


def _pool(slots, tmp_path, deadline_s=0.0):
  return LocalSlotPool(lambda: SleepingEnv(0.0), EpisodeConfig(out_dir=str(tmp_path), score_settle=0,
                                                 deadline_s=deadline_s), slots)


def test_redundancy_keeps_the_first_finishers_and_counts_the_late_extra(tmp_path):
  log, straggler = [], threading.Event()
  pool = _pool(3, tmp_path)
  q = GroupQueue(pool, redundancy=1)
  try:
    jobs = [Job(TASK, TimedPolicy(0.0, log, hold=straggler if i == 1 else None), f"g0-e{i}")
            for i in range(3)]
    results = q.run_group(jobs, keep=2)        # returns while g0-e1 is still held
    assert sorted(r.episode_id for r in results) == ["g0-e0", "g0-e2"]
    assert all(r.status == "terminated" and r.success for r in results)
    assert q.dropped_extras == 1
    straggler.set()
    time.sleep(0.5)
    assert len(results) == 2                   # its late result went nowhere
  finally:
    q.close()
    pool.close()


def test_queued_extras_never_start_and_an_env_error_is_replaced(tmp_path):
  log = []
  pool = _pool(1, tmp_path)
  q = GroupQueue(pool, redundancy=2)
  try:
    jobs = [Job(TASK, TimedPolicy(0.01, log), f"g1-e{i}") for i in range(3)]
    results = q.run_group(jobs, keep=1)
    assert [r.episode_id for r in results] == ["g1-e0"] and q.dropped_extras == 2
    time.sleep(0.3)
    assert [e for kind, e, *_ in log] == ["g1-e0"]          # the two queued extras were cancelled

    # One slot: episodes run in queue order; the first crashes its env, an extra fills in.
    jobs = [Job(TASK, TimedPolicy(0.01, log, crash=(i == 0)), f"g2-e{i}") for i in range(3)]
    results = q.run_group(jobs, keep=2)
    assert [(r.episode_id, r.status) for r in results] == [
        ("g2-e0", "env_error"), ("g2-e1", "terminated"), ("g2-e2", "terminated")]
    assert "sandbox died" in results[0].error and results[0].error_reason == ""
  finally:
    q.close()
    pool.close()


def test_every_slot_serves_every_group_in_queue_order(tmp_path):
  """Two groups of 2 from two threads over 3 shared slots: a per-thread pool would give each
  group its own slots; here the third slot takes the second group's first episode at once."""
  log, hold_a = [], threading.Event()
  pool = _pool(3, tmp_path)
  q = GroupQueue(pool)
  try:
    out = {}
    threads = [threading.Thread(target=lambda g=g: out.__setitem__(g, q.run_group(
        [Job(TASK, TimedPolicy(0.0, log, hold=hold_a if g == "a" else None), f"{g}-e{i}")
         for i in range(2)], keep=2))) for g in "ab"]
    threads[0].start()
    while len(log) < 2:          # a's two episodes run (held) before b is queued
      time.sleep(0.02)
    threads[1].start()
    threads[1].join(240)         # b finishes on the third slot while a is still held
    assert "b" in out and "a" not in out and len(out["b"]) == 2
    hold_a.set()
    threads[0].join(240)
    assert len(out["a"]) == 2
    starts = sorted(log, key=lambda r: r[2])
    # queue order: a's two (taken in order by two slot threads, whose first calls may log in
    # either order), then b's two one after the other on the one free slot
    order = [e for _, e, *_ in starts]
    assert sorted(order[:2]) == ["a-e0", "a-e1"] and order[2:] == ["b-e0", "b-e1"]
    assert len({slot for *_, slot in starts[:3]}) == 3                      # three slots
  finally:
    q.close()
    pool.close()


def test_an_episode_past_its_deadline_is_an_env_error_named_deadline(tmp_path):
  log = []
  pool = _pool(2, tmp_path, deadline_s=0.2)
  try:
    jobs = [Job(TASK, TimedPolicy(0.3, log), "slow"), Job(TASK, TimedPolicy(0.0, log), "fast")]
    res = {r.episode_id: r for r in pool.run(jobs)}
    assert res["slow"].status == "env_error" and res["slow"].error_reason == "deadline"
    assert "deadline_s=0.2" in res["slow"].error and res["slow"].model_calls == 0
    assert res["fast"].status == "terminated" and res["fast"].error_reason == ""
  finally:
    pool.close()
