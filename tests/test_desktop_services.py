"""The desktop's harness services (Xvfb, openbox, the web replica server) against the workload.

An outside review got openbox to run the workload's commands (it rewrote the WM config the
harness had written into its /tmp, asked openbox to reconfigure and pressed the new key) and,
from there, froze and traced another episode's X server. Each test below is one of those attacks
or a variant, checked by its effect: a marker file a command would write, another episode's
processes still running and answering, the X socket the harness connects to still the X server's.

Runs as root (root mode) and, through tests/test_agent_sandbox_user_mode.py, as uid 65534
(user mode).
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

import pytest

from mage_jax.machine import apps, cgroup, sandbox as sb

needs_desktop = pytest.mark.skipif(
    shutil.which("Xvfb") is None or shutil.which("openbox") is None, reason="no Xvfb/openbox (make system-apps)")
MARKER = "/tmp/.wm_ran_this"
XKM_DIR = "/var/lib/xkb"  # Debian's Xvfb writes compiled keymaps here when it may, else to /tmp


def _desktop_sandbox():
  """A sandbox with a desktop and its window manager, as LocalEnv.reset makes for a GUI task."""
  from mage_jax.machine.desktop import Desktop
  box = sb.Sandbox(sb.SandboxConfig(ro_binds=apps.etc_binds(), home_mb=64, tmp_mb=32, memory_mb=1024))
  try:
    desk = Desktop(box, 320, 200)
    apps.start_window_manager(desk)
  except BaseException:
    box.close()
    raise
  return box, desk


def _close(box, desk) -> None:
  try:
    desk.close()
  finally:
    box.close()


def _service_processes(box) -> dict[str, int]:
  """{program name: host pid} of every live harness service of `box` (the process each Popen
  started and everything under it)."""
  out = {}
  for p in box._services:
    for pid in [p.pid] + sb.descendants(p.pid):
      try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
          argv = f.read().split(b"\0")
      except OSError:
        continue
      name = os.path.basename(argv[0].decode())
      if name in ("Xvfb", "openbox", "python3"):
        out[name if name != "python3" else "web server"] = pid
  return out


def _environ(pid: int) -> dict[str, str]:
  with open(f"/proc/{pid}/environ", "rb") as f:
    return dict(e.decode().split("=", 1) for e in f.read().split(b"\0") if b"=" in e)


def _cmdline(pid: int) -> list[str]:
  with open(f"/proc/{pid}/cmdline", "rb") as f:
    return [a.decode() for a in f.read().split(b"\0") if a]


def test_window_manager_config_binds_nothing_that_runs_a_program():
  with open(os.path.join(apps.WM_HOST_DIR, "rc.xml")) as f:
    rc = ET.fromstring(f.read())
  actions = {a.get("name") for a in rc.iter() if a.tag.endswith("}action")}
  assert actions and actions <= apps.WM_ACTIONS, actions
  assert not actions & {"Execute", "ShowMenu", "Restart", "Exit", "Reconfigure"}
  menu_file = [m.text for m in rc.iter() if m.tag.endswith("}file")]
  assert menu_file == [f"{apps.WM_DIR}/menu.xml"]
  with open(os.path.join(apps.WM_HOST_DIR, "menu.xml")) as f:
    assert not list(ET.fromstring(f.read())), "the menu must be empty"


EVIL_RC = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc"><keyboard>
<keybind key="F12"><action name="Execute"><command>sh -c "id -u > {m}; readlink /proc/self >> {m}"</command></action></keybind>
</keyboard></openbox_config>
"""
EVIL_MENU = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_menu xmlns="http://openbox.org/3.4/menu"><menu id="root-menu" label="x">
<item label="x"><action name="Execute"><command>sh -c "id -u > {m}"</command></action></item></menu></openbox_menu>
"""


@needs_desktop
@pytest.mark.timeout(120)
def test_workload_cannot_make_the_window_manager_run_a_command():
  """The reported attack: rewrite every config file openbox could read (its --config-file, the
  user and system XDG places its environment names), ask it to reconfigure (and restart), press
  the new key binding. No command may run."""
  box, desk = _desktop_sandbox()
  try:
    wm = _service_processes(box)["openbox"]
    argv, env = _cmdline(wm), _environ(wm)
    targets = [argv[argv.index("--config-file") + 1]] if "--config-file" in argv else []
    for key in ("XDG_CONFIG_HOME", "XDG_CONFIG_DIRS"):
      targets += [f"{d}/openbox/rc.xml" for d in env.get(key, "").split(":") if d]
    targets += [f"{env.get('HOME', '/home/user')}/.config/openbox/rc.xml"]
    script = "".join(f'mkdir -p "$(dirname {t})" 2>/dev/null; cat /tmp/evil.xml > {t} 2>/dev/null; '
                     f'cat /tmp/evil_menu.xml > "$(dirname {t})/menu.xml" 2>/dev/null; ' for t in targets)
    box.write_file("/tmp/evil.xml", EVIL_RC.format(m=MARKER).encode())
    box.write_file("/tmp/evil_menu.xml", EVIL_MENU.format(m=MARKER).encode())
    shell = sb.sandbox_env(":0")
    r = box.spawn(["/bin/sh", "-c", script + "openbox --reconfigure; sleep 1"], env=shell, cwd="/")
    r.wait(30)
    desk.key_combo(["F12"])
    desk.click(5, 5, button=3)  # the root menu, were one bound
    time.sleep(1.0)
    assert box.read_file(MARKER) is None, f"openbox ran the workload's command: {box.read_file(MARKER)!r}"
    box.spawn(["/bin/sh", "-c", "openbox --restart; sleep 2"], env=shell, cwd="/").wait(30)
    desk.key_combo(["F12"])
    time.sleep(1.0)
    assert box.read_file(MARKER) is None, f"openbox ran the workload's command: {box.read_file(MARKER)!r}"
  finally:
    _close(box, desk)


@needs_desktop
@pytest.mark.skipif(shutil.which("setxkbmap") is None, reason="no setxkbmap")
@pytest.mark.timeout(120)
def test_x_server_compiles_keymaps_where_the_workload_cannot_reach():
  """Xvfb writes a keymap the workload asks for to a file and reads it back: that file must be in
  a directory only Xvfb sees (its compiled-in /var/lib/xkb on a tmpfs of its own), not /tmp."""
  box, desk = _desktop_sandbox()
  try:
    xvfb = _service_processes(box)["Xvfb"]
    with open(f"/proc/{xvfb}/mountinfo") as f:
      xkm = [line.split() for line in f if line.split()[4] == XKM_DIR]
    assert xkm and xkm[-1][-3] == "tmpfs" and " rw," in " " + xkm[-1][5] + ",", xkm
    r = box.run(["/bin/sh", "-c", f"touch {XKM_DIR}/x 2>&1; ls -A {XKM_DIR}; "
                 "DISPLAY=:0 setxkbmap -layout de && DISPLAY=:0 setxkbmap -query"], cwd="/")
    out = r.stdout.decode()
    assert "Read-only file system" in out and "server-" not in out, out
    assert re.search(r"layout:\s+de", out), out + r.stderr.decode()  # the compile worked, privately
  finally:
    _close(box, desk)


def _paths_in(values) -> set[str]:
  out = set()
  for v in values:
    for part in re.split(r"[:=]", v):
      if part.startswith("/") and not part.startswith("/proc/"):
        out.add(os.path.normpath(part))
  return out


@needs_desktop
@pytest.mark.timeout(120)
def test_workload_cannot_write_what_the_services_read():
  """Every path in a service's argv and environment (config, HOME, XDG_*, fontconfig), the files
  under them, and the X socket directory: the workload tries to replace, remove and add to each,
  and each stays as the harness left it."""
  box, desk = _desktop_sandbox()
  try:
    procs = _service_processes(box)
    assert {"Xvfb", "openbox"} <= set(procs), procs
    paths = {"/tmp/.X11-unix", "/tmp/.X11-unix/X0", apps.FONTCONFIG_FILE, "/opt/mage_fontconfig_cache",
             XKM_DIR}
    for name in ("Xvfb", "openbox"):
      paths |= _paths_in(_cmdline(procs[name])[1:] + list(_environ(procs[name]).values()))
    paths -= {"/usr/bin", "/bin", "/usr/sbin", "/usr/share"}  # the read-only system, bound from the host
    assert apps.WM_CONFIG in paths and "/tmp/.X11-unix" in paths
    before = {p: _snapshot(box, p) for p in sorted(paths)}
    attack = "".join(f'p={p}; rm -rf "$p"; mv "$p" "$p.old"; touch "$p/pwn"; echo pwn > "$p"; '
                     f'mkdir -p "$p" && echo pwn > "$p/rc.xml"; ' for p in sorted(paths))
    box.run(["/bin/sh", "-c", attack + "true"], cwd="/", timeout=60)
    after = {p: _snapshot(box, p) for p in sorted(paths)}
    changed = sorted(p for p in paths if before[p] != after[p])
    assert not changed, f"the workload changed what a service reads: {changed}"
  finally:
    _close(box, desk)


def _snapshot(box, path: str):
  """A directory's entries or a file's bytes (a socket: its presence), as the harness reads them."""
  try:
    return ("dir", box.list_dir(path))
  except OSError:
    pass
  try:
    return ("file", box.read_file(path))
  except OSError as e:  # not a regular file (the X socket): that it is still there
    return ("other", os.path.exists(f"{box.host_root}{path}"), str(e).split(":")[0])


@needs_desktop
@pytest.mark.timeout(120)
def test_workload_cannot_replace_the_x_socket():
  """The workload starts its own X server and tries to put its socket where the harness and the
  apps connect; the harness must still reach the episode's X server, and so must a fresh client."""
  from Xlib import display as xdisplay
  from mage_jax.machine import desktop as desktop_lib
  box, desk = _desktop_sandbox()
  try:
    atom = desk.display.intern_atom("_MAGE_PROBE")
    desk.root.change_property(atom, desk.display.intern_atom("STRING"), 8, b"harness")
    desk.display.sync()
    box.spawn(["/bin/sh", "-c", "Xvfb :5 -nolisten tcp >/dev/null 2>&1 & sleep 2; "
               "rm -f /tmp/.X11-unix/X0; mv /tmp/.X11-unix/X5 /tmp/.X11-unix/X0; "
               "mv /tmp/.X11-unix /tmp/.X11-old; mkdir -p /tmp/.X11-unix; "
               "ln -sf /tmp/.X11-old/X5 /tmp/.X11-unix/X0; sleep 30"], cwd="/")
    time.sleep(3)
    sock = f"{box.host_root}/tmp/.X11-unix/X0"
    dno = 900000 + box.pid
    with desktop_lib._SOCKETS_LOCK:
      desktop_lib._SOCKETS[dno] = sock
    try:
      fresh = xdisplay.Display(f":{dno}")  # what the harness gets when it connects now
      prop = fresh.screen().root.get_full_property(atom, 0)
      fresh.close()
    finally:
      with desktop_lib._SOCKETS_LOCK:
        desktop_lib._SOCKETS.pop(dno, None)
    assert prop is not None and prop.value == b"harness", "the X socket now leads to another X server"
    # and an app started now (DISPLAY=:0, the socket path) reaches the episode's server too
    r = box.run(["/bin/sh", "-c", "xprop -root _MAGE_PROBE 2>&1 || echo no-xprop"], cwd="/")
    out = r.stdout.decode()
    assert "no-xprop" in out or '"harness"' in out, out
  finally:
    _close(box, desk)


