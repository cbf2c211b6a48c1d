"""Sandbox suite: every escape/abuse attempt fails harmlessly and the host is unchanged.

Runs as root (root mode) and, through tests/test_agent_sandbox_user_mode.py, as uid
65534 (user mode). Each attack is a command the workload could send through
`PersistentShell.run`, and each test checks the attack's *effect* (a marker in a host
folder, a secret read back, a forged or blinded checker read, an unbounded allocation).

What it guarantees, given a kernel without namespace/ptrace bugs: the workload cannot
write outside its tmpfs mounts, read the harness's environment or host files, reshape
the namespaces the harness enters (they are held by fd from start-up), make a harness
read run anything it planted, kill or trace the X server, blind a checker read (an
unreadable path raises `Unreadable`, never reads as absent), or exceed its tmpfs
sizes/inodes, rlimits and, where a cgroup is writable, the cgroup's memory and process
bounds. What it does not cover: kernel exploits (namespaces share the host kernel; a
deployment adds a disposable VM), side channels and CPU time beyond RLIMIT_CPU, and,
when no cgroup is writable (`Sandbox.cgroup is None`, e.g. an unprivileged caller without
a delegated cgroup), memory outside per-process address space (memfd, tmpfs inodes of
nested namespaces): then only the rlimits and tmpfs limits hold, which the cgroup test
checks in that case.

Destructive commands run only inside the sandbox, under the shell's per-command
timeout, a pytest-timeout watchdog and `Sandbox.close()` (kills the whole pid
namespace) in a finally block.
"""
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from mage_jax.machine import sandbox as sb
from mage_jax.machine.terminal import PersistentShell

try:
  sb.check_available()
  _REASON = None
except sb.SandboxUnavailable as e:
  _REASON = str(e)
needs_sandbox = pytest.mark.skipif(_REASON is not None, reason=f"sandbox unavailable: {_REASON}")


SMALL = dict(home_mb=64, tmp_mb=32, file_mb=128, nproc=64, memory_mb=1024)
ATTACKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptrace_inject.py")


@pytest.fixture
def make_shell():
  """Builds sandbox + shell pairs (config overrides as kwargs); closes them all afterwards."""
  made = []

  def make(**overrides):
    box = sb.Sandbox(sb.SandboxConfig(**{**SMALL, **overrides}))
    sh = PersistentShell(box, timeout=10, max_output=10_000, display=None)
    made.append((sh, box))
    return sh
  try:
    yield make
  finally:
    for sh, box in made:
      sh.close()
      box.close()


@pytest.fixture
def shell(make_shell):
  return make_shell()


@pytest.fixture
def host_folder():
  """A host folder bound read-only into the sandbox at /opt/target (world-writable on the
  host, so only the bind's read-only flag stands between the workload and it)."""
  path = tempfile.mkdtemp(prefix="mage_target_", dir="/tmp")
  os.chmod(path, 0o777)
  try:
    yield path
  finally:
    shutil.rmtree(path, ignore_errors=True)


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
  from mage_jax.machine.terminal import _shell_pid
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


# ---- escapes and leaks found by review (issue 10) ------------------------------------------

# The attack of both escapes: ptrace a process whose namespaces the harness enters (root
# mode: the payload, which ran as the workload's uid; user mode: bwrap's pid 1) and make it
# exec into a new user + mount namespace where a planted script shadows the binaries the
# harness runs next (`/usr/bin/env`, run as host root by the old harness reads; the second
# `nsenter`, run with full capabilities in bwrap's outer namespace). The planted script joins
# the shell's mount namespace and remounts the read-only bind of a host folder writable.
_PLANT = r"""
cp /usr/bin/nsenter ~/nsenter.real; echo $$ > ~/shellpid
cat > ~/planted <<'X'
#!/bin/sh
/home/user/nsenter.real -t $(cat /home/user/shellpid) -m /bin/sh -c 'mount -o remount,rw,bind /opt/target; echo pwned > /opt/target/marker'
X
chmod 755 ~/planted
cat > ~/reshape.sh <<'X'
exec unshare --user --map-root-user --mount /bin/sh -c 'mount --bind /home/user/planted /usr/bin/env; mount --bind /home/user/planted /usr/bin/nsenter; exec sleep infinity'
X
for p in /proc/[0-9]*; do
  pid=${p#/proc/}; [ "$pid" = $$ ] && continue
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in
    "sleep infinity "|bwrap*) echo "target $pid: $(python3 ~/inject.py $pid /home/user/reshape.sh 2>&1)";;
  esac
done
sleep 1
"""


