"""The sandbox suite again, run by an unprivileged user (uid 65534) instead of root.

Root mode (CI, containers) and user mode build the namespaces differently (see
mage_jax/machine/sandbox.py), so user mode gets its own run: pytest is started as
uid 65534 via `setpriv` on tests/test_agent_sandbox.py and tests/test_desktop_services.py. The venv's interpreter
may live where that user can't read it (e.g. under /root), so the run uses the
system interpreter of the same version with the venv's site-packages on
PYTHONPATH; inside the sandbox that interpreter has no venv, hence the
office-libraries test is left out of this run (it runs in root mode), and so is the slot-pool
memory test (it imports JAX; it has no mode-specific part).
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"


def _reason() -> str | None:
  if os.geteuid() != 0:
    return "needs root to drop to uid 65534 (the suite itself already runs in user mode here)"
  if shutil.which("setpriv") is None or shutil.which("bwrap") is None:
    return "setpriv/bwrap missing"
  if not os.access(SYSTEM_PYTHON, os.X_OK):
    return f"no {SYSTEM_PYTHON} for the unprivileged run"
  probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          "unshare", "--user", "true"], capture_output=True)
  if probe.returncode != 0:
    return "unprivileged user namespaces are not allowed on this kernel"
  return None


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(_reason() is not None, reason=str(_reason()))
def test_sandbox_suite_as_unprivileged_user():
  # pytest's own tmp_path sits under /tmp/pytest-of-root (mode 0700): unusable for uid 65534.
  scratch = tempfile.mkdtemp(prefix="mage_usermode_", dir="/tmp")
  try:
    _run_suite_as_nobody(scratch)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def _run_suite_as_nobody(scratch: str) -> None:
  os.chmod(scratch, 0o777)
  home = os.path.join(scratch, "home")
  os.mkdir(home)
  os.chmod(home, 0o777)
  site = sysconfig.get_paths()["purelib"]
  env = {"PATH": "/usr/sbin:/usr/bin:/bin", "HOME": home, "PYTHONPATH": f"{ROOT}:{site}",
         "JAX_PLATFORMS": "cpu", "LANG": "C.UTF-8"}
  r = subprocess.run(
      ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-m", "pytest",
       "-q", "-p", "no:cacheprovider", f"--basetemp={scratch}/pt",
       "tests/test_agent_sandbox.py", "tests/test_desktop_services.py",
       "-k", "not office_libs and not slot_pools"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=580)
  out = r.stdout + r.stderr
  assert r.returncode == 0, out[-4000:]
  passed = int(re.search(r"(\d+) passed", out).group(1))
  assert passed >= 8 and "skipped" not in out, out[-2000:]  # all ran, none skipped in user mode
