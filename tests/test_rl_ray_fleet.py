"""launch.rl with env.backend=ray on a local Ray cluster over loopback (a head with no env slots
and two env nodes, separate raylets on this machine), the engine bound at a non-default loopback
address and reached by the episodes at rl.engine_advertise_url: one env node is killed mid-run,
the run ends with every group counted, none twice, and lag <= 3. Then a node on another IP joins
(another host to Ray) and a loopback engine URL is refused at start-up with one line."""
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from tests._agent_helpers import RAY_TEST_HEALTH_CHECK, needs_sandbox

if os.environ.get("CI") == "true":
  import ray  # noqa: F401 - CI installs requirements-test.txt: a missing ray is a failure there
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 2 ** 20
HOST = "127.0.0.2"      # the cluster's address (127.0.0.1 is rewritten by Ray to the LAN address)
ENGINE_HOST = "127.0.0.3"
HEAD = dict(num_cpus=0, include_dashboard=False, object_store_memory=80 * MB, node_ip_address=HOST,
            _system_config=RAY_TEST_HEALTH_CHECK)
KILL_AFTER_S = 20.0    # after the run's header: pool actors are up, episodes running
ENV_NODE = dict(num_cpus=1, resources={"env_slot": 2}, object_store_memory=80 * MB, node_ip_address=HOST)


@pytest.fixture(scope="module")
def cluster():
  os.environ["RAY_memory_monitor_refresh_ms"] = "0"   # the shared machine's load is not the fault
  c = Cluster()
  _add_node(c, **HEAD)
  nodes = [_add_node(c, **ENV_NODE) for _ in range(2)]
  c.wait_for_nodes()
  try:
    yield c, nodes
  finally:
    c.shutdown()


def _add_node(c, **args):
  """Ray gives a node 30 s to register (hard-coded in ray._private.node); on a loaded 2-core
  machine its raylet can give up waiting for its agent first, so a node that failed to come up
  is started again (twice at most)."""
  for attempt in range(3):
    try:
      return c.add_node(**args)
    except Exception:   # noqa: BLE001 - "The current node timed out during startup"
      if attempt == 2:
        raise


def _free_port(host):
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def _launch_rl(workdir, address, *extra):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}   # one CPU device
  return subprocess.Popen(
      [sys.executable, "-m", "launch.rl", "--config=configs/stage5_rl.py:tiny", f"--workdir={workdir}",
       "--config.env.backend=ray", f"--config.env.ray_address={address}", *extra],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@needs_sandbox
@pytest.mark.timeout(1500)   # ~3 min on an idle 2-core machine; 10+ at load 20
def test_launch_rl_over_ray_survives_a_killed_env_node(cluster, tmp_path):
  c, nodes = cluster
  port = _free_port(ENGINE_HOST)
  url = f"http://{ENGINE_HOST}:{port}/v1"
  workdir = tmp_path / "rl"
  # 2 updates of 1 group x 2 episodes (+1 redundant) of one model call: the plumbing, small.
  proc = _launch_rl(workdir, c.address, "--config.rl.total_updates=2", "--config.rl.env_slots=4",
                    "--config.rl.groups_per_update=1", "--config.rl.episodes_per_group=2",
                    "--config.rl.max_episode_steps=1",
                    "--config.rl.group_redundancy=1", f"--config.rl.engine_host={ENGINE_HOST}",
                    f"--config.rl.engine_port={port}", f"--config.rl.engine_advertise_url={url}")
  out, killed = [], []

  def kill_one_node():   # mid-run: episodes of the first update's groups are running on both
    if proc.poll() is None:
      c.remove_node(nodes[1], allow_graceful=False)
      killed.append(proc.poll() is None)

  timer = None
  try:
    for line in proc.stdout:
      out.append(line)
      print(line, end="", flush=True)       # shown by pytest when the test fails
      if timer is None and "lag <=" in line:     # the run's header: rollout threads start now
        timer = threading.Timer(KILL_AFTER_S, kill_one_node)
        timer.start()
    proc.wait(timeout=120)
  finally:
    if timer is not None:
      timer.cancel()
    if proc.poll() is None:
      proc.kill()
  text = "".join(out)
  assert proc.returncode == 0, text[-4000:]
  assert killed == [True], text[-2000:]       # killed while the run was going on
  assert f"engine {url} reachable from 2 env nodes" in text, text[-3000:]

  summary = json.loads((workdir / "summary.json").read_text())
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()
          if '"reward_mean"' in line]
  assert summary["updates"] == 2 and [r["version"] for r in rows] == [1, 2]
  assert all(r["max_staleness"] <= 3 for r in rows)
  totals = summary["totals"]
  # Every trained group is whole or its missing episodes are counted env errors.
  assert all(r["episodes"] + r["env_errors"] >= 2 for r in rows)
  groups = [json.loads(line) for line in (workdir / "groups.jsonl").read_text().splitlines()]
  ids = [g["group_id"] for g in groups]
  assert len(ids) == len(set(ids)) == totals["groups"] == 2            # no group twice
  episodes = [e for g in groups for e in g.get("episode_ids", [])]
  assert len(episodes) == len(set(episodes))
  assert all(len(g["episode_ids"]) <= 2 and g["lag"] <= 3 for g in groups)
  # No group lost without a count: every started group was trained, dropped (stale / empty /
  # failed) or still in flight when the run ended (at most the admission window's 4).
  counted = (totals["groups"] + totals.get("dropped_stale_groups", 0) + totals.get("empty_groups", 0)
             + totals.get("failed_groups", 0))
  assert counted <= totals["started_groups"] <= counted + 4
  assert totals.get("failed_groups", 0) == 0                          # the engine never failed


def test_a_loopback_engine_url_is_refused_when_env_nodes_are_on_another_host(cluster, tmp_path):
  c, _ = cluster
  _add_node(c, num_cpus=0, resources={"env_slot": 1}, object_store_memory=80 * MB,
            node_ip_address="127.0.0.4")   # Ray tells hosts apart by node IP
  c.wait_for_nodes()
  proc = _launch_rl(tmp_path / "refused", c.address)
  out, _ = proc.communicate(timeout=300)
  assert proc.returncode != 0
  errors = [line for line in out.splitlines() if "config.rl.engine_advertise_url" in line]
  assert len(errors) == 1 and "loopback" in errors[0] and "127.0.0.4" in errors[0], out[-3000:]
  assert not (tmp_path / "refused" / "checkpoints").exists()            # refused before building