@needs_sandbox
@pytest.mark.timeout(120)
def test_reshaped_namespaces_do_not_redirect_the_harness(make_shell, host_folder):
  sh = make_shell(ro_binds=((host_folder, "/opt/target"),))
  box = sh.sandbox
  box.write_file("inject.py", open(ATTACKER, "rb").read())
  attack = sh.run(_PLANT, timeout=30)
  assert "target" in attack.output, attack.output  # it found something to attack
  # what the harness does next: checker reads, a fresh process, a shell restart
  shell_pid = box.read_file("shellpid")
  listing = box.list_dir()
  cat = box.run(["/bin/cat", f"{sb.HOME}/shellpid"]).stdout
  sh.run("exit")
  alive = sh.run("echo alive").output.strip()
  time.sleep(0.5)
  assert not os.path.exists(os.path.join(host_folder, "marker")), attack.output
  assert shell_pid is not None and shell_pid.strip().isdigit(), shell_pid  # not a forged read
  assert cat == shell_pid and "shellpid" in listing and alive == "alive"


@needs_sandbox
def test_harness_environment_does_not_leak(make_shell, monkeypatch):
  secret = "fake-" + secrets.token_hex(8)
  monkeypatch.setenv("HF_TOKEN", secret)
  monkeypatch.setenv("OPENAI_API_KEY", secret)
  sh = make_shell()
  out = sh.run("for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; env").output
  assert "PATH=" in out  # the environments were readable ...
  assert secret not in out  # ... and held none of the harness's variables


@needs_sandbox
@pytest.mark.timeout(120)
def test_root_filesystem_is_read_only(shell):
  r = shell.run("for d in / /etc /opt /opt/bin /var /dev /usr /home; do touch $d/evil 2>/dev/null && echo WROTE $d; done;"
                " printf '#!/bin/sh\\necho forged\\n' > /opt/bin/head 2>/dev/null && echo WROTE head;"
                " mkdir /opt/bin/x 2>/dev/null && echo WROTE dir; true")
  assert "WROTE" not in r.output, r.output
  # no directory on the workload's PATH is writable, so nothing can shadow a binary
  r = shell.run("IFS=:; for d in $PATH; do [ -w \"$d\" ] && echo WRITABLE $d; done;"
                " [ \"$(command -v head)\" -ef /usr/bin/head ] && echo real head")
  assert r.output.splitlines() == ["real head"], r.output
  # /dev/shm is a small tmpfs of its own, not the unbounded /dev of bwrap
  r = shell.run("dd if=/dev/zero of=/dev/shm/big bs=1M count=300 2>&1 | tail -1;"
                " df -B1M --output=size /dev/shm | tail -1")
  assert int(r.output.split()[-1]) <= 64, r.output
  shell.sandbox.write_file("answer.txt", b"real\n")
  assert shell.sandbox.read_file("answer.txt") == b"real\n"


@needs_sandbox
@pytest.mark.timeout(120)
def test_home_permissions_blind_neither_shell_nor_checker(shell):
  box = shell.sandbox
  box.write_file("present.txt", b"answer\n")
  shell.run("chmod 000 ~; exit")
  r = shell.run("echo alive; pwd; stat -c %a ~")
  assert r.output.split() == ["alive", "/home/user", "700"], r.output  # restarted and recovered
  shell.run("chmod 000 ~")
  for name, content in (("present.txt", b"answer\n"), ("absent.txt", None)):
    try:
      got = box.read_file(name)
    except sb.Unreadable:
      assert box.mode == "user", name  # host root reads past the permissions; the owner can't
      continue
    assert got == content, name
  try:
    assert box.list_dir() == ["present.txt"]
  except sb.Unreadable:
    assert box.mode == "user"
  shell.run("chmod 700 ~")


@needs_sandbox
@pytest.mark.timeout(60)
def test_unreadable_paths_raise_instead_of_reading_as_absent(shell):
  box = shell.sandbox
  shell.run("mkfifo ~/pipe; mkdir ~/dir; ln -s /dev/zero ~/zero; ln -s /proc/1/environ ~/procfile;"
            " ln -s /proc/1/root/etc/passwd ~/magic; echo x > ~/locked; chmod 000 ~/locked;"
            " ln -s /nonexistent ~/dangling; ln -s ../../etc/hostname ~/up")
  for name in ("pipe", "dir", "zero", "procfile", "magic"):
    with pytest.raises(sb.Unreadable):
      box.read_file(name)
  assert box.read_file("up") == b"sandbox\n"  # `..` resolves inside the sandbox
  assert box.read_file("dangling") is None and box.read_file("nothing") is None
  assert box.read_file("dir/nothing") is None and box.read_file("up/x") is None
  with pytest.raises(sb.Unreadable):
    box.list_dir("pipe")
  assert box.list_dir("nothing") is None
  if box.mode == "root":
    assert box.read_file("locked") == b"x\n"
  else:
    with pytest.raises(sb.Unreadable):
      box.read_file("locked")


@needs_sandbox
@pytest.mark.timeout(120)
def test_tmpfs_inodes_are_limited(make_shell):
  sh = make_shell(inodes=4096)
  r = sh.run("df --output=itotal /tmp /home/user /dev/shm | tail -3")
  assert [int(x) for x in r.output.split()] == [4096] * 3, r.output
  r = sh.run("python3 -c \"import os\nn = 0\ntry:\n  while True:\n    os.mkdir('/tmp/d%d' % n); n += 1\n"
             "except OSError as e:\n  print(n, e.strerror)\"", timeout=60)
  made, err = r.output.split(" ", 1)
  assert int(made) < 4096 and "No space left" in err, r.output


