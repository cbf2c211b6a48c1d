"""A variant's terminal environment E: its library and CLI trees bound read-only into the sandbox.

`libraries` {name: host site-packages tree} are bound at /opt/harness_lib_<name> and put on
PYTHONPATH; `cli_tools` {name: host directory of executables} at /opt/harness_bin_<name>, put
first on PATH. (Direct children of /opt: a deeper mount point's parents would be made 0700 by
bwrap, unreadable to the sandbox user.) A tree must be world-readable (o+rx): the sandbox user
is not its owner. The shell runs with --norc, so the exports are sent once per shell process
(again after the shell restarts, e.g. when a command killed it). The interpreter's own
site-packages stay as sandbox.py binds them: a variant adds to the terminal, it never removes.
"""
from __future__ import annotations

import dataclasses
import os
import shlex

from mage_jax.agent.env import EnvConfig, LocalEnv
from mage_jax.machine.sandbox import sandbox_env
from mage_jax.harness.variant import HarnessVariant, VariantError

LIB_ROOT, BIN_ROOT = "/opt/harness_lib_", "/opt/harness_bin_"


def binds(variant: HarnessVariant) -> tuple[tuple[str, str], ...]:
  out = []
  for field, root in (("libraries", LIB_ROOT), ("cli_tools", BIN_ROOT)):
    for name, host in getattr(variant, field):
      if not os.path.isdir(host):
        raise VariantError(f"harness.{field}.{name}: host directory {host!r} does not exist")
      if not name.replace("-", "_").replace(".", "_").isidentifier():
        raise VariantError(f"harness.{field}: name {name!r} must be a plain word (it names a mount point)")
      if os.stat(host).st_mode & 0o005 != 0o005:
        raise VariantError(f"harness.{field}.{name}: {host!r} is not world-readable (chmod o+rx); "
                           "the sandbox user could not read it")
      out.append((os.path.realpath(host), f"{root}{name}"))
  return tuple(out)


def shell_setup(variant: HarnessVariant) -> str | None:
  """The exports that put the variant's trees on the search paths (None without any)."""
  libs = [f"{LIB_ROOT}{n}" for n, _ in variant.libraries]
  bins = [f"{BIN_ROOT}{n}" for n, _ in variant.cli_tools]
  if not libs and not bins:
    return None
  parts = []
  if libs:
    parts.append("export PYTHONPATH=" + shlex.quote(":".join(libs)))
  if bins:
    parts.append("export PATH=" + shlex.quote(":".join(bins) + ":" + sandbox_env()["PATH"]))
  return "; ".join(parts)


def env_config(variant: HarnessVariant, base: EnvConfig) -> EnvConfig:
  """`base` with the variant's terminal output cap and read-only binds."""
  sb = dataclasses.replace(base.sandbox, ro_binds=base.sandbox.ro_binds + binds(variant))
  return dataclasses.replace(base, max_output=variant.max_output, sandbox=sb)


class _SetupShell:
  """Runs `setup` before the first command of every shell process, then the command."""

  def __init__(self, shell, setup: str):
    self.shell, self.setup, self._proc = shell, setup, None

  def run(self, command: str, timeout: float | None = None):
    proc = self.shell._proc  # the loop process: a new one means the exports are gone
    if proc is None or proc is not self._proc or proc.poll() is not None:
      self.shell.run(self.setup)
      self._proc = self.shell._proc
    return self.shell.run(command, timeout)

  def __getattr__(self, name):
    return getattr(self.shell, name)


class HarnessEnv(LocalEnv):
  """LocalEnv whose shell sees the variant's library and CLI trees."""

  def __init__(self, variant: HarnessVariant, config: EnvConfig | None = None):
    super().__init__(env_config(variant, config or EnvConfig()))
    self.setup = shell_setup(variant)

  def reset(self, task):
    obs = super().reset(task)
    if self.setup:
      self.shell = _SetupShell(self.shell, self.setup)
    return obs


def env_factory(variant: HarnessVariant | None, base: EnvConfig):
  """The slot pool's factory: a plain LocalEnv unless the variant adds trees to the terminal."""
  if variant is None:
    return lambda: LocalEnv(base)
  if shell_setup(variant) is None:
    cfg = env_config(variant, base)
    return lambda: LocalEnv(cfg)
  binds(variant)  # fail now, naming the field, rather than in every slot
  return lambda: HarnessEnv(variant, base)
