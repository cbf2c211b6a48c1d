"""RaySlotPool on a local Ray cluster over loopback: a head with no slots and two env nodes
(separate raylet processes, each advertising `env_slot`), started and shut down here.

launch.eval over Ray gives the local pool's results; killing an env node mid-run loses no job
and scores none twice, and the pool recovers when a node comes back."""
import functools
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.policies import ScriptedPolicy
from mage_jax.agent import evaluation
from mage_jax.agent.slots import Job, LocalSlotPool, make_pool
from mage_jax.tasks.builtin import builtin_packages
from tests import _agent_helpers
from tests._agent_helpers import RAY_TEST_HEALTH_CHECK, SleepingEnv as SlowFakeEnv, local_env, needs_sandbox

if os.environ.get("CI") == "true":
  import ray  # noqa: F401 - CI installs requirements-test.txt: a missing ray is a failure there
ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from mage_jax.agent.ray_slots import RaySlotPool  # noqa: E402

TASKS = {p.id: p for p in builtin_packages()}
SLOTS_PER_NODE = 2
# Terminal tasks of the built-in suite, a mix of shell-only and file-format (xlsx, json) work.
EVAL_TASKS = ("term_hello_file", "term_multiply", "term_count_lines", "term_sort_names",
              "term_json_config", "term_xlsx_sum")
MB = 2 ** 20
# Node-death detection in ~8 s (RAY_TEST_HEALTH_CHECK), not the default ~30 s.
# Loopback only; 127.0.0.1 itself Ray rewrites to this host's LAN address when joining.
HOST = "127.0.0.2"
HEAD = dict(num_cpus=0, include_dashboard=False, object_store_memory=100 * MB, node_ip_address=HOST,
            _system_config=RAY_TEST_HEALTH_CHECK)
ENV_NODE = dict(num_cpus=1, resources={"env_slot": SLOTS_PER_NODE}, object_store_memory=80 * MB,
                node_ip_address=HOST)

# The fault test's fake env and policy live in this module; ship them by value to the workers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(_agent_helpers)


@pytest.fixture(scope="module")
def cluster():
  # The raylets inherit this: Ray's memory monitor would kill env actors when the shared test
  # machine (other jobs included) nears its threshold, which is not the fault under test.
  os.environ["RAY_memory_monitor_refresh_ms"] = "0"
  c = Cluster(initialize_head=True, head_node_args=HEAD)
  nodes = [c.add_node(**ENV_NODE) for _ in range(2)]
  c.wait_for_nodes()
  try:
    yield c, nodes
  finally:
    if ray.is_initialized():
      ray.shutdown()
    c.shutdown()


def _eval_over_ray(workdir, address):
  cmd = [sys.executable, "-m", "launch.eval", "--config=configs/eval.py:scripted",
         f"--workdir={workdir}", f"--config.tasks={','.join(EVAL_TASKS)}", "--config.slots=4",
         "--config.report=False",
         "--config.env.width=800", "--config.env.height=600", "--config.env.backend=ray",
         f"--config.env.ray_address={address}"]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  print(r.stdout[-1500:])
  return {e["task_id"]: e for e in json.loads((workdir / "results.json").read_text())["episodes"]}


@needs_sandbox
@pytest.mark.timeout(600)
def test_launch_eval_over_ray_equals_the_local_pool(cluster, tmp_path):
  c, _ = cluster
  over_ray = _eval_over_ray(tmp_path / "ray", c.address)
  # The reference: the same tasks through the local thread pool in this process (what
  # launch.eval runs by default; one subprocess less on a 2-core machine).
  pool = LocalSlotPool(local_env, EpisodeConfig(out_dir=str(tmp_path / "local")), 4)
  try:
    local = {r.task_id: r.summary() for r in
             evaluation.evaluate([TASKS[t] for t in EVAL_TASKS], lambda t: ScriptedPolicy(), pool)}
  finally:
    pool.close()
  terminal = sorted(EVAL_TASKS)
  assert sorted(local) == sorted(over_ray) == terminal
  fields = ("success", "steps", "score", "status", "model_calls", "terminal_actions")
  for tid in terminal:
    assert {f: over_ray[tid][f] for f in fields} == {f: local[tid][f] for f in fields}, tid
  assert all(e["success"] for e in over_ray.values())
  # Trajectory screenshots/text were written by the env actors under the (shared) workdir.
  assert len((tmp_path / "ray" / "episodes.jsonl").read_text().splitlines()) == len(terminal)


