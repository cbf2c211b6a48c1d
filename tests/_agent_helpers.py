"""Shared helpers for the agent tests (skip markers, env factories)."""
import pytest

from mage_jax.agent import sandbox as sb
from mage_jax.agent.env import EnvConfig, LocalEnv

try:
  sb.check_available()
  SANDBOX_REASON = None
except sb.SandboxUnavailable as e:
  SANDBOX_REASON = str(e)

needs_sandbox = pytest.mark.skipif(SANDBOX_REASON is not None, reason=f"sandbox unavailable: {SANDBOX_REASON}")
SMALL = EnvConfig(width=800, height=600, command_timeout=30)


def local_env() -> LocalEnv:
  return LocalEnv(SMALL)
