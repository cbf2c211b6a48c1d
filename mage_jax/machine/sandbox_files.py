"""Harness-side file access to a sandbox's filesystem, confined to the sandbox's root.

The harness never runs a program to read a checked file (a program inside would run in
namespaces, and with binaries, that the workload may influence). It resolves the path
itself with openat2(2) from an fd of the sandbox's root directory opened at start-up:
RESOLVE_IN_ROOT makes symlinks and `..` resolve as they would inside the sandbox (never
on the host), RESOLVE_NO_MAGICLINKS refuses /proc/<pid>/root-style links, and files on
the sandbox's procfs are refused. The contract (`Unreadable`, an OSError): None only when
the path is verifiably absent; anything else that stops a read raises.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat

SYS_OPENAT2 = 437  # x86_64 and arm64 (the unified syscall table)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
O_PATH = getattr(os, "O_PATH", 0o10000000)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
  _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class Unreadable(OSError):
  """A checked path exists (or may exist) but the harness cannot read it: permissions, a FIFO,
  a device, a symlink swapped in mid-read, a dead shell. The contract of `read_file`/`list_dir`
  (sandbox and CheckContext alike): None means *verifiably absent*; anything else that stops a
  read raises this. Checkers score it 0, never as "absent" (it is an OSError, so `score` does)."""


# errnos that prove the path does not exist: no entry, or a non-directory where a directory
# would have to be on the way
_ABSENT = (errno.ENOENT, errno.ENOTDIR)


def openat2(root_fd: int, path: str, flags: int) -> int:
  how = _OpenHow(flags | os.O_CLOEXEC, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
  fd = _libc.syscall(SYS_OPENAT2, ctypes.c_int(root_fd), os.fsencode(path), ctypes.byref(how),
                     ctypes.c_size_t(ctypes.sizeof(how)))
  if fd < 0:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err), path)
  return fd


class SandboxFiles:
  """Reads (and the few harness-side metadata fixes) inside one sandbox root."""

  def __init__(self, root_fd: int):
    self.root_fd = root_fd
    self._proc_dev = os.stat("proc", dir_fd=root_fd).st_dev  # the sandbox's procfs

  def _open_path(self, path: str, what: str) -> int | None:
    """An O_PATH fd of `path` (the final symlink followed inside the root); None if absent."""
    try:
      return openat2(self.root_fd, path.lstrip("/") or ".", O_PATH)
    except OSError as e:
      if e.errno in _ABSENT:
        return None
      raise Unreadable(e.errno, f"cannot resolve {what} {path!r} in the sandbox: {e.strerror}") from None

  def _checked(self, fd: int, path: str, want, kind: str) -> os.stat_result:
    st = os.fstat(fd)
    if st.st_dev == self._proc_dev:
      raise Unreadable(errno.EACCES, f"{path!r} is on the sandbox's /proc; the harness doesn't read it")
    if not want(st.st_mode):
      raise Unreadable(errno.EINVAL, f"{path!r} exists but is not a {kind} "
                                     f"(mode {stat.filemode(st.st_mode)})")
    return st

  def _reopen(self, fd: int, flags: int, path: str) -> int:
    """Opens the very inode `fd` names (no second path walk a swap could redirect)."""
    try:
      return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
      raise Unreadable(e.errno, f"cannot open {path!r} in the sandbox: {e.strerror}") from None

  def _open_checked(self, path: str, want, kind: str, flags: int) -> int | None:
    """An fd of `path` opened with `flags`, after checking its type on an O_PATH fd (opening
    a FIFO or a device could block or act); None if absent."""
    fd = self._open_path(path, kind)
    if fd is None:
      return None
    try:
      self._checked(fd, path, want, kind)
      return self._reopen(fd, flags, path)
    finally:
      os.close(fd)

  def read_file(self, path: str, limit: int) -> bytes | None:
    data_fd = self._open_checked(path, stat.S_ISREG, "regular file", os.O_RDONLY | os.O_NONBLOCK)
    if data_fd is None:
      return None
    try:
      self._checked(data_fd, path, stat.S_ISREG, "regular file")
      chunks, left = [], limit
      while left > 0:
        chunk = os.read(data_fd, min(left, 1 << 20))
        if not chunk:
          break
        chunks.append(chunk)
        left -= len(chunk)
      return b"".join(chunks)
    except OSError as e:
      if isinstance(e, Unreadable):
        raise
      raise Unreadable(e.errno, f"cannot read {path!r} in the sandbox: {e.strerror}") from None
    finally:
      os.close(data_fd)

  def list_dir(self, path: str) -> list[str] | None:
    dir_fd = self._open_checked(path, stat.S_ISDIR, "directory", os.O_RDONLY | os.O_DIRECTORY)
    if dir_fd is None:
      return None
    try:
      return sorted(os.listdir(dir_fd))
    except OSError as e:
      raise Unreadable(e.errno, f"cannot list {path!r} in the sandbox: {e.strerror}") from None
    finally:
      os.close(dir_fd)

  def open_dir(self, path: str) -> int:
    """An O_PATH fd of the directory `path` (FileNotFoundError if absent); the caller closes it."""
    fd = self._open_path(path, "directory")
    if fd is None:
      raise FileNotFoundError(errno.ENOENT, "missing in the sandbox", path)
    try:
      self._checked(fd, path, stat.S_ISDIR, "directory")
    except BaseException:
      os.close(fd)
      raise
    return fd

  def set_owner_and_mode(self, path: str, uid: int, gid: int, mode: int) -> None:
    """chown + chmod of a sandbox directory, as the harness (used on the home, which the
    workload may have made unusable: `chmod 000 ~`). Only ever called on a mount point the
    workload can't replace."""
    fd = self.open_dir(path)
    try:
      link = f"/proc/self/fd/{fd}"
      if os.geteuid() == 0:
        os.chown(link, uid, gid)
      os.chmod(link, mode)
    finally:
      os.close(fd)