class LoggingPolicy(ScriptedPolicy):
  """The reference policy that appends a line "<pid> <node id>" to <log_dir>/<episode id> whenever
  an episode starts: a job Ray replayed would show two lines, and the node id says where it runs."""

  def __init__(self, log_dir):
    super().__init__()
    self.log_dir = log_dir
    self.calls = 0

  def act(self, request):
    if self.calls == 0:
      with open(os.path.join(self.log_dir, request.episode.id), "a") as f:
        f.write(f"{os.getpid()} {ray.get_runtime_context().get_node_id()}\n")
    self.calls += 1
    return super().act(request)

  def absorb_remote(self, remote):
    self.calls = remote.calls


def _running_on(log_dir, node_id, returned):
  """Episodes started on node `node_id` (LoggingPolicy's lines) whose result has not come back."""
  running = []
  for p in log_dir.iterdir():
    lines = p.read_text().splitlines()
    if p.name not in returned and lines and lines[-1].split()[-1] == node_id:
      running.append(p.name)
  return running


def _jobs(log_dir, prefix, n):
  task = TASKS["term_hello_file"]
  return [Job(task, LoggingPolicy(str(log_dir)), f"{prefix}{i}") for i in range(n)]


@pytest.mark.timeout(300)
def test_a_killed_env_node_loses_no_job_and_the_pool_recovers(cluster, tmp_path):
  c, nodes = cluster
  pool = make_pool("ray", functools.partial(SlowFakeEnv, step_s=1.0),
                   EpisodeConfig(out_dir=str(tmp_path / "shots"), score_settle=0),
                   2 * SLOTS_PER_NODE, ray_address=c.address)
  assert isinstance(pool, RaySlotPool)
  log_dir = tmp_path / "runs"
  log_dir.mkdir()
  jobs = _jobs(log_dir, "a", 8)
  results = []
  victim = nodes[1]
  killed_at = None
  try:
    for res in pool.run(jobs):
      results.append(res)
      if killed_at is None and len(results) >= 2:
        # Kill one env node's raylet and workers while an episode runs there (each takes ~2 s;
        # the check reads where episodes started, not the pool's state). A kill that finds the
        # victim's slots between episodes loses no job and tests nothing: CI saw that once.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not _running_on(
            log_dir, victim.node_id, {r.episode_id for r in results}):
          time.sleep(0.05)
        if _running_on(log_dir, victim.node_id, {r.episode_id for r in results}):
          c.remove_node(victim, allow_graceful=False)
          killed_at = len(results)
      elif killed_at is not None and len(results) == killed_at + 1:
        # the host comes back: the replacement actors get placed on it
        nodes[1] = c.add_node(wait=False, **ENV_NODE)
    ok = [r for r in results if r.status != "env_error"]
    lost = [r for r in results if r.status == "env_error"]
    assert killed_at is not None, "no episode ever ran on the victim node"
    assert len(results) == len(jobs)
    assert 1 <= len(lost) <= SLOTS_PER_NODE and len(pool.lost_jobs) == len(lost)
    assert all("lost during episode" in r.error and not r.success for r in lost)
    finished = [r.episode.id for r in ok]
    assert sorted(finished + pool.lost_jobs) == sorted(j.episode_id for j in jobs)  # each once
    assert all(r.success and r.steps == 2 for r in ok)
    # The driver-side policies took over the actors' state (what RL samples ride on).
    calls = {j.episode_id: j.policy.calls for j in jobs}
    assert all(calls[e] == 2 for e in finished)
    # No episode ran twice (Ray never replays a job: max_task_retries=0).
    starts = {p.name: len(p.read_text().splitlines()) for p in log_dir.iterdir()}
    assert all(starts[e] == 1 for e in finished) and max(starts.values()) == 1
    assert pool.restarts >= len(lost)

    # Recovered: every slot has a live actor again, on both env nodes.
    assert pool.wait_ready(120) == 2 * SLOTS_PER_NODE
    # (wait_ready probes the idle slots: one that sat idle on the killed node, never handed a
    # job there, is replaced here rather than losing the next job: CI saw that once)
    again = list(pool.run(_jobs(log_dir, "b", 4)))
    assert [r.status for r in again].count("env_error") == 0 and len(again) == 4, \
        [(r.status, r.error) for r in again]
    # (the GCS marks the killed node dead after its missed health checks: up to ~8 s, longer on a
    # loaded machine; its actors were reported dead long before, when their workers died)
    for _ in range(120):
      alive = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("env_slot")}
      if len(alive) == 2:
        break
      time.sleep(0.5)
    assert {w["node"] for w in pool.where} == alive and len(alive) == 2
  finally:
    pool.close()


