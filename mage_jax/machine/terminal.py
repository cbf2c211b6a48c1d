"""The episode's persistent bash shell (the `bash` tool), running inside the sandbox.

The shell reads NUL-terminated (nonce, command) records from fd 3 and `eval`s
each command in the same process, so cwd, variables and functions persist; the
command's stdin is /dev/null so it can't swallow later commands, and fd 3 is
closed while it runs (`exec 3<&-` in a command can't cut the loop's channel).

Framing. Around each command the loop prints a begin and an end marker that
carry a fresh random nonce, chosen by the harness when it sends the command.
The observation is the text between the two. A command runs in the loop's own
process and can read its nonce, so it can forge its own end marker: that cuts
short only its own observation. It can't know the next command's nonce, so
whatever it prints after the forged marker lands before the next begin marker
and is dropped there: the next observation is never stale. If the next begin
marker doesn't come promptly, the forging command is still running: the shell
is restarted and the next command runs in the fresh one.

Crashes. A command that kills the shell (`exit`, `kill -9 $$`, `kill -9 -1`)
gets an observation saying the shell was restarted and state was lost; a
command that never started because the shell had died is run in the restarted
shell. If the whole sandbox is gone the shell reports that on every later call
instead of raising: what the workload does to its environment is the policy's
outcome, never a harness error. A command that outlives its timeout has its
process tree killed; if the shell itself is stuck (a builtin loop) it is
restarted. Output beyond `max_output` bytes is dropped (still drained) and a
note added; past `flood_bytes` the command is killed.

Not guaranteed: a command that keeps running in the loop's own process after
forging its end marker, and reads the loop's saved command channel, can take
the next command and print an observation for it. It runs with the loop's
uid in the loop's process; only a separate uid would stop that.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import select
import subprocess
import threading
import time

from mage_jax.machine.sandbox import Sandbox, descendants, kill_tree, sandbox_env

NO_OUTPUT = "[no output]"   # what a command that printed nothing shows the model

_LOOP = r'''
exec 3<&0 </dev/null 2>&1
cd "$HOME"
while IFS= builtin read -r -d '' -u 3 __mage_id && IFS= builtin read -r -d '' -u 3 __mage_cmd; do
  builtin printf '\n__MAGE_BEGIN_%s\n' "$__mage_id"
  builtin eval "$__mage_cmd" 3<&-
  builtin printf '\n__MAGE_END_%s %d\n' "$__mage_id" "$?"
done
'''
BEGIN_GRACE = 5.0   # s for the loop to print a begin marker; it does so as soon as it reads
KILL_GRACE = 1.0    # s for the loop's end marker after the command's processes were killed
SANDBOX_LOST = "the sandbox is gone: every process of the episode was killed"


@dataclasses.dataclass
class ShellResult:
  output: str
  exit_code: int | None
  timed_out: bool = False
  truncated: bool = False
  restarted: bool = False
  flooded: bool = False
  sandbox_lost: bool = False   # the sandbox died (e.g. `kill -9 -1`): no shell can run any more

  def observation(self) -> str:
    """The text the policy sees."""
    text = self.output.rstrip("\n")
    if self.truncated:
      text += "\n[output truncated]"
    if self.flooded:
      text += "\n[output flood: the command was killed]"
    if self.timed_out:
      text += "\n[command timed out and was killed]"
    if self.sandbox_lost:
      text += f"\n[{SANDBOX_LOST}]"
    elif self.restarted:
      text += "\n[the shell was restarted; its working directory and variables were reset]"
    if self.exit_code not in (0, None):
      text += f"\n[exit code {self.exit_code}]"
    return text.strip("\n") or NO_OUTPUT


@dataclasses.dataclass
class _Exchange:
  """One command's framing state: what was read, and what the loop said."""
  begin: bytes
  end: bytes
  began: bool = False
  exit_code: int | None = None
  kept: bytearray = dataclasses.field(default_factory=bytearray)
  total: int = 0
  buf: bytes = b""

  def feed(self, chunk: bytes, max_output: int) -> bool:
    """Consumes output; True once the end marker (with its exit status line) has been read."""
    self.buf += chunk
    if not self.began:
      i = self.buf.find(self.begin)
      if i < 0:  # whatever precedes our begin marker is an earlier command's tail: drop it
        self.buf = self.buf[-(len(self.begin) - 1):]
        return False
      self.began, self.buf = True, self.buf[i + len(self.begin):]
    i = self.buf.find(self.end)
    line_end = self.buf.find(b"\n", i + len(self.end)) if i >= 0 else -1
    if line_end >= 0:
      status = self.buf[i + len(self.end):line_end]
      self.exit_code = int(status) if status.lstrip(b"-").isdigit() and len(status) < 12 else -1
      self._keep(self.buf[:i], max_output)
      self.buf = b""
      return True
    hold = len(self.end) + 24  # may hold a partial end marker and its status
    self._keep(self.buf[:-hold], max_output)
    self.buf = self.buf[-hold:]
    return False

  def _keep(self, body: bytes, max_output: int) -> None:
    self.kept += body[:max(max_output - len(self.kept), 0)]
    self.total += len(body)


