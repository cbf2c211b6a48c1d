"""One isolated sandbox per episode: bubblewrap namespaces + an unprivileged user + rlimits.

Everything of an episode (its X server, its apps, its bash shell) runs inside
ONE sandbox, so the desktop and the shell see the same filesystem. The
sandbox is a bubblewrap instance whose payload only waits; real processes
join its namespaces with `nsenter` and drop to the sandbox user with
`setpriv`.

Two modes, chosen by who runs the harness:
- root (CI, most containers): bwrap runs privileged and creates new mount,
  pid, network, ipc and uts namespaces. Its payload drops to host uid/gid
  65534 (nobody: no capabilities, no supplementary groups, no_new_privs) and
  only then creates a new *user* namespace (`unshare --user`, mapping 65534
  to itself), so the namespace is owned by the unprivileged user. Workloads
  join all six namespaces with `nsenter` and run as host uid 65534 inside
  that user namespace. A root process would ignore RLIMIT_NPROC and could read
  /etc/shadow; nobody cannot, and since the process count is kept per
  (user namespace, uid), RLIMIT_NPROC bounds each sandbox separately (a fork
  bomb in one slot cannot starve the others).
  Why not `bwrap --unshare-user` directly: run by real root (not setuid),
  bwrap maps the sandbox uid to the *caller's* uid, i.e. host root, which
  defeats the point; and run after dropping to 65534 it cannot bind the
  interpreter (here under /root, mode 0700: bwrap resolves every bind source,
  even `--ro-bind-fd`, with the unprivileged user's permissions).
- unprivileged user: bwrap --unshare-all adds a new user namespace; the
  workload keeps the caller's (already unprivileged) uid.
Both: --die-with-parent; a size-limited tmpfs home (/home/user) and /tmp;
read-only /usr and the Python install (+ the venv's site-packages) at
/opt/python; a synthetic /etc (passwd, group, fonts, ld.so cache); no /root,
no host /etc/shadow, no /work, no network (only a private loopback).
rlimits (memory as address space, processes, CPU seconds, file size, open
files) apply to every process started inside.

If bubblewrap/nsenter/setpriv/unshare/prlimit are missing or namespaces can't be created the
constructor raises `SandboxUnavailable`; nothing ever runs unsandboxed.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

HOME = "/home/user"
PY_ROOT = "/opt/python"
REQUIRED_BINARIES = ("bwrap", "nsenter", "setpriv", "unshare", "prlimit")


# bwrap --die-with-parent uses PR_SET_PDEATHSIG, which fires when the *thread* that forked
# bwrap exits. Sandboxes are created from short-lived threads (HTTP handlers, slot workers),
# so every bwrap is forked by this one long-lived launcher thread instead.
_LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-launcher")


class SandboxUnavailable(RuntimeError):
  """Sandboxing cannot work on this host; the harness refuses to run unsandboxed."""


class Unreadable(OSError):
  """A checked path exists (or may exist) but the harness cannot read it: permissions, a FIFO,
  a device, a symlink swapped in mid-read, a dead shell. The contract of `read_file`/`list_dir`
  (sandbox and CheckContext alike): None means *verifiably absent*; anything else that stops a
  read raises this. Checkers score it 0, never as "absent" (it is an OSError, so `score` does)."""


@dataclasses.dataclass
class SandboxConfig:
  home_mb: int = 256        # tmpfs size of /home/user
  tmp_mb: int = 128         # tmpfs size of /tmp (the X socket lives here)
  memory_mb: int = 4096     # RLIMIT_AS per process
  nproc: int = 256          # RLIMIT_NPROC for the sandbox user
  cpu_seconds: int = 900    # RLIMIT_CPU per process
  file_mb: int = 256        # RLIMIT_FSIZE
  nofile: int = 1024        # RLIMIT_NOFILE
  uid: int = 65534          # sandbox user in root mode
  gid: int = 65534
  ro_binds: tuple[tuple[str, str], ...] = ()  # extra (host, sandbox) read-only binds, e.g. task apps


def _python_binds() -> list[str]:
  """Read-only binds that make the running interpreter + its site-packages usable inside."""
  base = os.path.realpath(sys.base_prefix)
  ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
  args = ["--ro-bind", base, PY_ROOT]
  # `python` and `python3` always name this interpreter (a Debian system Python has no
  # `python`, and an agent types it anyway); PATH puts /opt/bin first.
  for name in ("python", "python3"):
    args += ["--symlink", python_in_sandbox(), f"/opt/bin/{name}"]
  purelib = os.path.realpath(sysconfig.get_paths()["purelib"])
  if os.path.realpath(sys.prefix) != base and os.path.isdir(purelib):
    args += ["--ro-bind", purelib, f"{PY_ROOT}/lib/{ver}/site-packages"]
  return args


def python_in_sandbox() -> str:
  return f"{PY_ROOT}/bin/python{sys.version_info.major}.{sys.version_info.minor}"


def sandbox_env(display: str | None = ":0") -> dict[str, str]:
  env = {"HOME": HOME, "USER": "user", "LOGNAME": "user", "LANG": "C.UTF-8", "TERM": "dumb",
         "PATH": f"/opt/bin:{PY_ROOT}/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
         "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MPLCONFIGDIR": "/tmp/mpl",
         "SHELL": "/bin/bash",
         # the interpreter's RPATH points at its host prefix; without this the system libpython loads
         "LD_LIBRARY_PATH": f"{PY_ROOT}/lib"}
  if display:
    env["DISPLAY"] = display
  return env


def descendants(pid: int) -> list[int]:
  """All live descendants of `pid` (host pids), from /proc."""
  children: dict[int, list[int]] = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat", "rb") as f:
        stat = f.read().decode(errors="replace")
    except OSError:
      continue
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    children.setdefault(ppid, []).append(int(entry))
  out, stack = [], [pid]
  while stack:
    for c in children.get(stack.pop(), []):
      out.append(c)
      stack.append(c)
  return out


def kill_tree(pid: int, include_self: bool = True) -> None:
  for p in descendants(pid) + ([pid] if include_self else []):
    try:
      os.kill(p, signal.SIGKILL)
    except ProcessLookupError:
      pass


def check_available() -> str:
  """Returns the mode ('root' or 'user') or raises SandboxUnavailable with the reason."""
  missing = [b for b in REQUIRED_BINARIES if shutil.which(b) is None]
  if missing:
    raise SandboxUnavailable(
        f"sandbox needs {missing} (Debian: apt-get install bubblewrap util-linux); "
        "refusing to run episodes unsandboxed")
  if os.geteuid() == 0:
    return "root"
  try:
    with open("/proc/sys/user/max_user_namespaces") as f:
      if int(f.read()) == 0:
        raise SandboxUnavailable("user namespaces are disabled (user.max_user_namespaces = 0); "
                                 "run as root or enable them; refusing to run unsandboxed")
  except FileNotFoundError:
    pass
  try:
    with open("/proc/sys/kernel/unprivileged_userns_clone") as f:
      if f.read().strip() == "0":
        raise SandboxUnavailable("unprivileged user namespaces are disabled "
                                 "(kernel.unprivileged_userns_clone = 0); refusing to run unsandboxed")
  except FileNotFoundError:
    pass
  return "user"


NS_GET_PARENT = 0xB702  # _IO(0xb7, 0x2) in linux/nsfs.h


def _outer_user_namespace(pid: int) -> int | None:
  """An fd of the user namespace that owns `pid`'s other namespaces, if it isn't pid's own.

  Unprivileged, bwrap maps uid 0 in a first user namespace (mounting devpts for --dev needs
  it), creates the mount/pid/net/ipc/uts namespaces there, then moves the payload into a
  nested user namespace that maps the caller's uid. Joining those namespaces needs
  CAP_SYS_ADMIN in the outer one, which no process stays in: the nsfs ioctl reaches it.
  None when there is no nesting (the parent is our own user namespace)."""
  fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
  try:
    parent = fcntl.ioctl(fd, NS_GET_PARENT)
  finally:
    os.close(fd)
  if os.fstat(parent).st_ino == os.stat("/proc/self/ns/user").st_ino:
    os.close(parent)
    return None
  return parent


class Sandbox:
  """A running sandbox. Use `spawn`/`run` to start processes inside it."""

  def __init__(self, config: SandboxConfig | None = None):
    self.config = config or SandboxConfig()
    self.mode = check_available()
    self._lock = threading.Lock()
    self._closed = False
    self._outer_userns: int | None = None
    self._start()

  # ---- lifecycle ---------------------------------------------------------------------------
  def _start(self) -> None:
    c = self.config
    uid, gid = (c.uid, c.gid) if self.mode == "root" else (os.getuid(), os.getgid())
    passwd = (f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
              f"user:x:{uid}:{gid}:sandbox user:{HOME}:/bin/bash\n").encode()
    group = f"root:x:0:\nuser:x:{gid}:\n".encode()
    data_fds, data_args = [], []
    for content, dest in ((passwd, "/etc/passwd"), (group, "/etc/group"),
                          (b"sandbox\n", "/etc/hostname"), (b"127.0.0.1 localhost sandbox\n", "/etc/hosts")):
      r, w = os.pipe()
      os.write(w, content)
      os.close(w)
      data_fds.append(r)
      data_args += ["--ro-bind-data", str(r), dest]
    ns = (["--unshare-all"] if self.mode == "user" else
          ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"])
    args = ["bwrap", *ns, "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc", "--dev", "/dev",
            "--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/opt",
            "--perms", "0755", "--dir", "/home", "--perms", "0755", "--dir", "/var",
            "--perms", "1777", "--size", str(c.tmp_mb << 20), "--tmpfs", "/tmp",
            "--perms", "0700", "--size", str(c.home_mb << 20), "--tmpfs", HOME]
    for path in ("/etc/fonts", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
                 "/etc/alternatives", "/etc/localtime", "/etc/mime.types", "/etc/X11"):
      if os.path.exists(path):
        args += ["--ro-bind", path, path]
    args += _python_binds() + data_args
    for host, dest in c.ro_binds:
      args += ["--ro-bind", host, dest]
    if self.mode == "user":
      args += ["--uid", str(uid), "--gid", str(gid)]
    info_r, info_w = os.pipe()
    payload = ["/bin/sh", "-c", "echo ready; exec sleep infinity"]
    if self.mode == "root":  # drop to the sandbox user first, then create the user namespace as that user
      payload = ["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--",
                 "unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--", *payload]
    args += ["--info-fd", str(info_w), "--chdir", "/", *payload]
    self._bwrap = _LAUNCHER.submit(subprocess.Popen, args, pass_fds=(info_w, *data_fds),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE).result()
    os.close(info_w)
    for fd in data_fds:
      os.close(fd)
    with os.fdopen(info_r, "rb") as f:
      info = f.read()  # bwrap closes the info fd once the namespaces exist
    ready = self._bwrap.stdout.readline()
    if ready.strip() != b"ready":
      err = self._bwrap.stderr.read().decode(errors="replace") if self._bwrap.poll() is not None else ""
      self._bwrap.kill()
      raise SandboxUnavailable(f"bubblewrap could not create the sandbox ({self.mode} mode): "
                               f"{err.strip() or 'no output'}; refusing to run unsandboxed")
    self.pid = int(json.loads(info)["child-pid"])
    self._outer_userns = _outer_user_namespace(self.pid) if self.mode == "user" else None
    if self.mode == "root":
      # The payload (child of bwrap's pid 1) is the only process in all six namespaces: join it.
      self.pid = self._userns_holder(self.pid)
    self.uid, self.gid = uid, gid
    if self.mode == "root":  # tmpfs mounts belong to root; hand the home to the sandbox user
      self.run(["chown", f"{uid}:{gid}", HOME], as_root=True, check=True)

  def _userns_holder(self, init_pid: int) -> int:
    host_userns = os.readlink("/proc/self/ns/user")
    for pid in descendants(init_pid):
      try:
        if os.readlink(f"/proc/{pid}/ns/user") != host_userns:
          return pid
      except OSError:
        pass
    self.close()
    raise SandboxUnavailable("the sandbox payload created no user namespace (unshare --user failed?); "
                             "refusing to run unsandboxed")

  @property
  def host_root(self) -> str:
    """The sandbox's root directory seen from the host (for the X socket)."""
    return f"/proc/{self.pid}/root"

  def alive(self) -> bool:
    return not self._closed and self._bwrap.poll() is None

  def close(self) -> None:
    """Kills every process in the sandbox (the pid namespace dies with its init)."""
    if self._closed:
      return
    self._closed = True
    kill_tree(self._bwrap.pid)
    try:
      self._bwrap.wait(timeout=10)
    except subprocess.TimeoutExpired:
      pass
    for stream in (self._bwrap.stdout, self._bwrap.stderr):
      stream.close()
    if self._outer_userns is not None:
      os.close(self._outer_userns)

  def __enter__(self) -> "Sandbox":
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()

  # ---- processes ---------------------------------------------------------------------------
  def _prefix(self, as_root: bool) -> list[str]:
    namespaces = ["-m", "-p", "-n", "-i", "-u", "-r", "-w"]
    if as_root and self.mode == "root":  # harness-only: host root in the sandbox's mount view (reads, chown)
      return ["nsenter", "-t", str(self.pid), *namespaces, "--"]
    # Join the user namespace too. Capabilities gained by entering it are lost at the next exec
    # (the uid is not the namespace's root), and no_new_privs keeps them lost.
    no_new_privs = ["setpriv", "--no-new-privs", "--"]
    if self.mode == "root":
      # nsenter drops supplementary groups (before entering, while it still may) and sets uid/gid.
      return ["nsenter", "-t", str(self.pid), *namespaces, "-U", "-S", str(self.uid),
              "-G", str(self.gid), "--", *no_new_privs]
    # User mode: bwrap denies setgroups in its user namespace and maps the caller's uid/gid to
    # themselves, so the (already unprivileged) caller keeps its credentials as they are.
    if self._outer_userns is None:
      return ["nsenter", "-t", str(self.pid), *namespaces, "-U", "--preserve-credentials", "--",
              *no_new_privs]
    # The mount/pid/net/ipc/uts namespaces belong to bwrap's outer user namespace (see
    # _outer_user_namespace): join them through it, then step into the payload's inner one.
    return ["nsenter", "-t", str(self.pid), f"--user=/proc/self/fd/{self._outer_userns}",
            *namespaces, "--preserve-credentials", "--",
            # inside the sandbox's /proc the payload's parent (bwrap's init) is pid 1
            "nsenter", "-t", "1", "-U", "--preserve-credentials", "--", *no_new_privs]

  def _limits(self) -> list[str]:
    """A `prlimit` wrapper that sets the rlimits and execs the rest. Not a preexec_fn: that is
    unsafe in a threaded process (slots, HTTP handlers) and forces a slow fork (and a warning
    per spawn once JAX is loaded); with a plain argv, subprocess can use vfork/posix_spawn."""
    c = self.config
    return ["prlimit", f"--as={c.memory_mb << 20}", f"--nproc={c.nproc}", f"--cpu={c.cpu_seconds}",
            f"--fsize={c.file_mb << 20}", f"--nofile={c.nofile}", "--core=0", "--"]

  def spawn(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str = HOME,
            as_root: bool = False, **popen: Any) -> subprocess.Popen:
    """Starts `argv` inside the sandbox as the sandbox user (own session, rlimits applied)."""
    if not self.alive():
      raise RuntimeError("sandbox is closed")
    env = dict(env if env is not None else sandbox_env())
    inner = ["/usr/bin/env", "-i", *[f"{k}={v}" for k, v in env.items()],
             "/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv]
    if self._outer_userns is not None:
      popen["pass_fds"] = (*popen.get("pass_fds", ()), self._outer_userns)
    return subprocess.Popen(([] if as_root else self._limits()) + self._prefix(as_root) + inner,
                            start_new_session=True, env={"PATH": "/usr/sbin:/usr/bin:/bin"}, **popen)

  def run(self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 60,
          as_root: bool = False, check: bool = False, cwd: str = HOME) -> subprocess.CompletedProcess:
    p = self.spawn(argv, as_root=as_root, cwd=cwd if not as_root else "/", stdin=subprocess.PIPE,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
      out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
      kill_tree(p.pid)
      out, err = p.communicate()
      raise
    result = subprocess.CompletedProcess(list(argv), p.returncode, out, err)
    if check and p.returncode != 0:
      raise RuntimeError(f"sandbox command {list(argv)} failed ({p.returncode}): "
                         f"{err.decode(errors='replace').strip()}")
    return result

  # ---- files (harness side) ----------------------------------------------------------------
  def write_file(self, path: str, data: bytes, mode: str = "644") -> None:
    """Writes a file as the sandbox user (parents created); `path` is a sandbox path."""
    path = path if path.startswith("/") else f"{HOME}/{path}"
    self.run(["/bin/sh", "-c", 'mkdir -p "$(dirname "$0")" && cat > "$0" && chmod "$1" "$0"', path, mode],
             input=data, check=True)

  def read_file(self, path: str, limit: int = 64 << 20) -> bytes | None:
    """Reads a sandbox file as seen inside the sandbox (symlinks resolve in the sandbox,
    never on the host); None if it doesn't exist or isn't a regular file."""
    path = path if path.startswith("/") else f"{HOME}/{path}"
    r = self.run(["/bin/sh", "-c", '[ -f "$0" ] || exit 3; head -c "$1" -- "$0"', path, str(limit)],
                 as_root=self.mode == "root")
    return r.stdout if r.returncode == 0 else None

  def list_dir(self, path: str = HOME) -> list[str] | None:
    path = path if path.startswith("/") else f"{HOME}/{path}"
    r = self.run(["/bin/sh", "-c", '[ -d "$0" ] || exit 3; ls -A1 -- "$0"', path], as_root=self.mode == "root")
    return r.stdout.decode(errors="replace").splitlines() if r.returncode == 0 else None
