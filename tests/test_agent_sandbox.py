"""Sandbox suite: every escape/abuse attempt fails harmlessly and the host is unchanged.

Destructive commands run only inside the sandbox, under the shell's per-command
timeout, a pytest-timeout watchdog and `Sandbox.close()` (kills the whole pid
namespace) in a finally block.
"""
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import threading
import time

import pytest

from mage_jax.agent import sandbox as sb
from mage_jax.agent.terminal import PersistentShell

try:
  sb.check_available()
  _REASON = None
except sb.SandboxUnavailable as e:
  _REASON = str(e)
needs_sandbox = pytest.mark.skipif(_REASON is not None, reason=f"sandbox unavailable: {_REASON}")


@pytest.fixture
def shell():
  box = sb.Sandbox(sb.SandboxConfig(home_mb=64, tmp_mb=32, file_mb=128, nproc=64, memory_mb=1024))
  sh = PersistentShell(box, timeout=10, max_output=10_000, display=None)
  try:
    yield sh
  finally:
    sh.close()
    box.close()


def zombies() -> set[int]:
  """Killed sandbox processes are reparented to the host's pid 1, which may reap them late;
  a zombie runs nothing and holds no resources."""
  out = set()
  for e in os.listdir("/proc"):
    if e.isdigit():
      try:
        with open(f"/proc/{e}/stat", "rb") as f:
          if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
            out.add(int(e))
      except (OSError, IndexError):
        pass
  return out


def _in_ns(kind: str, ns: str) -> list[int]:
  out = []
  for e in os.listdir("/proc"):
    if e.isdigit():
      try:
        if os.readlink(f"/proc/{e}/ns/{kind}") == ns:
          out.append(int(e))
      except OSError:
        pass
  return out


def _pid_of_shell(shell) -> int:
  from mage_jax.agent.terminal import _shell_pid
  return _shell_pid(shell._proc.pid)


def test_refuses_without_bubblewrap(monkeypatch):
  real = shutil.which
  monkeypatch.setattr(sb.shutil, "which", lambda b: None if b == "bwrap" else real(b))
  with pytest.raises(sb.SandboxUnavailable, match="refusing to run episodes unsandboxed"):
    sb.Sandbox()


@needs_sandbox
def test_persistent_state_and_identity(shell):
  assert shell.run("cd /tmp && export FOO=bar && mkdir -p d && echo hi > d/f").exit_code == 0
  r = shell.run("pwd; echo $FOO; cat d/f; id -u; grep -E '^(CapEff|CapPrm|Groups|NoNewPrivs)' /proc/self/status;"
                " readlink /proc/self/ns/user; cat /proc/self/uid_map")
  lines = r.output.split("\n")
  assert lines[:3] == ["/tmp", "bar", "hi"]
  expected_uid = 65534 if os.geteuid() == 0 else os.getuid()
  assert lines[3] == str(expected_uid)
  status = dict(l.split(":", 1) for l in lines[4:8])
  assert status["CapEff"].strip() == status["CapPrm"].strip() == "0000000000000000"  # no capabilities
  assert status["Groups"].strip() == "" and status["NoNewPrivs"].strip() == "1"      # no host groups
  # a user namespace of its own, distinct from the host's (and from any other sandbox's)
  inside_userns = lines[8]
  assert inside_userns.startswith("user:[") and inside_userns != os.readlink("/proc/self/ns/user")
  assert inside_userns == os.readlink(f"/proc/{shell.sandbox.pid}/ns/user")
  # only the sandbox user is mapped, onto the same unprivileged host uid (never host root)
  assert lines[9].split() == [str(expected_uid), str(expected_uid), "1"] or os.geteuid() != 0
  host_uid = [l.split()[1] for l in open(f"/proc/{_pid_of_shell(shell)}/status") if l.startswith("Uid:")][0]
  assert host_uid == str(expected_uid)


@needs_sandbox
def test_office_libs_importable_inside(shell):
  r = shell.run("python -c 'import openpyxl, pptx, pandas, pypdf, PIL; print(\"libs ok\")'", timeout=60)
  assert r.output.strip() == "libs ok", r.output
  assert shell.run("python3 -c 'print(1 + 1)'").output.strip() == "2"


@needs_sandbox
@pytest.mark.timeout(120)
def test_write_outside_and_read_secrets(shell):
  marker = f"/tmp/mage_probe_{secrets.token_hex(4)}"
  cmds = [f"echo x > {marker}", "echo x > /usr/evil", "echo x > /etc/evil", "mkdir -p /work/evil",
          "echo x > /opt/python/evil", "ls /root", "cat /etc/shadow", "cat /proc/1/root/etc/shadow"]
  out = "\n".join(shell.run(c).observation() for c in cmds)
  assert not os.path.exists("/usr/evil") and not os.path.exists("/etc/evil") and not os.path.exists("/work/evil")
  assert not os.path.exists(marker)  # the sandbox /tmp is its own tmpfs
  assert not os.path.exists(os.path.join(sb.os.path.realpath(sb.sys.base_prefix), "evil"))
  assert "No such file" in out or "Permission denied" in out or "Read-only" in out
  if os.geteuid() == 0:
    with open("/etc/shadow") as f:
      secret_lines = [l for l in f.read().splitlines() if l.split(":")[1] not in ("*", "!", "!*", "")]
    for line in secret_lines:
      assert line.split(":")[1] not in out
  # the sandbox user could not read the real file even if it were visible
  nobody = pwd.getpwuid(65534)
  assert not (os.stat("/etc/shadow").st_mode & 0o004)


