"""jax.distributed initialisation from explicit flags or SLURM variables.

Explicit: coordinator "host:port", num_processes, process_id. SLURM (one
process per node): SLURM_NTASKS, SLURM_PROCID, and the coordinator is the first
host of SLURM_JOB_NODELIST (or MAGE_COORDINATOR) on port MAGE_COORDINATOR_PORT
(default 12355). On CPU the gloo collectives implementation is selected so
multi-process CPU runs (tests on loopback) work.
"""
from __future__ import annotations

import os
import re
import subprocess


def _first_slurm_host(nodelist: str) -> str:
  try:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                         text=True, timeout=30)
    if out.returncode == 0 and out.stdout.strip():
      return out.stdout.split()[0]
  except (OSError, subprocess.SubprocessError):
    pass
  # Fallback parse of "node[01-04,07]" / "a,b".
  m = re.match(r"([^\[,]+)(?:\[([^\]]+)\])?", nodelist)
  if not m:
    raise ValueError(f"cannot parse SLURM_JOB_NODELIST={nodelist!r}")
  prefix, ranges = m.group(1), m.group(2)
  if not ranges:
    return prefix
  first = ranges.split(",")[0].split("-")[0]
  return prefix + first


def settings(coordinator: str | None = None, num_processes: int | None = None,
             process_id: int | None = None, env: dict | None = None) -> dict | None:
  """The jax.distributed.initialize kwargs, or None for a single-process run."""
  env = os.environ if env is None else env
  if coordinator or num_processes:
    if not (coordinator and num_processes is not None and process_id is not None):
      raise ValueError("multi-host needs all of --coordinator, --num_processes and --process_id")
    return dict(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
  ntasks = int(env.get("SLURM_NTASKS", "1") or 1)
  if ntasks > 1 and "SLURM_PROCID" in env:
    host = env.get("MAGE_COORDINATOR") or _first_slurm_host(env["SLURM_JOB_NODELIST"])
    port = env.get("MAGE_COORDINATOR_PORT", "12355")
    return dict(coordinator_address=f"{host}:{port}", num_processes=ntasks,
                process_id=int(env["SLURM_PROCID"]))
  return None


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, cpu_devices: int | None = None) -> bool:
  """Initialise jax.distributed when the run spans processes; True if it did."""
  if cpu_devices:
    flags = os.environ.get("XLA_FLAGS", "")
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", flags)
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={cpu_devices}".strip()
  import jax   # after XLA_FLAGS is set above: JAX reads it when it starts
  kw = settings(coordinator, num_processes, process_id)
  if kw is None:
    return False
  if os.environ.get("JAX_PLATFORMS", "") == "cpu" or cpu_devices:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(**kw)
  return True
