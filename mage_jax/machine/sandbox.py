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
Both: --die-with-parent; a clean environment; size- and inode-limited tmpfs
mounts for the home (/home/user), /tmp and /dev/shm, everything else read-only
(/, /etc, /opt, /var, /dev); read-only /usr and the Python install (+ the venv's
site-packages) at /opt/python; a synthetic /etc (passwd, group, fonts, ld.so
cache); no /root, no host /etc/shadow, no /work, no network (only a private
loopback). rlimits (memory as address space, processes, CPU seconds, file size,
open files) apply to every process started inside, and a cgroup (mage_jax/agent/
cgroup.py) bounds the sandbox's total memory and process count where one can be
created.

The harness enters the sandbox only through namespace fds (and a root-directory
fd) opened at start-up, before any workload runs, so nothing the workload does to
a process afterwards (ptrace it, make it unshare or chroot) changes where the
harness goes. No harness process runs a program the workload could have placed
with more privilege than the workload, and checked files are read by the harness
itself from the root fd (mage_jax/machine/sandbox_files.py), not by a program inside.

If bubblewrap/nsenter/setpriv/unshare/prlimit are missing or namespaces can't be created the
constructor raises `SandboxUnavailable`; nothing ever runs unsandboxed.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from mage_jax.machine import cgroup as cgroup_lib
from mage_jax.machine.sandbox_files import SandboxFiles, Unreadable

HOME = "/home/user"
PY_ROOT = "/opt/python"
REQUIRED_BINARIES = ("bwrap", "nsenter", "setpriv", "unshare", "prlimit", "mount")
# The harness's own processes get only this; the workload gets `sandbox_env`.
HARNESS_ENV = {"PATH": "/usr/sbin:/usr/bin:/bin"}
NAMESPACES = ("mnt", "pid", "net", "ipc", "uts", "user")
NSENTER_FLAG = {"mnt": "--mount", "pid": "--pid", "net": "--net", "ipc": "--ipc", "uts": "--uts",
                "user": "--user"}
# Root mode: every sandbox's harness services (X server, window manager, web replicas) run as a
# uid of their own from this range, held by a lock file for the sandbox's life, so a service one
# episode subverted can neither signal nor trace another episode's services (nor the workloads,
# 65534, nor the harness, root). User mode has one uid to give: there the per-service pid
# namespace (`_service_entry`) is what keeps episodes apart.
SERVICE_UID_BASE, SERVICE_UID_COUNT = 2_000_000_000, 65536
SERVICE_UID_LOCKS = "/run/mage_jax-service-uids"
# The only places the workload can write; a service reads and execs nothing under them except
# a directory the harness mounted and sealed read-only (`service_dir`), like the X socket's.
WORKLOAD_WRITABLE = (HOME, "/tmp", "/dev/shm")
# Empty, read-only directories in every sandbox where a service that must write (Xvfb compiles
# keymaps into /var/lib/xkb, else into /tmp, and reads them back) gets a private tmpfs in a mount
# namespace of its own (`spawn_service(private_dirs=...)`): nothing the workload can reach.
SERVICE_PRIVATE_DIRS = ("/var/lib/xkb",)
log = logging.getLogger(__name__)


class SandboxUnavailable(RuntimeError):
  """Sandboxing cannot work on this host; the harness refuses to run unsandboxed."""


@dataclasses.dataclass
class SandboxConfig:
  home_mb: int = 256        # tmpfs size of /home/user
  tmp_mb: int = 128         # tmpfs size of /tmp (the X socket lives here)
  shm_mb: int = 64          # tmpfs size of /dev/shm
  inodes: int = 32768       # nr_inodes of each tmpfs (inodes cost kernel memory, not size)
  # the whole sandbox's memory (cgroup), where a cgroup is writable; None: the host's memory less
  # a reserve, shared among the slots this process declared (cgroup.memory_share_mb)
  cgroup_memory_mb: int | None = None
  cgroup_pids: int = 1024   # the whole sandbox's processes + threads (cgroup)
  require_cgroup: bool = False  # refuse to start when no cgroup can be created
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
  # `python`, and an agent types it anyway); PATH puts /opt/bin first (read-only, as is
  # every directory on PATH).
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


