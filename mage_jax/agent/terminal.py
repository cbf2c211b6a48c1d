"""The episode's persistent bash shell (the `bash` tool), running inside the sandbox.

The shell reads NUL-terminated commands from fd 3 and `eval`s each in the
same process, so cwd, variables and functions persist; the command's stdin is
/dev/null so it can't swallow later commands. After each command the loop
prints a random end marker with the exit status. A command that outlives its
timeout has its process tree killed; if the shell itself is stuck (a builtin
loop) or has exited, it is restarted and the observation says state was lost.
Output beyond `max_output` bytes is dropped (still drained) and a marker added.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import select
import subprocess
import time

from mage_jax.agent.sandbox import Sandbox, kill_tree, sandbox_env

_LOOP = r'''
exec 3<&0 </dev/null 2>&1
cd "$HOME"
while IFS= read -r -d '' -u 3 __mage_cmd; do
  eval "$__mage_cmd"
  printf '\n%s %d\n' "$__MAGE_MARK" "$?"
done
'''


@dataclasses.dataclass
class ShellResult:
  output: str
  exit_code: int | None
  timed_out: bool = False
  truncated: bool = False
  restarted: bool = False
  flooded: bool = False

  def observation(self) -> str:
    """The text the policy sees."""
    text = self.output.rstrip("\n")
    if self.truncated:
      text += "\n[output truncated]"
    if self.flooded:
      text += "\n[output flood: the command was killed]"
    if self.timed_out:
      text += "\n[command timed out and was killed]"
    if self.restarted:
      text += "\n[the shell was restarted; its working directory and variables were reset]"
    if self.exit_code not in (0, None):
      text += f"\n[exit code {self.exit_code}]"
    return text.strip("\n") or "[no output]"


class PersistentShell:
  def __init__(self, sandbox: Sandbox, *, timeout: float = 30.0, max_output: int = 16_000,
               display: str | None = ":0", flood_bytes: int = 8 << 20):
    self.sandbox, self.timeout, self.max_output, self.display = sandbox, timeout, max_output, display
    self.flood_bytes = flood_bytes  # past this much output the command is killed (an output flood)
    self._proc: subprocess.Popen | None = None
    self._start()

  def _start(self) -> None:
    self._mark = "__MAGE_END_" + secrets.token_hex(8)
    env = sandbox_env(self.display)
    env["__MAGE_MARK"] = self._mark
    self._proc = self.sandbox.spawn(["/bin/bash", "--noprofile", "--norc", "-c", _LOOP], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, bufsize=0)

  def _stop(self) -> None:
    if self._proc is not None:
      kill_tree(self._proc.pid)
      self._proc.wait()
      for s in (self._proc.stdin, self._proc.stdout):
        s.close()
      self._proc = None

  def close(self) -> None:
    self._stop()

  def run(self, command: str, timeout: float | None = None) -> ShellResult:
    timeout = self.timeout if timeout is None else timeout
    if "\0" in command:
      return ShellResult("error: the command contains a NUL byte", None)
    restarted = False
    if self._proc is None or self._proc.poll() is not None:
      self._stop()
      self._start()
      restarted = True
    try:
      self._proc.stdin.write(command.encode() + b"\0")
    except BrokenPipeError:
      self._stop()
      self._start()
      self._proc.stdin.write(command.encode() + b"\0")
      restarted = True
    kept, total, tail = bytearray(), 0, b""
    marker = ("\n" + self._mark + " ").encode()
    deadline = time.monotonic() + timeout
    fd = self._proc.stdout.fileno()
    exit_code, timed_out, flooded = None, False, False
    while True:
      left = deadline - time.monotonic()
      if left <= 0:
        timed_out = True
        break
      if total > self.flood_bytes:
        flooded = True
        break
      ready, _, _ = select.select([fd], [], [], min(left, 0.5))
      if not ready:
        continue
      chunk = os.read(fd, 1 << 16)
      if not chunk:  # the shell exited (e.g. `exit`)
        break
      buf = tail + chunk
      idx = buf.find(marker)
      if idx >= 0 and buf.find(b"\n", idx + len(marker)) >= 0:
        line_end = buf.find(b"\n", idx + len(marker))
        exit_code = int(buf[idx + len(marker):line_end] or -1)
        body = buf[:idx]
        room = self.max_output - len(kept)
        kept += body[:max(room, 0)]
        total += len(body)
        break
      # Keep a tail that may hold a partial marker; everything before it is output.
      keep_back = len(marker) + 24
      body, tail = buf[:-keep_back], buf[-keep_back:]
      room = self.max_output - len(kept)
      kept += body[:max(room, 0)]
      total += len(body)
    if timed_out or flooded:
      # Kill what the command started; if the shell itself is busy (builtin loop), restart it.
      bash_pid = _shell_pid(self._proc.pid)
      if bash_pid is not None:
        kill_tree(bash_pid, include_self=False)
      if bash_pid is None or not self._drain_to_marker(fd, 1.0):
        self._stop()
        self._start()
        restarted = True
    elif exit_code is None:  # EOF: the shell exited
      self._stop()
      self._start()
      restarted = True
    return ShellResult(kept.decode(errors="replace"), exit_code, timed_out, total > self.max_output, restarted,
                       flooded)

  def _drain_to_marker(self, fd: int, wait: float) -> bool:
    """After a kill, waits briefly for the loop's end marker (the shell survived)."""
    deadline, buf = time.monotonic() + wait, b""
    marker = ("\n" + self._mark + " ").encode()
    while time.monotonic() < deadline:
      ready, _, _ = select.select([fd], [], [], 0.1)
      if ready:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
          return False
        buf = (buf + chunk)[-4096:]
        i = buf.find(marker)
        if i >= 0 and buf.find(b"\n", i + len(marker)) >= 0:
          return True
    return False


def _shell_pid(nsenter_pid: int) -> int | None:
  """The bash process under nsenter/setpriv/env/sh wrappers (they exec, except nsenter)."""
  from mage_jax.agent.sandbox import descendants
  for pid in descendants(nsenter_pid):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        if f.read().startswith(b"/bin/bash\0--noprofile"):
          return pid
    except OSError:
      pass
  return None
