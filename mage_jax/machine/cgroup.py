"""A cgroup per sandbox bounding its total memory (page cache, tmpfs, memfd and kernel
memory included) and its process count, where this process may create one.

Child cgroups are only ever created under this process's *own* cgroup (read from
/proc/self/cgroup), never elsewhere in the hierarchy. Two layouts:
- cgroup v1: one child per controller (`memory`, `pids`), each in its own hierarchy;
- cgroup v2: one child in the unified hierarchy, used only when this process's cgroup
  already delegates `memory` and `pids` to its children (`cgroup.subtree_control`);
  enabling them ourselves would need our own cgroup to be empty, which it is not.
v1 is preferred when both exist: on hybrid hosts the v2 hierarchy often lacks the
controllers. `create` returns None with the reason when neither works (no write access,
no controller): the caller decides whether that is fatal.

Joining costs a synchronize_rcu in the kernel (~8 ms on a loaded host) per write, so
on v1 one harness *thread* joins once (`join_thread`: v1 places threads individually)
and forks every sandbox process; children inherit the forking thread's cgroup. On v2
(no per-thread placement for memory) each process joins itself before it execs the
workload (`join_argv`).

Memory share: each sandbox's cgroup memory defaults to the host's memory less a reserve for the
harness and the learner (`HOST_RESERVE_*`), divided among the slots the process declared
(`declare_slots`, by the slot pools), capped at `MAX_SHARE_MB`; an explicit limit that would let
the declared slots' sandboxes add up to more than that is refused (`memory_overcommit`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import threading
import time

V1_CONTROLLERS = ("memory", "pids")
HOST_RESERVE_MB, HOST_RESERVE_FRACTION = 2048, 0.10  # kept for the harness and the learner: the larger
MAX_SHARE_MB = 8192   # a derived share never exceeds this (the old fixed default)
MIN_SHARE_MB = 512    # a pool whose share would be smaller than this is refused
# writes its own pid into each cgroup.procs named before `--`, then drops those arguments
JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '


@dataclasses.dataclass
class SandboxCgroup:
  version: int
  dirs: tuple[str, ...]  # v1: one per controller; v2: one
  parents: tuple[str, ...]  # where they were made: our own cgroup, per controller

  def join_thread(self) -> None:
    """Moves the calling thread (v1 only) into the cgroup; its forks start there."""
    if self.version != 1:
      raise NotImplementedError("cgroup v2 places whole processes only")
    for d in self.dirs:
      with open(os.path.join(d, "tasks"), "w") as f:
        f.write(str(threading.get_native_id()))

  def leave_thread(self) -> None:
    """Moves the calling thread back to the cgroup(s) it came from."""
    for d in self.parents:
      with open(os.path.join(d, "tasks"), "w") as f:
        f.write(str(threading.get_native_id()))

  @property
  def procs_files(self) -> tuple[str, ...]:
    return tuple(os.path.join(d, "cgroup.procs") for d in self.dirs)

  def join_argv(self) -> list[str]:
    """An argv prefix that moves itself into this cgroup and execs the rest. A shell is the
    one thing that writes a file and execs without a Python preexec_fn (unsafe with threads)."""
    return ["/bin/sh", "-c", JOIN_SCRIPT + 'exec "$@"', "cgroup-join", *self.procs_files, "--"]

  def pids(self) -> list[int]:
    out: set[int] = set()
    for path in self.procs_files:
      try:
        with open(path) as f:
          out.update(int(line) for line in f if line.strip())
      except OSError:
        pass
    return sorted(out)

  def memory_limit(self) -> int:
    name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
    with open(os.path.join(self.dirs[0], name)) as f:
      return int(f.read())

  def close(self, timeout: float = 5.0) -> bool:
    """Kills what is left inside and removes the cgroup(s). False if one could not be removed
    (a process in uninterruptible sleep); the caller reports it."""
    deadline = time.monotonic() + timeout
    remaining = list(self.dirs)
    while remaining:
      for pid in self.pids():
        if pid == os.getpid():  # a harness thread still inside: never kill the harness
          continue
        try:
          os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
      for d in list(remaining):
        try:
          os.rmdir(d)
          remaining.remove(d)
        except FileNotFoundError:
          remaining.remove(d)
        except OSError:
          pass
      if remaining:
        if time.monotonic() > deadline:
          return False
        time.sleep(0.02)
    return True


def _own_cgroups() -> dict[str, str]:
  """{controller or '' (v2): path} from /proc/self/cgroup."""
  out = {}
  with open("/proc/self/cgroup") as f:
    for line in f:
      _, controllers, path = line.rstrip("\n").split(":", 2)
      for c in controllers.split(",") if controllers else [""]:
        out[c] = path
  return out


def _mounts() -> list[tuple[str, str, str, set[str]]]:
  """(fstype, root inside the hierarchy, mount point, super options) of cgroup mounts."""
  out = []
  with open("/proc/self/mountinfo") as f:
    for line in f:
      left, right = line.split(" - ", 1)
      fields, rfields = left.split(), right.split()
      if rfields[0] in ("cgroup", "cgroup2"):
        out.append((rfields[0], fields[3], fields[4], set(rfields[2].split(","))))
  return out


def _under(mount_root: str, mount_point: str, own: str) -> str | None:
  """Our cgroup's directory in a mount whose root is `mount_root` (a cgroup namespace or a
  bind of a sub-tree shows only part of the hierarchy)."""
  if mount_root == "/":
    return mount_point + own.rstrip("/")
  if own == mount_root or own.startswith(mount_root.rstrip("/") + "/"):
    return mount_point + own[len(mount_root.rstrip("/")):]
  return None


PREFIX = "mage-sandbox-"


def remove_stale(parent: str) -> int:
  """Removes empty sandbox cgroups left by harness processes that died without closing them
  (named after their creator's pid); returns how many. A live pid's are never touched."""
  removed = 0
  try:
    names = os.listdir(parent)
  except OSError:
    return 0
  for name in names:
    pid = name[len(PREFIX):].split("-", 1)[0]
    if not name.startswith(PREFIX) or not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
      continue
    try:
      os.rmdir(os.path.join(parent, name))  # fails (EBUSY) while any process is inside
      removed += 1
    except OSError:
      pass
  return removed


def _make_child(parent: str, name: str, limits: dict[str, str]) -> str:
  path = os.path.join(parent, name)
  os.mkdir(path)
  try:
    for fname, value in limits.items():
      with open(os.path.join(path, fname), "w") as f:
        f.write(value)
  except OSError:
    os.rmdir(path)
    raise
  return path


def create(memory_bytes: int, pids_max: int) -> tuple[SandboxCgroup | None, str]:
  """A fresh child cgroup with the limits set, or (None, why not)."""
  try:
    own, mounts = _own_cgroups(), _mounts()
  except OSError as e:
    return None, f"cannot read this process's cgroups: {e}"
  name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
  reasons = []
  parents = {}
  for fstype, root, point, opts in mounts:
    for c in V1_CONTROLLERS:
      if fstype == "cgroup" and c in opts and c in own:
        parents.setdefault(c, _under(root, point, own[c]))
  if all(parents.get(c) for c in V1_CONTROLLERS):
    made: list[str] = []
    try:
      limits = {"memory": {"memory.limit_in_bytes": str(memory_bytes)}, "pids": {"pids.max": str(pids_max)}}
      for c in V1_CONTROLLERS:
        remove_stale(parents[c])
        made.append(_make_child(parents[c], name, limits[c]))
      memsw = os.path.join(made[0], "memory.memsw.limit_in_bytes")
      if os.path.exists(memsw):  # swap counted too, where the kernel accounts it
        with open(memsw, "w") as f:
          f.write(str(memory_bytes))
      return SandboxCgroup(1, tuple(made), tuple(parents[c] for c in V1_CONTROLLERS)), ""
    except OSError as e:
      SandboxCgroup(1, tuple(made), ()).close()
      reasons.append(f"cgroup v1 {parents}: {e}")
  else:
    reasons.append(f"cgroup v1: no writable hierarchy for {[c for c in V1_CONTROLLERS if not parents.get(c)]}")
  for fstype, root, point, _ in mounts:
    if fstype != "cgroup2" or "" not in own:
      continue
    parent = _under(root, point, own[""])
    if parent is None:
      continue
    try:
      with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        delegated = set(f.read().split())
      if not {"memory", "pids"} <= delegated:
        reasons.append(f"cgroup v2 {parent}: memory/pids not delegated to children "
                       f"(cgroup.subtree_control: {sorted(delegated)})")
        continue
      remove_stale(parent)
      path = _make_child(parent, name, {"memory.max": str(memory_bytes), "pids.max": str(pids_max)})
      swap = os.path.join(path, "memory.swap.max")
      if os.path.exists(swap):  # no swapping past the bound either
        with open(swap, "w") as f:
          f.write("0")
      return SandboxCgroup(2, (path,), (parent,)), ""
    except OSError as e:
      reasons.append(f"cgroup v2 {parent}: {e}")
  return None, "; ".join(reasons) or "no cgroup hierarchy mounted"


_SLOTS_LOCK = threading.Lock()
_declared_slots = 0


def host_memory_mb() -> int:
  """The memory this process may use: MemTotal, or its own cgroup's limit where that is lower
  (a container)."""
  with open("/proc/meminfo") as f:
    total = next(int(line.split()[1]) >> 10 for line in f if line.startswith("MemTotal:"))
  with contextlib.suppress(OSError, ValueError, StopIteration):
    own, mounts = _own_cgroups(), _mounts()
    for fstype, root, point, opts in mounts:
      key, name = ("memory", "memory.limit_in_bytes") if fstype == "cgroup" else ("", "memory.max")
      if (fstype == "cgroup" and "memory" not in opts) or key not in own:
        continue
      d = _under(root, point, own[key])
      if d is None:
        continue
      with open(os.path.join(d, name)) as f:
        value = f.read().strip()
      if value.isdigit():
        total = min(total, int(value) >> 20)
  return total


def sandbox_budget_mb() -> int:
  """What all of this host's sandboxes together may hold: the host's memory less the reserve."""
  host = host_memory_mb()
  return host - max(HOST_RESERVE_MB, int(host * HOST_RESERVE_FRACTION))


def declared_slots() -> int:
  return max(1, _declared_slots)


@contextlib.contextmanager
def declare_slots(n: int):
  """Held by a slot pool while it runs `n` sandboxes at once in this process: the derived
  memory share divides the budget among them. Refuses (ValueError, one line) a pool whose
  share would fall under MIN_SHARE_MB."""
  global _declared_slots
  with _SLOTS_LOCK:
    total = _declared_slots + n
    budget = sandbox_budget_mb()
    if budget // total < MIN_SHARE_MB:
      raise ValueError(f"{total} sandbox slots on this host leave {budget // total} MB each "
                       f"(host {host_memory_mb()} MB less the reserve); each needs at least {MIN_SHARE_MB} MB: "
                       "run fewer slots")
    _declared_slots = total
  try:
    yield
  finally:
    with _SLOTS_LOCK:
      _declared_slots -= n


def memory_share_mb() -> int:
  """The default cgroup memory of one sandbox: the budget over the declared slots, capped."""
  return min(MAX_SHARE_MB, sandbox_budget_mb() // declared_slots())


def memory_overcommit(memory_mb: int) -> str:
  """Why `memory_mb` per sandbox cannot be granted to every declared slot ('' when it can)."""
  slots, budget = declared_slots(), sandbox_budget_mb()
  if memory_mb * slots <= budget:
    return ""
  return (f"cgroup_memory_mb={memory_mb} x {slots} slots = {memory_mb * slots} MB exceeds the host's "
          f"{host_memory_mb()} MB less the reserve ({budget} MB): lower it or leave it unset (derived)")