def wait_forked(p: subprocess.Popen, timeout: float = 10.0) -> None:
  """Returns once `p` (a service's unshare) has forked the service: by then the setpriv before it
  has armed its parent-death signal. A harness killed earlier would leave it running (the signal
  is not sent for a parent that died before it was armed)."""
  children = f"/proc/{p.pid}/task/{p.pid}/children"
  deadline = time.monotonic() + timeout
  while p.poll() is None and time.monotonic() < deadline:
    try:
      with open(children) as f:
        if f.read().strip():
          return
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: nothing to wait on
      return
    time.sleep(0.002)


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


def allocate_service_uid() -> tuple[int, int]:
  """(uid, fd holding its lock): the lowest uid of the service range no live sandbox on this host
  holds (an flock, released when the sandbox closes or its harness process dies). Root mode only."""
  parent = os.path.dirname(SERVICE_UID_LOCKS)
  locks = SERVICE_UID_LOCKS if os.path.isdir(parent) else "/tmp/mage_jax-service-uids"
  os.makedirs(locks, mode=0o700, exist_ok=True)
  st = os.lstat(locks)
  if not os.path.isdir(locks) or os.path.islink(locks) or st.st_uid != 0 or st.st_mode & 0o022:
    raise SandboxUnavailable(f"{locks}: the service uids' lock directory must be a root-owned directory "
                             "that nobody else can write; refusing to run")
  for uid in range(SERVICE_UID_BASE, SERVICE_UID_BASE + SERVICE_UID_COUNT):
    fd = os.open(os.path.join(locks, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      continue
    return uid, fd
  raise SandboxUnavailable(f"all {SERVICE_UID_COUNT} service uids are held by live sandboxes")


def _warn_no_cgroup(reason: str, _seen: set[str] = set()) -> None:  # noqa: B006 (once per reason)
  if reason not in _seen:
    _seen.add(reason)
    log.warning("sandbox without a cgroup (only rlimits and tmpfs limits bound it): %s", reason)


def _binary(name: str) -> str:
  """Absolute path of a host binary; the sandbox sees the same path through its /usr bind."""
  path = shutil.which(name, path=HARNESS_ENV["PATH"])
  if path is None:
    raise SandboxUnavailable(f"sandbox needs {name!r}; refusing to run episodes unsandboxed")
  return os.path.realpath(path)


class Sandbox:
  """A running sandbox. Use `spawn`/`run` to start processes inside it."""

  def __init__(self, config: SandboxConfig | None = None):
    self.config = config or SandboxConfig()
    self.mode = check_available()
    self._closed = False
    self._bwrap: subprocess.Popen | None = None
    self._ns: dict[str, int] = {}           # namespace fds, opened before any workload ran
    self._outer_userns: int | None = None
    self._root_fd: int | None = None
    self._services: list[subprocess.Popen] = []
    self.on_close: list[Callable[[], None]] = []  # run after everything inside is dead (web replicas, cgroups)
    self.cgroup: cgroup_lib.SandboxCgroup | None = None
    self.cgroup_reason = ""
    self._bin = {n: _binary(n) for n in ("nsenter", "setpriv", "prlimit", "env", "sh", "mount", "mkdir",
                                          "unshare")}
    self._sealed: set[str] = set()         # service dirs remounted read-only (`seal_service_dir`)
    self.service_uid: int | None = None    # root mode: this sandbox's services' own uid
    self._service_uid_lock: int | None = None
    # Every process of this sandbox is forked by this one thread: bwrap --die-with-parent uses
    # PR_SET_PDEATHSIG, which fires when the *thread* that forked bwrap exits (sandboxes are
    # made from short-lived threads: HTTP handlers, slot workers), and on cgroup v1 the thread
    # sits in the sandbox's cgroup, so its forks start there (see cgroup.py).
    self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")
    self._spawner_in_cgroup = False
    try:
      self._start()
    except BaseException:
      self.close()
      raise

  # ---- lifecycle ---------------------------------------------------------------------------
  def _start(self) -> None:
    c = self.config
    uid, gid = (c.uid, c.gid) if self.mode == "root" else (os.getuid(), os.getgid())
    self.uid, self.gid = uid, gid
    if self.mode == "root":
      self.service_uid, self._service_uid_lock = allocate_service_uid()
    memory_mb = cgroup_lib.memory_share_mb() if c.cgroup_memory_mb is None else c.cgroup_memory_mb
    overcommit = cgroup_lib.memory_overcommit(memory_mb)
    if overcommit:
      raise SandboxUnavailable(overcommit)
    self.cgroup, self.cgroup_reason = cgroup_lib.create(memory_mb << 20, c.cgroup_pids)
    if self.cgroup is None:
      if c.require_cgroup:
        raise SandboxUnavailable(f"no cgroup for the sandbox ({self.cgroup_reason}) and "
                                 "require_cgroup is set; refusing to run")
      _warn_no_cgroup(self.cgroup_reason)
    elif self.cgroup.version == 1:
      self._spawner.submit(self.cgroup.join_thread).result()
      self._spawner_in_cgroup = True
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
    args = ["bwrap", *ns, "--die-with-parent", "--new-session", "--clearenv",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(c.shm_mb << 20), "--tmpfs", "/dev/shm",
            "--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/opt",
            "--perms", "0755", "--dir", "/home", "--perms", "0755", "--dir", "/var",
            *[a for d in SERVICE_PRIVATE_DIRS for a in ("--perms", "0755", "--dir", d)],
            "--perms", "1777", "--size", str(c.tmp_mb << 20), "--tmpfs", "/tmp",
            "--perms", "0700", "--size", str(c.home_mb << 20), "--tmpfs", HOME]
    for path in ("/etc/fonts", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
                 "/etc/alternatives", "/etc/localtime", "/etc/mime.types", "/etc/X11"):
      if os.path.exists(path):
        args += ["--ro-bind", path, path]
    args += _python_binds() + data_args
    for host, dest in c.ro_binds:
      args += ["--ro-bind", host, dest]
    # the root tmpfs (/, /etc, /opt, /var and the dirs bwrap made) and /dev stay read-only:
    # only the size- and inode-limited tmpfs mounts take writes
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    if self.mode == "user":
      args += ["--uid", str(uid), "--gid", str(gid)]
    info_r, info_w = os.pipe()
    payload = ["/bin/sh", "-c", "echo ready; exec sleep infinity"]
    if self.mode == "root":
      # The payload stays host root (no capabilities in the host user namespace once it has made
      # its own): the workload (65534) can neither signal nor ptrace it. The harness maps 65534
      # into its user namespace below, before anything else runs.
      payload = ["unshare", "--user", "--", *payload]
    args += ["--info-fd", str(info_w), "--chdir", "/", *payload]
    self._bwrap = self._spawner.submit(subprocess.Popen, self._join() + args, pass_fds=(info_w, *data_fds),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=HARNESS_ENV).result()
    os.close(info_w)
    for fd in data_fds:
      os.close(fd)
    with os.fdopen(info_r, "rb") as f:
      info = f.read()  # bwrap closes the info fd once the namespaces exist
    ready = self._bwrap.stdout.readline()
    if ready.strip() != b"ready":
      err = self._bwrap.stderr.read().decode(errors="replace") if self._bwrap.poll() is not None else ""
      raise SandboxUnavailable(f"bubblewrap could not create the sandbox ({self.mode} mode): "
                               f"{err.strip() or 'no output'}; refusing to run unsandboxed")
    self.pid = int(json.loads(info)["child-pid"])
    if self.mode == "root":
      # The payload (child of bwrap's pid 1) is the only process in all six namespaces: join it.
      self.pid = self._userns_holder(self.pid)
      for name, ident in (("uid_map", uid), ("gid_map", gid)):
        with open(f"/proc/{self.pid}/{name}", "w") as f:
          f.write(f"{ident} {ident} 1\n")
    self._hold_namespaces()
    self._files = SandboxFiles(self._root_fd)
    self._limit_tmpfs()
    self.restore_home()

  def _hold_namespaces(self) -> None:
    """Opens the namespace and root fds the harness enters through from now on. Runs before
    any workload exists, so they are the sandbox's own, whatever a process does later."""
    for name in NAMESPACES:
      self._ns[name] = os.open(f"/proc/{self.pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    self._root_fd = os.open(f"/proc/{self.pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    if self.mode == "user":
      self._outer_userns = _outer_user_namespace(self.pid)

  def _fd_path(self, fd: int) -> str:
    return f"/proc/self/fd/{fd}"

  def _privileged_entry(self, namespaces: Sequence[str], wd_fd: int | None = None) -> list[str]:
    """nsenter into `namespaces` with the harness's privileges there (root mode: host root;
    user mode: root of bwrap's outer user namespace). Only for start-up work that runs before
    any workload exists, and for the first hop of workload entry, which execs nothing but the
    host's own binaries from the read-only /usr."""
    args = [self._bin["nsenter"]]
    if self._outer_userns is not None:
      args.append(f"--user={self._fd_path(self._outer_userns)}")
    args += [f"{NSENTER_FLAG[n]}={self._fd_path(self._ns[n])}" for n in namespaces]
    wd = self._root_fd if wd_fd is None else wd_fd
    args += [f"--root={self._fd_path(self._root_fd)}", f"--wd={self._fd_path(wd)}"]
    if self._outer_userns is not None:
      args.append("--preserve-credentials")
    return args

  def _held_fds(self) -> tuple[int, ...]:
    fds = [*self._ns.values(), self._root_fd]
    return tuple(fds + ([self._outer_userns] if self._outer_userns is not None else []))

  def _limit_tmpfs(self) -> None:
    """Adds size and inode limits to the tmpfs mounts (bwrap sets sizes only)."""
    c = self.config
    script = " && ".join(
        f"{self._bin['mount']} -o remount,nosuid,nodev,size={mb << 20},nr_inodes={c.inodes} {path}"
        for path, mb in ((HOME, c.home_mb), ("/tmp", c.tmp_mb), ("/dev/shm", c.shm_mb)))
    r = subprocess.run([*self._privileged_entry(["mnt"]), "--", self._bin["sh"], "-c", script],
                       pass_fds=self._held_fds(), env=HARNESS_ENV, capture_output=True, timeout=30)
    if r.returncode != 0:
      raise SandboxUnavailable(f"could not limit the sandbox's tmpfs mounts: "
                               f"{r.stderr.decode(errors='replace').strip()}; refusing to run")

  def _userns_holder(self, init_pid: int) -> int:
    host_userns = os.readlink("/proc/self/ns/user")
    for pid in descendants(init_pid):
      try:
        if os.readlink(f"/proc/{pid}/ns/user") != host_userns:
          return pid
      except OSError:
        pass
    raise SandboxUnavailable("the sandbox payload created no user namespace (unshare --user failed?); "
                             "refusing to run unsandboxed")

  @property
  def host_root(self) -> str:
    """The sandbox's root directory as a harness path (for the X socket): the root fd held
    since start-up, not /proc/<pid>/root of a process the workload might reshape."""
    return self._fd_path(self._root_fd)

  def alive(self) -> bool:
    return not self._closed and self._bwrap is not None and self._bwrap.poll() is None

  def close(self) -> None:
    """Kills every process in the sandbox (the pid namespace dies with its init) and the
    harness services beside it, then releases the namespaces and the cgroup."""
    if self._closed:
      return
    self._closed = True
    for p in self._services:
      if p.poll() is None:
        p.kill()
      p.wait()
    if self._bwrap is not None:
      kill_tree(self._bwrap.pid)
      try:
        self._bwrap.wait(timeout=10)
      except subprocess.TimeoutExpired:
        pass
      for stream in (self._bwrap.stdout, self._bwrap.stderr):
        stream.close()
    for fd in [*self._ns.values(), self._root_fd, self._outer_userns]:
      if fd is not None:
        os.close(fd)
    self._ns.clear()
    self._root_fd = self._outer_userns = None
    if self._spawner_in_cgroup:
      self._spawner.submit(self.cgroup.leave_thread).result()
    self._spawner.shutdown(wait=False)
    if self._service_uid_lock is not None:  # every service of this uid is dead: the uid is free
      os.close(self._service_uid_lock)
      self._service_uid_lock = None
    if self.cgroup is not None and not self.cgroup.close():
      log.warning("sandbox cgroup %s could not be removed (a process stuck in the kernel?)",
                  self.cgroup.dirs)
    for fn in self.on_close:
      try:
        fn()
      except Exception:  # one failed cleanup must not skip the others
        log.exception("sandbox on_close hook %r failed", fn)

  def __enter__(self) -> "Sandbox":
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()

  # ---- processes ---------------------------------------------------------------------------
  def _workload_entry(self, wd_fd: int) -> list[str]:
    """nsenter into all six namespaces as the sandbox user (no capabilities, no_new_privs).
    Capabilities gained by entering the user namespace are lost at the next exec (the uid is
    not the namespace's root), and no_new_privs keeps them lost."""
    no_new_privs = [self._bin["setpriv"], "--no-new-privs", "--"]
    shared = ["mnt", "pid", "net", "ipc", "uts"]
    if self.mode == "root":
      # nsenter drops supplementary groups (before entering, while it still may) and sets uid/gid.
      return [*self._privileged_entry(shared, wd_fd), f"--user={self._fd_path(self._ns['user'])}",
              "-S", str(self.uid), "-G", str(self.gid), "--", *no_new_privs]
    # User mode: the mount/pid/net/ipc/uts namespaces belong to bwrap's outer user namespace
    # (see _outer_user_namespace): join them through it, then step into the inner one by its
    # fd (inherited; /proc/self is the sandbox's procfs here, and the process is in its pid
    # namespace). The second nsenter is the host's, from the read-only /usr of a mount
    # namespace the workload cannot change. bwrap denies setgroups and maps the caller's
    # uid/gid to themselves, so credentials are preserved.
    return [*self._privileged_entry(shared, wd_fd), "--", self._bin["nsenter"],
            f"--user={self._fd_path(self._ns['user'])}", "--preserve-credentials", "--", *no_new_privs]

  def _service_entry(self, wd_fd: int, private_dirs: Sequence[str] = ()) -> list[str]:
    """The sandbox's mount/net/ipc/uts namespaces but not its pid or user namespace, so the
    workload can't see, signal or trace the process, and a pid namespace of the service's own,
    so nothing the service starts (openbox's actions, were one to run) can see, signal or trace
    another episode's processes or the harness: root mode as this sandbox's own service uid,
    user mode as the outer namespace's root with every capability dropped. Outside the sandbox's
    pid namespace a service does not die with bwrap, so both the unshare that holds its pid
    namespace and the service get a parent-death signal (set by setpriv after the credential
    change, which would clear it): a harness process killed with SIGKILL left its X servers
    running for hours. The service is its namespace's init: when it dies, all it started dies."""
    return [*self._privileged_entry(["mnt", "net", "ipc", "uts"], wd_fd), "--",
            *self._service_tail(private_dirs=private_dirs)]

  def service_argv_prefix(self, namespaces: Sequence[str], mount_proc: bool = False) -> list[str]:
    """For a service started beside the sandbox rather than in its filesystem (the web replica
    server: only the sandbox's network namespace): the same pid namespace of its own, uid and
    parent-death signal as `_service_entry`. `mount_proc`: also a mount namespace of its own with
    a /proc of that pid namespace, so the host's /proc (every harness process) is not in view.
    The caller passes the fds of `namespaces` (and, user mode, the outer user namespace's)."""
    args = [self._bin["nsenter"]]
    if self._outer_userns is not None:   # user mode: the namespaces belong to bwrap's outer user namespace
      args += [f"--user={self._fd_path(self._outer_userns)}", "--preserve-credentials"]
    args += [f"{NSENTER_FLAG[n]}={self._fd_path(self._ns[n])}" for n in namespaces]
    return args + ["--", *self._service_tail(mount_proc)]

  def _service_tail(self, mount_proc: bool = False, private_dirs: Sequence[str] = ()) -> list[str]:
    """unshare holding the service's own pid namespace (its own parent-death signal: it lives in
    the host's pid namespace), then the credential drop and the service's parent-death signal.
    `private_dirs` (from SERVICE_PRIVATE_DIRS): a mount namespace of the service's own too, with
    a small tmpfs owned by the service on each, mounted before the credentials drop."""
    unknown = set(private_dirs) - set(SERVICE_PRIVATE_DIRS)
    if unknown:
      raise ValueError(f"not a service-private directory: {sorted(unknown)} (see SERVICE_PRIVATE_DIRS)")
    own_mounts = ["--mount", "--mount-proc"] if mount_proc else ["--mount"] if private_dirs else []
    holder = [self._bin["setpriv"], "--pdeathsig=KILL", "--", self._bin["unshare"], "--pid", "--fork",
              "--kill-child", *own_mounts, "--"]
    if private_dirs:
      owner = self.service_uid if self.mode == "root" else 0  # user mode: the outer namespace's root
      script = " && ".join(f'{self._bin["mount"]} -t tmpfs -o size=4m,nr_inodes=256,mode=0700,uid={owner},'
                           f'gid={owner},nosuid,nodev,noexec mage-private {d}' for d in private_dirs)
      holder += [self._bin["sh"], "-c", script + ' && exec "$@"', "service-mounts"]
    if self.mode == "root":
      drop = [f"--reuid={self.service_uid}", f"--regid={self.service_uid}", "--clear-groups"]
    else:
      drop = ["--inh-caps=-all", "--bounding-set=-all"]
    return [*holder, self._bin["setpriv"], *drop, "--no-new-privs", "--pdeathsig=KILL", "--"]

  def service_dir(self, path: str, size_kb: int = 64) -> None:
    """A fresh directory at `path` (under /tmp; it must not exist yet) on a tiny tmpfs of its
    own, owned by the service uid, for a service to create its files in (Xvfb's socket);
    `seal_service_dir` makes it read-only once they exist. Run before the workload's first
    process: the directory is new, so nothing the workload planted is in it."""
    owner = self.service_uid if self.mode == "root" else 0  # user mode: the outer namespace's root
    script = (f'{self._bin["mkdir"]} -m 0755 "$0" && {self._bin["mount"]} -t tmpfs -o '
              f'size={size_kb}k,nr_inodes=64,mode=0755,uid={owner},gid={owner},nosuid,nodev,noexec '
              f'mage-service "$0"')
    self._privileged_sh(script, path, f"could not make the service directory {path}")

  def seal_service_dir(self, path: str) -> None:
    """Remounts a `service_dir` read-only: nobody (the service included) can replace, remove or
    add a file in it, and the workload can't unmount it or rename the mount point (it has no
    privilege in the namespace that owns the mount)."""
    self._privileged_sh(f'{self._bin["mount"]} -o remount,bind,ro "$0"', path,
                        f"could not seal the service directory {path}")
    self._sealed.add(os.path.normpath(path))

  def _privileged_sh(self, script: str, arg: str, what: str) -> None:
    r = subprocess.run([*self._privileged_entry(["mnt"]), "--", self._bin["sh"], "-c", script, arg],
                       pass_fds=self._held_fds(), env=HARNESS_ENV, capture_output=True, timeout=30)
    if r.returncode != 0:
      raise RuntimeError(f"{what}: {r.stderr.decode(errors='replace').strip()}")

  def check_service_paths(self, argv: Sequence[str], env: dict[str, str]) -> None:
    """Refuses a service whose argv or environment names a path the workload can write (its
    config, HOME, XDG_* dirs, fontconfig): a service reads and execs only harness-owned,
    read-only files. Colon-separated values (PATH, XDG_*_DIRS) are checked element by element."""
    for where, value in [*(("argv", a) for a in argv), *env.items()]:
      for part in value.split(":"):
        if not part.startswith("/"):
          continue
        norm = os.path.normpath(part)
        if any(norm == s or norm.startswith(s + "/") for s in self._sealed):
          continue
        for w in WORKLOAD_WRITABLE:
          if norm == w or norm.startswith(w + "/"):
            raise ValueError(f"service {argv[0]!r}: {where} names {part!r}, under {w}, which the workload "
                             "can write; services read only harness-owned, read-only paths")

  def _join(self) -> list[str]:
    """The argv prefix that puts a process into the cgroup, unless its forking thread is there."""
    return self.cgroup.join_argv() if self.cgroup is not None and not self._spawner_in_cgroup else []

  def _launcher(self, memory_cgroup: cgroup_lib.SandboxCgroup | None = None) -> list[str]:
    """The argv prefix that puts a process into the cgroup and sets the rlimits, then execs the
    rest. Not a preexec_fn: that is unsafe in a threaded process (slots, HTTP handlers) and
    forces a slow fork (and a warning per spawn once JAX is loaded); with a plain argv,
    subprocess can use vfork/posix_spawn. With `memory_cgroup` the process joins that cgroup
    instead and gets no RLIMIT_AS: the cgroup bounds its real memory (see `spawn`)."""
    c = self.config
    join = memory_cgroup.join_argv() if memory_cgroup is not None else self._join()
    address_space = [] if memory_cgroup is not None else [f"--as={c.memory_mb << 20}"]
    return join + [self._bin["prlimit"], *address_space, f"--nproc={c.nproc}",
                           f"--cpu={c.cpu_seconds}", f"--fsize={c.file_mb << 20}", f"--nofile={c.nofile}",
                           "--core=0", "--"]

  def _popen(self, entry: Callable[[int], list[str]], argv: Sequence[str], env: dict[str, str] | None,
             cwd: str, popen: dict[str, Any],
             memory_cgroup: cgroup_lib.SandboxCgroup | None = None) -> subprocess.Popen:
    if not self.alive():
      raise RuntimeError("sandbox is closed" if self._closed else
                         f"sandbox is gone (bubblewrap exited with {self._bwrap.returncode})")
    env = dict(env if env is not None else sandbox_env())
    inner = [self._bin["env"], "-i", *[f"{k}={v}" for k, v in env.items()]]
    # nsenter starts the process in `cwd` from an fd resolved inside the sandbox's root (one exec
    # fewer than a `cd` inside); a missing or unreadable cwd goes through `cd`, which reports it
    try:
      wd_fd = self._files.open_dir(cwd)
    except OSError:
      wd_fd = None
      inner += [self._bin["sh"], "-c", 'cd "$0" && exec "$@"', cwd]
    try:
      popen["pass_fds"] = (*popen.get("pass_fds", ()), *self._held_fds(),
                           *([wd_fd] if wd_fd is not None else []))
      argv = self._launcher(memory_cgroup) + entry(self._root_fd if wd_fd is None else wd_fd) + inner + list(argv)
      return self._spawner.submit(subprocess.Popen, argv, start_new_session=True, env=HARNESS_ENV,
                                  **popen).result()
    finally:
      if wd_fd is not None:
        os.close(wd_fd)

  def spawn(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str = HOME,
            memory_cgroup: cgroup_lib.SandboxCgroup | None = None, **popen: Any) -> subprocess.Popen:
    """Starts `argv` inside the sandbox as the sandbox user (own session, rlimits, cgroup).
    `memory_cgroup` (a browser's, see mage_jax/tasks/web/browser.py): the process runs in that
    cgroup with no RLIMIT_AS, since Chromium reserves more address space than any sane
    RLIMIT_AS (it crashes under 4-16 GB) while using far less memory."""
    return self._popen(self._workload_entry, argv, env, cwd, popen, memory_cgroup)

  def spawn_service(self, argv: Sequence[str], *, env: dict[str, str] | None = None,
                    private_dirs: Sequence[str] = (), **popen: Any) -> subprocess.Popen:
    """Starts a harness service (the X server, the window manager) on the sandbox's filesystem
    and network but out of the workload's reach (see _service_entry). Killed by `close()`.
    `env` defaults to the harness's own (PATH only): the workload's HOME is no service's."""
    env = dict(env if env is not None else HARNESS_ENV)
    self.check_service_paths(argv, env)
    p = self._popen(lambda wd: self._service_entry(wd, private_dirs), argv, env, "/", popen)
    self._services.append(p)
    wait_forked(p)
    return p

  def run(self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 60,
          check: bool = False, cwd: str = HOME) -> subprocess.CompletedProcess:
    p = self.spawn(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
  def restore_home(self) -> None:
    """Gives the home back to the sandbox user with mode 0700, whatever the workload did to it
    (`chmod 000 ~` would otherwise stop every later shell from starting)."""
    self._files.set_owner_and_mode(HOME, self.uid, self.gid, 0o700)

  def write_file(self, path: str, data: bytes, mode: str = "644") -> None:
    """Writes a file as the sandbox user (parents created); `path` is a sandbox path."""
    path = path if path.startswith("/") else f"{HOME}/{path}"
    self.run(["/bin/sh", "-c", 'mkdir -p "$(dirname "$0")" && cat > "$0" && chmod "$1" "$0"', path, mode],
             input=data, check=True, cwd="/")

  def read_file(self, path: str, limit: int = 64 << 20) -> bytes | None:
    """A sandbox file's bytes as seen inside the sandbox (symlinks resolve in the sandbox, never
    on the host), read by the harness itself. None only if verifiably absent; `Unreadable` if it
    exists but can't be read (permissions, not a regular file, on /proc)."""
    return self._files.read_file(path if path.startswith("/") else f"{HOME}/{path}", limit)

  def list_dir(self, path: str = HOME) -> list[str] | None:
    """Sorted entry names; None only if verifiably absent, else `Unreadable` when not listable."""
    return self._files.list_dir(path if path.startswith("/") else f"{HOME}/{path}")