class PersistentShell:
  def __init__(self, sandbox: Sandbox, *, timeout: float = 30.0, max_output: int = 16_000,
               display: str | None = ":0", flood_bytes: int = 8 << 20):
    self.sandbox, self.timeout, self.max_output, self.display = sandbox, timeout, max_output, display
    self.flood_bytes = flood_bytes  # past this much output the command is killed (an output flood)
    self._proc: subprocess.Popen | None = None
    self._stop_lock = threading.Lock()
    self._start()

  def _start(self) -> bool:
    """Starts the loop; False if the sandbox is gone."""
    if not self.sandbox.alive():
      return False
    try:
      self.sandbox.restore_home()  # after `chmod 000 ~` no later shell could start in it
      self._proc = self.sandbox.spawn(["/bin/bash", "--noprofile", "--norc", "-c", _LOOP],
                                      env=sandbox_env(self.display), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)
    except (RuntimeError, OSError):  # closed between the check and the spawn
      return False
    os.set_blocking(self._proc.stdin.fileno(), False)
    return True

  def _stop(self) -> None:
    # Idempotent and safe from two threads at once (a pool closing the env while its episode's
    # thread restarts the shell): whoever takes the process stops it.
    with self._stop_lock:
      proc, self._proc = self._proc, None
    if proc is not None:
      kill_tree(proc.pid)
      proc.wait()
      for s in (proc.stdin, proc.stdout):
        s.close()

  def _restart(self) -> bool:
    self._stop()
    return self._start()

  def close(self) -> None:
    self._stop()

  def run(self, command: str, timeout: float | None = None) -> ShellResult:
    timeout = self.timeout if timeout is None else timeout
    if "\0" in command:
      return ShellResult("error: the command contains a NUL byte", None)
    try:
      payload = command.encode()
    except UnicodeEncodeError as e:
      return ShellResult(f"error: the command is not valid Unicode (lone surrogate at char {e.start})", None)
    restarted = False
    if self._proc is None or self._proc.poll() is not None:
      restarted = True
      if not self._restart():
        return ShellResult("", None, restarted=True, sandbox_lost=True)
    for attempt in range(2):
      nonce = secrets.token_hex(16).encode()
      ex = _Exchange(b"\n__MAGE_BEGIN_" + nonce + b"\n", b"\n__MAGE_END_" + nonce + b" ")
      outcome = self._exchange(ex, nonce + b"\0" + payload + b"\0", timeout)
      if outcome in ("done", "timeout", "flood") or ex.began:  # a command that began is never rerun
        break
      # The loop never began this command: it died before reading it ("eof"), or an earlier
      # command that forged its end marker is still running ("busy"). Either way it hasn't run.
      restarted = True
      if attempt or not self._restart():
        break
    timed_out, flooded = outcome == "timeout", outcome == "flood"
    if timed_out or flooded:
      restarted |= self._kill_command(ex)
    elif outcome != "done":  # EOF mid-command (the command took the shell down), or still busy
      self._restart()
      restarted = True
    lost = not self.sandbox.alive()
    return ShellResult(ex.kept.decode(errors="replace"), ex.exit_code, timed_out, ex.total > self.max_output,
                       restarted or lost, flooded, lost)

  def _exchange(self, ex: _Exchange, record: bytes, timeout: float) -> str:
    """Sends `record` and reads until its end marker: 'done' | 'timeout' | 'flood' | 'eof' | 'busy'."""
    start = time.monotonic()
    deadline = start + timeout
    out_fd, in_fd = self._proc.stdout.fileno(), self._proc.stdin.fileno()
    pending = record
    while True:
      now = time.monotonic()
      if not ex.began and now - start > min(BEGIN_GRACE, timeout):
        return "busy"
      if now >= deadline:
        return "timeout"
      if ex.total > self.flood_bytes:
        return "flood"
      ready, writable, _ = select.select([out_fd], [in_fd] if pending else [], [], min(deadline - now, 0.5))
      if writable:
        try:
          pending = pending[os.write(in_fd, pending):]
        except BrokenPipeError:
          return "eof"
        except BlockingIOError:
          pass
      if ready:
        chunk = os.read(out_fd, 1 << 16)
        if not chunk:
          return "eof"
        if ex.feed(chunk, self.max_output):
          return "done"

  def _kill_command(self, ex: _Exchange) -> bool:
    """Kills what the command started; True if the shell itself had to be restarted."""
    bash_pid = _shell_pid(self._proc.pid)
    if bash_pid is not None:
      kill_tree(bash_pid, include_self=False)
      if ex.began and self._wait_for_end(ex):
        return False
    self._restart()
    return True

  def _wait_for_end(self, ex: _Exchange) -> bool:
    """After a kill, waits briefly for the loop's end marker (the shell survived)."""
    deadline, fd = time.monotonic() + KILL_GRACE, self._proc.stdout.fileno()
    sink = _Exchange(ex.begin, ex.end, began=True)  # output after the kill is not shown
    while time.monotonic() < deadline:
      ready, _, _ = select.select([fd], [], [], 0.1)
      if ready:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
          return False
        if sink.feed(chunk, 0):
          return True
    return False


def _shell_pid(nsenter_pid: int) -> int | None:
  """The bash process under nsenter/setpriv/env/sh wrappers (they exec, except nsenter)."""
  for pid in descendants(nsenter_pid):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        if f.read().startswith(b"/bin/bash\0--noprofile"):
          return pid
    except OSError:
      pass
  return None
