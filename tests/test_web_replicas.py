"""Web replicas (mage_jax/tasks/web): the server outside the workload's reach, fresh databases per
episode, Chromium bounded by a memory cgroup, and web task packages driven through Chromium itself."""
import os
import subprocess
import time

import pytest

from _agent_helpers import needs_sandbox
from mage_jax.machine import cgroup as cgroup_lib
from mage_jax.agent.env import EnvConfig, LocalEnv
from mage_jax.machine.sandbox import Sandbox, sandbox_env
from mage_jax.forge.package_gates import check_package, run_calls
from mage_jax.tasks.package import load_package, package_from_dict
from mage_jax.tasks.web import browser, replica

TASKS = os.path.join(os.path.dirname(replica.__file__), "tasks")
_cg, _why = cgroup_lib.create(64 << 20, 16)
if _cg is not None:
  _cg.close()
needs_cgroup = pytest.mark.skipif(_cg is None, reason=f"no writable cgroup: {_why}")
needs_chromium = pytest.mark.skipif(not os.path.exists(browser.CHROMIUM), reason="chromium is not installed")
CFG = EnvConfig(width=1280, height=800)


def _shop_task(kind="terminal"):
  return package_from_dict({"id": "shop_probe", "instruction": "probe", "kind": kind,
                            "setup": [{"type": "web_replica", "app": "shop"}],
                            "checker": {"type": "web_db", "app": "shop", "query": "SELECT count(*) FROM orders",
                                        "rows": [[2]]}})


@needs_sandbox
def test_replica_is_http_only_and_reset_per_episode():
  env = LocalEnv(CFG)
  try:
    env.reset(_shop_task())
    rep = replica.replica_of(env.sandbox, "shop")
    assert env.score() == 0.0  # the seed data has one order
    out = env.step("bash", {"command": "curl -sf -X POST -H 'Content-Type: application/json' "
                                       "-d '{\"product_id\": 2, \"qty\": 1}' http://127.0.0.1:8080/api/cart && "
                                       "curl -sf -X POST http://127.0.0.1:8080/api/checkout"}).text
    assert '"order_id": 2' in out
    assert env.score() == 1.0
    assert replica.query(env.sandbox, "shop", "SELECT stock FROM products WHERE id = 2") == [[2]]
    # the database has no path in the sandbox, and the server is neither visible nor signalable
    probe = env.step("bash", {"command": f"ls -la {os.path.dirname(rep.db)} 2>&1; kill -9 {rep.proc.pid} 2>&1; echo rc=$?"}).text
    assert "No such file or directory" in probe and "rc=1" in probe
    assert rep.proc.poll() is None
    st = os.stat(rep.db)
    assert (st.st_uid, st.st_mode & 0o777) == ((env.sandbox.service_uid, 0o600) if env.sandbox.mode == "root"
                                          else (os.getuid(), 0o600))
    old_db = rep.db
    env.reset(_shop_task())  # a new episode: a fresh copy, the old one gone with its sandbox
    assert not os.path.exists(old_db)
    assert replica.query(env.sandbox, "shop", "SELECT count(*) FROM orders") == [[1]]
    assert env.score() == 0.0
  finally:
    env.close()


@needs_sandbox
@needs_cgroup
def test_browser_cgroup_bounds_memory_without_rlimit_as():
  with Sandbox() as sb:
    cg = browser.memory_cgroup(sb, memory_mb=256)
    def run(code, **kw):
      p = sb.spawn(["python3", "-c", code], env=sandbox_env(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
      out, _ = p.communicate(timeout=60)
      return p.returncode, out.decode()
    limits = "print([l for l in open('/proc/self/limits') if 'address space' in l][0].split()[3])"
    assert run(limits, memory_cgroup=cg) == (0, "unlimited\n")
    assert run(limits)[1].strip() == str(sb.config.memory_mb << 20)  # everything else keeps RLIMIT_AS
    hog = "b = b'x' * ({} << 20); print(len(b) >> 20)"
    assert run(hog.format(100), memory_cgroup=cg) == (0, "100\n")
    rc, _ = run(hog.format(600), memory_cgroup=cg)  # 600 MB of touched pages in a 256 MB cgroup
    assert rc == -9, rc
    assert sb.alive()


def _run_gui_reference(path):
  pkg = load_package(path)
  env = LocalEnv(CFG)
  try:
    t = time.monotonic()
    env.reset(pkg)
    start = time.monotonic() - t
    assert env.score() == 0.0
    run_calls(env, pkg.reference_for("gui"))
    return env.score(), start
  finally:
    env.close()


@needs_sandbox
@needs_cgroup
@needs_chromium
@pytest.mark.slow
def test_forum_task_gui_reference_drives_chromium():
  score, start = _run_gui_reference(os.path.join(TASKS, "web_forum_reply_arm.json"))
  print(f"forum episode start-up (sandbox + Xvfb + openbox + server + Chromium): {start:.1f} s")
  assert score == 1.0


@needs_sandbox
@needs_cgroup
@needs_chromium
@pytest.mark.slow
def test_shop_task_passes_every_gate():
  res = check_package(load_package(os.path.join(TASKS, "web_shop_buy_kettles.json")), lambda: LocalEnv(CFG))
  print(res, res.scores, f"{res.seconds:.0f} s")
  assert res.passed, res
  assert res.scores["reference"] == res.scores["reference[hybrid]"] == 1.0 and res.scores["near_miss"] < 1.0
  assert {o.name for o in res.exploits if o.score == 0.0} >= {"click_spray_reading_order", "click_spray_reverse_order",
                                                               "create_named_paths"}


def test_every_web_package_loads_with_gui_and_hybrid_references():
  names = sorted(os.listdir(TASKS))
  assert len([n for n in names if n.startswith("web_shop")]) >= 3 and len([n for n in names if n.startswith("web_forum")]) >= 3
  for n in names:
    pkg = load_package(os.path.join(TASKS, n))
    assert pkg.reference_for("gui") and pkg.reference_for("hybrid") and pkg.near_miss, n