@needs_sandbox
@pytest.mark.timeout(120)
def test_no_network(shell):
  srv = socket.socket()
  srv.bind(("127.0.0.1", 0))
  srv.listen(1)
  srv.settimeout(0.2)
  port = srv.getsockname()[1]
  accepted = []

  def accept():
    try:
      accepted.append(srv.accept())
    except OSError:
      pass
  th = threading.Thread(target=accept)
  th.start()
  code = ("import socket\n"
          "for addr in [('127.0.0.1', %d), ('1.1.1.1', 53), ('8.8.8.8', 443)]:\n"
          "  try:\n    socket.create_connection(addr, timeout=2); print('CONNECTED', addr)\n"
          "  except OSError as e:\n    print('blocked', addr, e.errno)\n") % port
  shell.sandbox.write_file("net.py", code.encode())
  r = shell.run("python net.py", timeout=30)
  th.join()
  srv.close()
  assert "CONNECTED" not in r.output and r.output.count("blocked") == 3, r.output
  assert not accepted


@needs_sandbox
@pytest.mark.timeout(180)
def test_fork_bomb_is_contained(shell):
  r = shell.run(":(){ :|:& };:", timeout=5)
  limit = shell.sandbox.config.nproc
  counts, deadline = [], time.monotonic() + 10
  while time.monotonic() < deadline and (not counts or max(counts) < limit - 8 or len(counts) < 10):
    counts.append(len(sb.descendants(shell.sandbox._bwrap.pid)))
    time.sleep(0.05)
  assert max(counts) >= limit - 8, counts           # the bomb did run into the limit ...
  assert max(counts) <= limit + 10, counts          # ... and never past it
  inside = sb.descendants(shell.sandbox._bwrap.pid)
  assert len(inside) <= shell.sandbox.config.nproc + 10, len(inside)  # RLIMIT_NPROC holds
  assert subprocess.run(["true"]).returncode == 0  # the host can still fork
  if os.geteuid() == 0:  # processes are counted per user namespace: another sandbox still works
    with sb.Sandbox(sb.SandboxConfig(nproc=64)) as other:
      assert other.run(["/bin/sh", "-c", "echo ok | cat"], timeout=30).stdout == b"ok\n"
      assert os.readlink(f"/proc/{other.pid}/ns/user") != os.readlink(f"/proc/{shell.sandbox.pid}/ns/user")
  pidns = os.readlink(f"/proc/{shell.sandbox.pid}/ns/pid")
  userns = os.readlink(f"/proc/{shell.sandbox.pid}/ns/user")
  shell.close()
  shell.sandbox.close()
  deadline = time.monotonic() + 10
  while _in_ns("pid", pidns) and time.monotonic() < deadline:
    time.sleep(0.2)
  assert _in_ns("pid", pidns) == []  # every process of the sandbox is gone
  # nothing escaped the pid namespace either: no live process is left in the sandbox's user
  # namespace (not "no process of uid 65534": other sandboxes may run on a shared machine)
  assert [p for p in _in_ns("user", userns) if p not in zombies()] == []


@needs_sandbox
@pytest.mark.timeout(120)
def test_infinite_loops_time_out(shell):
  t = time.monotonic()
  r = shell.run("cd /tmp; python -c 'while True: pass'", timeout=1)
  assert r.timed_out and time.monotonic() - t < 8
  assert not r.restarted and shell.run("pwd").output.strip() == "/tmp"  # the shell survived
  r = shell.run("while :; do :; done", timeout=1)
  assert r.timed_out and r.restarted  # a builtin loop takes the shell down: restarted, said so
  assert shell.run("echo ok").output.strip() == "ok"


@needs_sandbox
@pytest.mark.timeout(120)
def test_output_flood_is_cut(shell):
  t = time.monotonic()
  r = shell.run("head -c 1000000000 /dev/zero | tr '\\0' a", timeout=60)
  assert r.truncated and len(r.output) <= 10_000
  assert "[output truncated]" in r.observation() and "[output flood" in r.observation()
  assert time.monotonic() - t < 60
  assert shell.run("echo after").output.strip() == "after"


@needs_sandbox
@pytest.mark.timeout(120)
def test_disk_fill_and_memory_are_bounded(shell):
  free_before = shutil.disk_usage("/").free
  r = shell.run("dd if=/dev/zero of=big bs=1M count=2000 2>&1; ls -l big | awk '{print $5}'", timeout=60)
  size = int(r.output.strip().splitlines()[-1])
  assert size <= 128 << 20  # tmpfs home (64 MB) / RLIMIT_FSIZE (128 MB)
  assert "No space left" in r.output or "File too large" in r.output, r.output
  r = shell.run("dd if=/dev/zero of=/tmp/big bs=1M count=2000 2>&1 | tail -1", timeout=60)
  # both files live on the sandbox's size-limited tmpfs mounts, not on a host disk
  r = shell.run("stat -f -c %T big /tmp/big; df -B1M --output=size /home/user /tmp | tail -2")
  assert r.output.split() == ["tmpfs", "tmpfs", "64", "32"], r.output
  # nothing landed on the host disk (the sandbox wrote ~96 MB; other processes on a shared
  # machine may write a little meanwhile, hence the margin)
  assert shutil.disk_usage("/").free > free_before - (90 << 20)
  r = shell.run("python -c 'b = bytearray(4 << 30)' 2>&1 | tail -1", timeout=60)
  assert "MemoryError" in r.output
