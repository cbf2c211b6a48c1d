"""cgroup discovery and joining (mage_jax/machine/cgroup.py) on a fake cgroupfs.

This machine (and CI) has memory/pids in cgroup v1 only, which the sandbox suite exercises
for real; the v2 layout and the per-process join are checked here on plain directories laid
out like the kernel's, with /proc/self/cgroup and mountinfo replaced.
"""
import os
import subprocess

import pytest

from mage_jax.machine import cgroup


def _fake(monkeypatch, own, mounts):
  monkeypatch.setattr(cgroup, "_own_cgroups", lambda: own)
  monkeypatch.setattr(cgroup, "_mounts", lambda: mounts)


def test_v2_child_under_our_own_cgroup_when_delegated(tmp_path, monkeypatch):
  own = tmp_path / "unified" / "job" / "me"
  own.mkdir(parents=True)
  (own / "cgroup.subtree_control").write_text("cpu memory pids\n")
  _fake(monkeypatch, {"": "/job/me"}, [("cgroup2", "/", str(tmp_path / "unified"), {"rw"})])
  group, why = cgroup.create(256 << 20, 64)
  assert why == "" and group.version == 2
  (child,) = group.dirs
  assert os.path.dirname(child) == str(own)  # under our own cgroup, nowhere else
  assert (open(os.path.join(child, "memory.max")).read(), open(os.path.join(child, "pids.max")).read()) \
      == (str(256 << 20), "64")
  # a process joins itself before it execs the rest
  out = subprocess.run(group.join_argv() + ["/bin/sh", "-c", "echo $$"], capture_output=True, text=True)
  assert open(group.procs_files[0]).read().strip() == out.stdout.strip()



def test_v2_without_delegation_and_v1_without_access_say_why(tmp_path, monkeypatch):
  own = tmp_path / "unified" / "me"
  own.mkdir(parents=True)
  (own / "cgroup.subtree_control").write_text("cpu\n")
  missing = tmp_path / "v1-not-there"
  _fake(monkeypatch, {"": "/me", "memory": "/x", "pids": "/"},
        [("cgroup2", "/", str(tmp_path / "unified"), {"rw"}),
         ("cgroup", "/", str(missing / "memory"), {"rw", "memory"}),
         ("cgroup", "/", str(missing / "pids"), {"rw", "pids"})])
  group, why = cgroup.create(1 << 30, 64)
  assert group is None
  assert "cgroup v1" in why and "No such file" in why
  assert "not delegated" in why and "cpu" in why


def test_v1_paths_follow_a_cgroup_namespace_root(tmp_path, monkeypatch):
  # inside a cgroup namespace the mount shows only our sub-tree: its root is our own path
  for c in ("memory", "pids"):
    (tmp_path / c).mkdir()
  _fake(monkeypatch, {"memory": "/jobs/7", "pids": "/jobs/7"},
        [("cgroup", "/jobs/7", str(tmp_path / c), {"rw", c}) for c in ("memory", "pids")])
  group, why = cgroup.create(1 << 30, 64)
  assert why == "" and group.version == 1
  assert [os.path.dirname(d) for d in group.dirs] == [str(tmp_path / "memory"), str(tmp_path / "pids")]
  assert open(os.path.join(group.dirs[0], "memory.limit_in_bytes")).read() == str(1 << 30)
  # (removal needs a real cgroupfs, where rmdir takes the control files along: sandbox suite)


@pytest.mark.skipif(not os.path.exists("/proc/self/cgroup"), reason="no /proc")
def test_real_cgroup_is_made_only_under_our_own():
  own = cgroup._own_cgroups()
  group, why = cgroup.create(64 << 20, 16)
  if group is None:
    assert why  # said why (no write access, no controller)
    return
  try:
    keys = list(cgroup.V1_CONTROLLERS) if group.version == 1 else [""]
    for d, parent, key in zip(group.dirs, group.parents, keys):
      assert os.path.dirname(d) == parent
      assert own[key] == "/" or parent.endswith(own[key].rstrip("/")), (parent, own[key])
  finally:
    assert group.close() and not any(os.path.exists(d) for d in group.dirs)


def test_stale_cgroups_of_dead_harnesses_are_removed(tmp_path):
  dead = 2 ** 22 + 12345  # above the default pid_max: no such process
  for name in (f"mage-sandbox-{dead}-aa", f"mage-sandbox-{os.getpid()}-bb", "someone-else", f"mage-sandbox-{dead}-cc"):
    (tmp_path / name).mkdir()
  (tmp_path / f"mage-sandbox-{dead}-cc" / "busy").mkdir()  # not empty: rmdir fails, left alone
  assert cgroup.remove_stale(str(tmp_path)) == 1
  assert sorted(os.listdir(tmp_path)) == sorted([f"mage-sandbox-{os.getpid()}-bb", "someone-else",
                                                 f"mage-sandbox-{dead}-cc"])