_PROBE = r"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
reached = []
for arg in sys.argv[1:]:
  label, pid = arg.rsplit(":", 1)
  pid = int(pid)
  try:
    os.kill(pid, 0)
    reached.append(f"signal:{label}")
  except OSError:
    pass
  if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
    reached.append(f"ptrace:{label}")
    libc.ptrace(17, pid, None, None)           # PTRACE_DETACH
  try:
    with open(f"/proc/{pid}/mem", "rb"):
      reached.append(f"mem:{label}")
  except OSError:
    pass
print("REACHED", " ".join(reached) or "-")
"""


def _state(pid: int) -> str:
  with open(f"/proc/{pid}/stat", "rb") as f:
    return f.read().rsplit(b")", 1)[1].split()[0].decode()


@needs_desktop
@pytest.mark.timeout(180)
def test_one_episode_cannot_reach_another():
  """Episode A, from its workload and from a command run as its services are (the position an
  openbox action would give), tries to signal, ptrace and read the memory of episode B's
  services (Xvfb, openbox, web server), B's sandbox and the harness, then to STOP and KILL B's
  services. B's processes keep running and B's screen, shell and web replica still answer."""
  from mage_jax.tasks.web import replica
  a_box, a_desk = _desktop_sandbox()
  b_box, b_desk = _desktop_sandbox()
  try:
    replica.start(b_box, "forum")
    b_posts = replica.query(b_box, "forum", "SELECT count(*) FROM posts")
    b_shot = b_desk.screenshot().tobytes()
    b_procs = _service_processes(b_box)
    assert {"Xvfb", "openbox", "web server"} <= set(b_procs), b_procs
    targets = {f"B {k}": v for k, v in b_procs.items()}
    targets.update({"B sandbox": b_box.pid, "B bwrap": b_box._bwrap.pid, "harness": os.getpid()})
    args = [f"{k}:{v}" for k, v in targets.items()]
    env = {"HOME": "/", "PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": f"{sb.PY_ROOT}/lib"}
    probe = [sb.python_in_sandbox(), "-c", _PROBE, *args]
    freeze = " ".join(f"kill -STOP {v}; kill -KILL {v};" for k, v in targets.items() if k.startswith("B "))
    as_service = a_box.spawn_service(probe, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    service_out = as_service.communicate(timeout=60)[0].decode()
    workload_out = a_box.run(probe, cwd="/", timeout=60)
    a_box.spawn_service(["/bin/sh", "-c", freeze + " true"], env={"PATH": "/usr/bin:/bin"}).wait(30)
    a_box.run(["/bin/sh", "-c", freeze + " true"], cwd="/", timeout=30)
    for where, out in (("a service", service_out), ("the workload", workload_out.stdout.decode())):
      assert "REACHED -" in out, f"episode A's {where} reached: {out.strip()[-400:]}"
    time.sleep(0.3)
    for name, pid in b_procs.items():
      assert os.path.exists(f"/proc/{pid}") and _state(pid) not in "TtZX", f"B's {name} was stopped or killed"
    shot: list = []
    t = threading.Thread(target=lambda: shot.append(b_desk.screenshot().tobytes()), daemon=True)
    t.start()
    t.join(10)
    assert shot and shot[0] == b_shot, "B's screen no longer answers, or changed"
    assert b_box.run(["/bin/sh", "-c", "echo alive"], timeout=30).stdout.strip() == b"alive"
    assert replica.query(b_box, "forum", "SELECT count(*) FROM posts") == b_posts
    r = b_box.run([sb.python_in_sandbox(), "-c", "import urllib.request as u; "
                   "print(u.urlopen('http://127.0.0.1:8081/', timeout=10).status)"], timeout=30)
    assert r.stdout.strip() == b"200", r.stderr.decode()[-400:]
  finally:
    for pid in _service_processes(b_box).values():  # today's code: thaw what A froze
      try:
        os.kill(pid, 18)
      except OSError:
        pass
    _close(a_box, a_desk)
    _close(b_box, b_desk)


def test_a_service_may_not_read_from_where_the_workload_writes():
  box = sb.Sandbox(sb.SandboxConfig(home_mb=16, tmp_mb=16, memory_mb=512))
  try:
    for env in ({"HOME": "/tmp/.wm"}, {"XDG_CONFIG_DIRS": "/opt/x:/home/user/.config"},
                {"FONTCONFIG_FILE": "/dev/shm/../shm/fonts.conf"}):
      with pytest.raises(ValueError, match="workload"):
        box.spawn_service(["sleep", "1"], env={"PATH": "/usr/bin:/bin", **env})
    with pytest.raises(ValueError, match="/tmp/rc.xml"):
      box.spawn_service(["openbox", "--config-file", "/tmp/rc.xml"])
  finally:
    box.close()


def test_slot_pools_share_the_host_memory():
  from mage_jax.agent.episode import EpisodeConfig
  from mage_jax.agent.slots import LocalSlotPool
  budget = cgroup.sandbox_budget_mb()
  assert budget < cgroup.host_memory_mb()
  too_many = budget // cgroup.MIN_SHARE_MB + 1
  with pytest.raises(ValueError, match="run fewer slots") as e:
    LocalSlotPool(lambda: None, EpisodeConfig(), num_slots=too_many)
  assert "\n" not in str(e.value)
  slots = max(2, min(8, budget // 1024))
  pool = LocalSlotPool(lambda: None, EpisodeConfig(), num_slots=slots)
  try:
    share = cgroup.memory_share_mb()
    assert share * slots <= budget and share == min(cgroup.MAX_SHARE_MB, budget // slots)
    with pytest.raises(sb.SandboxUnavailable, match="exceeds the host"):
      sb.Sandbox(sb.SandboxConfig(cgroup_memory_mb=budget // slots + 64))
    box = sb.Sandbox(sb.SandboxConfig(home_mb=16, tmp_mb=16, memory_mb=512))
    try:
      if box.cgroup is not None:
        assert box.cgroup.memory_limit() == share << 20
    finally:
      box.close()
  finally:
    pool.close()
  assert cgroup.declared_slots() == 1  # released with the pool
