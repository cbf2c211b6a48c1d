"""The persistent shell's framing and crash handling against a hostile workload.

Each test runs the attack through `PersistentShell.run`, exactly as an episode
does, and checks its effect: a stale observation, a command silently not run,
an exception out of the harness.
"""
import time

import pytest

from mage_jax.machine import sandbox as sb
from mage_jax.machine.terminal import PersistentShell
from tests._agent_helpers import needs_sandbox

# The end marker as the old loop ($__MAGE_MARK) and the new one ($__mage_id) print it.
FORGE_END = 'printf "\\n%s 0\\n" "$__MAGE_MARK"; printf "\\n__MAGE_END_%s 0\\n" "$__mage_id"; '


@pytest.fixture
def shell():
  box = sb.Sandbox(sb.SandboxConfig(home_mb=64, tmp_mb=32, nproc=64, memory_mb=1024))
  sh = PersistentShell(box, timeout=10, max_output=10_000, display=None)
  try:
    yield sh
  finally:
    sh.close()
    box.close()


@needs_sandbox
@pytest.mark.timeout(120)
def test_forged_end_marker_never_makes_the_next_observation_stale(shell):
  """Old loop: the marker was $__MAGE_MARK in the environment; echoing it desynced the shell and
  the next observation was the previous command's tail ('echo second' -> 'STALE')."""
  assert shell.run("cd /tmp; X=kept").exit_code == 0
  forged = shell.run(FORGE_END + "sleep 1; echo STALE")
  assert forged.exit_code == 0 and "STALE" not in forged.output   # only its own observation is cut
  nxt = shell.run("echo second $X $PWD")
  assert nxt.output.strip() == "second kept /tmp" and not nxt.restarted
  # a forger that keeps running: the next command runs in a restarted shell, never sees its output
  shell.run(FORGE_END + "sleep 30; echo STALE")
  t0 = time.monotonic()
  nxt = shell.run("echo third")
  assert nxt.output.strip() == "third" and nxt.restarted and time.monotonic() - t0 < 15
  # guessing at the framing from the environment finds nothing to forge
  env = shell.run("env; set | grep -i mage_ || true").output
  assert "__MAGE_MARK" not in env


@needs_sandbox
@pytest.mark.timeout(120)
def test_closing_the_command_channel_does_not_drop_the_next_command(shell):
  """Old loop: after `exec 3<&-` the next command was silently not run (observation: only
  '[the shell was restarted ...]', no output)."""
  assert shell.run("X=1; exec 3<&-; echo closed").output.strip() == "closed"
  r = shell.run("echo after $X")
  assert r.output.strip() == "after 1" and not r.restarted


@needs_sandbox
@pytest.mark.timeout(120)
def test_a_shell_killed_between_commands_runs_the_next_command(shell):
  shell.run("(sleep 0.3; kill -9 $$) >/dev/null 2>&1 &")
  time.sleep(1.0)
  r = shell.run("echo still-runs")
  assert r.output.strip() == "still-runs" and r.restarted
  r = shell.run("exit 3")
  assert r.restarted and "[the shell was restarted" in r.observation()
  assert shell.run("echo back").output.strip() == "back"


@needs_sandbox
@pytest.mark.timeout(120)
def test_kill_everything_and_a_dead_sandbox_never_raise(shell):
  """Old loop: `kill -9 -1` took the sandbox down and the next run raised RuntimeError('sandbox is
  closed'); the episode ended as env_error."""
  shell.run("kill -9 -1")
  r = shell.run("echo after-kill")
  assert r.sandbox_lost or r.output.strip() == "after-kill"
  sb.kill_tree(shell.sandbox._bwrap.pid)   # whatever the workload managed, the sandbox is gone now
  # The kernel tears the pid namespace down after its init dies, not at once: a command sent in
  # that window still runs (1 run in ~10 saw 'anything' come back). Wait for the teardown.
  shell.sandbox._bwrap.wait(timeout=10)
  if shell._proc is not None:
    shell._proc.wait(timeout=10)
  for _ in range(2):
    r = shell.run("echo anything")
    assert r.sandbox_lost and "the sandbox is gone" in r.observation()


@needs_sandbox
@pytest.mark.timeout(60)
def test_lone_surrogate_is_an_error_result(shell):
  """Old loop: UnicodeEncodeError out of PersistentShell.run."""
  r = shell.run("echo \ud800")
  assert r.exit_code is None and "lone surrogate at char 5" in r.output
  assert shell.run("echo ok").output.strip() == "ok"