def test_a_rollout_policy_copy_brings_its_samples_and_screenshots_back():
  """What RL rides on over Ray: the policy pickles with its context to the env host, and the
  driver's instance takes over the samples the actor's copy recorded, with their screenshots
  (packed on the way back: tests/test_rl_screenshot_pack.py)."""
  import numpy as np
  from mage_jax.rl.batch import RLSample
  from mage_jax.engine.rollout_client import RolloutClient
  from mage_jax.rl.rollouts import RolloutContext, RolloutPolicy
  policy = RolloutPolicy(RolloutContext(RolloutClient("http://127.0.0.1:1/v1", "mage"), lambda: 3),
                         "term_hello_file", "g-e0")
  remote = cloudpickle.loads(cloudpickle.dumps(policy))
  shot = np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3)
  remote.samples.append(RLSample([1, 2], [3], [-0.5], 0.0, remote.ctx.version(), images=[shot]))
  remote.samples.append(RLSample([1, 2, 3], [4], [-0.5], 0.0, 4, images=[shot.copy(), shot[::-1].copy()]))
  back = cloudpickle.loads(cloudpickle.dumps(remote))
  policy.absorb_remote(back)
  assert [s.version for s in policy.samples] == [3, 4] and policy.returned_image_bytes > 0
  np.testing.assert_array_equal(policy.samples[0].images[0], shot)
  np.testing.assert_array_equal(policy.samples[1].images[1], shot[::-1])
  assert policy.samples[1].images[0] is policy.samples[0].images[0]   # sent once


@pytest.mark.timeout(300)
def test_an_episode_on_an_env_node_stamps_each_call_with_the_version_served_then(cluster, tmp_path):
  """RL over Ray: the policy runs inside the env node's actor and reads each call's version off
  the engine there (GET /weight_info), so a weight sync landing while call 1 is in flight gives
  call 2 the new version; a snapshot pickled with the job would stamp both 0."""
  from mage_jax.bench.fleet_sim import WaitEnv
  from mage_jax.engine.rollout_client import RolloutClient
  from mage_jax.rl.rollouts import HarnessRollouts, RolloutContext, ServedVersion
  from tests._engine_stub import TERMINATE, WAIT, ScriptedEngine
  c, _ = cluster
  task = TASKS["term_hello_file"]
  cfg = EpisodeConfig(out_dir=str(tmp_path), score_settle=0, max_steps=2)
  learner_counter = [0]     # the learner's record: it never moves in this test
  with ScriptedEngine([WAIT, TERMINATE]) as engine:
    client = RolloutClient(engine.url, "mage", timeout=60)
    engine.on_call = lambda i: i == 0 and client.update_weight_version("1")
    ctx = RolloutContext(client, ServedVersion(client, lambda: learner_counter[0]), max_tokens=3)
    rollouts = HarnessRollouts([task], WaitEnv, cfg, 1, group_queue="shared",
                               pool_factory=lambda: make_pool("ray", WaitEnv, cfg, 1, ray_address=c.address))
    try:
      group = rollouts(ctx, task.id, 1, "g0")
    finally:
      rollouts.close()
  assert group.env_errors == 0 and engine.calls == 2
  assert [s.version for s in group.episodes[0].samples] == [0, 1] and group.version == 0


