"""Shared helpers for the agent tests (skip markers, env factories, the one built-in suite run)."""
import atexit
import functools
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mage_jax.machine import sandbox as sb
from mage_jax.agent.env import Env, EnvConfig, LocalEnv, Observation
from mage_jax.bench.fleet_sim import WaitEnv

try:
  sb.check_available()
  SANDBOX_REASON = None
except sb.SandboxUnavailable as e:
  SANDBOX_REASON = str(e)

needs_sandbox = pytest.mark.skipif(SANDBOX_REASON is not None, reason=f"sandbox unavailable: {SANDBOX_REASON}")
# Ray test clusters: a node counts as dead after 8 missed 1 s health checks. Faster detection
# (0.5 s x 3) made CI's loaded 2 cores declare a live, freshly added env node dead mid-test.
RAY_TEST_HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                         "health_check_failure_threshold": 8}
SMALL = EnvConfig(width=800, height=600, command_timeout=30)
class SleepingEnv(WaitEnv):
  """No sandbox: each step sleeps `step_s` (a node can be killed mid-episode), the scripted
  policy's terminate ends the episode, and every episode scores 1 (fleet_sim's WaitEnv, slowed)."""

  def __init__(self, step_s=0.4):
    self.step_s = step_s

  def step(self, name, arguments):
    time.sleep(self.step_s)
    return super().step(name, arguments)


class StubEnv(Env):
  """An env with no machine behind it: tests override the one call they make fail or record."""

  def reset(self, task):
    return Observation(text=None)

  def step(self, name, arguments):
    return Observation(text="")

  def screenshot(self):
    return None

  def score(self):
    return 0.0

  def close(self):
    pass


SUITE_WORKERS = 6  # environments at once: they mostly wait on X, apps and pipes, so > 2 cores pays


def local_env() -> LocalEnv:
  return LocalEnv(SMALL)


@functools.lru_cache(maxsize=None)
def builtin_suite_run():
  """Gates every built-in task once per test session; the reference solution runs through the
  full episode loop with the scripted policy, so the same run also evaluates that policy.

  Returns (gate results, episode results by task id, episode output dir). Shared by
  test_agent_tasks (gates) and test_agent_episode (scripted eval): the slow part runs once.
  """
  from mage_jax.agent.episode import EpisodeConfig, run_episode
  from mage_jax.agent.policies import ScriptedPolicy
  from mage_jax.forge import package_gates as gates
  from mage_jax.tasks.builtin import builtin_packages
  out_dir = tempfile.mkdtemp(prefix="mage_suite_")
  atexit.register(shutil.rmtree, out_dir, ignore_errors=True)
  cfg = EpisodeConfig(out_dir=out_dir)
  episodes = {}

  def reference_episode(env, pkg, first_obs):
    episodes[pkg.id] = run_episode(env, pkg, ScriptedPolicy(), cfg, f"{pkg.id}-r0", first_observation=first_obs)

  pkgs = builtin_packages()
  with ThreadPoolExecutor(SUITE_WORKERS) as ex:
    results = list(ex.map(lambda p: gates.check_package(p, local_env, reference_episode), pkgs))
  return results, [episodes.get(p.id) for p in pkgs], out_dir