@needs_sandbox
@pytest.mark.timeout(120)
def test_sandbox_memory_is_bounded_beyond_rlimits(make_shell):
  sh = make_shell(cgroup_memory_mb=192)
  box = sh.sandbox
  # memfd pages are charged to no address space (RLIMIT_AS, 1 GB here, doesn't see them);
  # 100 MB each stays under RLIMIT_FSIZE
  r = sh.run("python3 -c \"import os\nfds = [os.memfd_create('x') for _ in range(6)]\n"
             "for fd in fds:\n  for _ in range(100): os.write(fd, bytes(1 << 20))\n"
             "print('wrote', 6 * 100, 'MB')\" 2>&1; echo rc=$?", timeout=60)
  if box.cgroup is None:  # documented: without a writable cgroup only rlimits/tmpfs limits hold
    assert box.cgroup_reason and sb.SandboxConfig().require_cgroup is False
    with pytest.raises(sb.SandboxUnavailable, match="require_cgroup"):
      sb.Sandbox(sb.SandboxConfig(require_cgroup=True))
    return
  assert "wrote 600 MB" not in r.output and "rc=137" in r.output, r.output  # OOM-killed
  assert box.cgroup.memory_limit() == 192 << 20
  bash = _pid_of_shell(sh)
  assert set(box.cgroup.pids()) >= {bash, box._bwrap.pid}
  assert sh.run("echo alive").output.strip() == "alive"


@needs_sandbox
@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="no Xvfb")
@pytest.mark.timeout(120)
def test_workload_cannot_kill_the_x_server(shell):
  from mage_jax.machine.desktop import Desktop
  desk = Desktop(shell.sandbox, 160, 120)
  try:
    shell.run("pkill -9 Xvfb; kill -9 -1")
    shell.run("for p in /proc/[0-9]*; do kill -9 ${p#/proc/} 2>/dev/null; done; true")
    assert desk.screenshot().size == (160, 120)  # the X server is out of reach in both modes
    if shell.sandbox.mode == "root":  # the payload is host root: the sandbox survives too
      assert shell.run("echo alive").output.strip() == "alive"
  finally:
    desk.close()


_KILLED_HARNESS = r"""
import sys, time
from mage_jax.machine import sandbox as sb
box = sb.Sandbox(sb.SandboxConfig(home_mb=64, tmp_mb=32, file_mb=128, nproc=64, memory_mb=1024))
service = box.spawn_service(["sleep", "600"])
print(service.pid, flush=True)
time.sleep(600)
"""


@needs_sandbox
def test_services_die_with_a_killed_harness():
  """A harness process killed with SIGKILL cannot close its sandbox; the workload dies with
  bwrap's pid namespace, and a service (the X server) must not outlive it either."""
  import signal
  proc = subprocess.Popen([sys.executable, "-c", _KILLED_HARNESS], stdout=subprocess.PIPE, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  try:
    service = int(proc.stdout.readline())
    assert _runs(service), "the service did not start"
  finally:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
  deadline = time.monotonic() + 10
  while _runs(service) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not _runs(service), f"service pid {service} outlived the killed harness"


def _runs(pid: int) -> bool:
  """Alive and not a zombie (a killed process may wait a while for the host's pid 1)."""
  return os.path.exists(f"/proc/{pid}") and pid not in zombies()


@needs_sandbox
def test_rlimits_apply_to_every_process(shell):
  # one launcher sets them (dash `ulimit` beside the cgroup join, or prlimit): check the units
  c = shell.sandbox.config
  out = shell.sandbox.run(["/bin/cat", "/proc/self/limits"], check=True).stdout.decode()
  limits = {line[:26].strip(): line[26:].split()[:2] for line in out.splitlines()[1:]}
  expected = {"Max address space": c.memory_mb << 20, "Max processes": c.nproc,
              "Max cpu time": c.cpu_seconds, "Max file size": c.file_mb << 20,
              "Max open files": c.nofile, "Max core file size": 0}
  for name, value in expected.items():
    assert limits[name] == [str(value)] * 2, (name, limits[name])  # soft and hard


@needs_sandbox
def test_sandbox_bench_runs():
  from mage_jax.bench import sandbox_bench
  if sb.check_available() != "root":  # the bare-nsenter baseline joins the namespaces directly
    with pytest.raises(sb.SandboxUnavailable, match="needs root"):
      sandbox_bench.run_suite(reps=1)
    return
  rows, details = sandbox_bench.run_suite(reps=1)
  fig = details["sandbox"]
  assert [r.name for r in rows] == ["sandbox start-up", "sandbox command / bare nsenter"]
  for key in ("startup_s", "command_s", "bare_nsenter_s", "command_ratio"):
    assert 0 < fig[key] < 60, (key, fig)
  # no timed goal here (shared, noisy machine): the ratio is computed from the two medians
  assert rows[1].value == pytest.approx(fig["command_s"] / fig["bare_nsenter_s"])