@pytest.mark.timeout(300)
def test_pools_created_from_16_threads_at_once_share_one_ray_connection(cluster, tmp_path):
  """ray.init is not thread-safe (a second concurrent call raises 'called ray.init twice');
  ray_slots.connect serialises it, so 16 rollout threads may each build a pool at once."""
  c, _ = cluster
  if ray.is_initialized():
    ray.shutdown()
  cfg = EpisodeConfig(out_dir=str(tmp_path), score_settle=0)
  start, pools, errors = threading.Barrier(16), [], []

  def build():
    start.wait()
    try:
      pools.append(RaySlotPool(SlowFakeEnv, cfg, 1, address=c.address))
    except Exception as e:  # noqa: BLE001 - collected and asserted below
      errors.append(e)

  threads = [threading.Thread(target=build) for _ in range(16)]
  for th in threads:
    th.start()
  for th in threads:
    th.join(120)
  try:
    assert not errors, errors[:2]
    assert len(pools) == 16 and ray.is_initialized()
    # 4 env slots in the cluster: 4 pools get an actor, the other 12 wait for room.
    deadline = time.monotonic() + 90
    while sum(p.wait_ready(0.2) for p in pools) < 2 * SLOTS_PER_NODE and time.monotonic() < deadline:
      pass
    assert sum(p.wait_ready(0.0) for p in pools) == 2 * SLOTS_PER_NODE
  finally:
    for p in pools:
      p.close()


@pytest.mark.timeout(300)
def test_a_job_stuck_past_its_deadline_is_killed_and_counted(cluster, tmp_path, monkeypatch):
  """A step that never returns: the episode's own deadline check cannot run, so the pool kills
  the slot DEADLINE_GRACE_S after the deadline and reports env_error "deadline".

  deadline_s is 5 s, not less: under a loaded CI box the actor's first reset once took 0.8 s, so
  the episode's own check ("before call 1") answered before the step could hang."""
  from mage_jax.agent import ray_slots
  c, _ = cluster
  monkeypatch.setattr(ray_slots, "DEADLINE_GRACE_S", 1.0)
  cfg = EpisodeConfig(out_dir=str(tmp_path), score_settle=0, deadline_s=5.0)
  pool = make_pool("ray", lambda: SlowFakeEnv(step_s=600.0), cfg, 1, ray_address=c.address)
  try:
    log_dir = tmp_path / "runs"
    log_dir.mkdir()
    [res] = list(pool.run(_jobs(log_dir, "d", 1)))
    assert res.status == "env_error" and res.error_reason == "deadline", res.error
    assert "slot killed" in res.error and "deadline_s=5" in res.error, res.error
    assert pool.deadline_kills == 1 and pool.lost_jobs == ["d0"]
    assert pool.wait_ready(120) == 1          # a fresh actor took the slot
  finally:
    pool.close()


@pytest.mark.timeout(300)
def test_a_slot_that_died_while_idle_is_replaced_before_it_gets_a_job(cluster, tmp_path):
  """An actor killed while it waits for work (its node or worker gone between jobs): the next
  job must not be handed to it and lost unrun. The pool probes a slot idle for more than
  IDLE_PROBE_S, replaces the dead actor and runs the job on the new one."""
  import signal
  from mage_jax.agent import ray_slots
  c, _ = cluster
  pool = make_pool("ray", SlowFakeEnv, EpisodeConfig(out_dir=str(tmp_path), score_settle=0), 1,
                   ray_address=c.address)
  try:
    assert pool.wait_ready(120) == 1
    os.kill(pool.where[0]["pid"], signal.SIGKILL)
    time.sleep(ray_slots.IDLE_PROBE_S + 1.0)   # Ray learns of the death; the slot is now "stale"
    log_dir = tmp_path / "runs"
    log_dir.mkdir()
    [res] = list(pool.run(_jobs(log_dir, "i", 1)))
    assert res.status == "terminated" and res.success, (res.status, res.error)
    assert pool.lost_jobs == [] and pool.idle_deaths == 1 and pool.restarts == 1
  finally:
    pool.close()
