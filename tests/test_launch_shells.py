"""launch/*.py are thin absl shells: the library they call defines no flags (so
any number of library modules import into one process, e.g. pytest), and each
shell still parses its own flags."""
import os
import subprocess
import sys

import pytest
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_library_modules_define_no_flags():
  import importlib
  for name in ("mage_jax.data.pack_job", "mage_jax.runs.sweep", "mage_jax.runs.curriculum",
               "mage_jax.train.plots", "mage_jax.train.loop", "mage_jax.train.evaluation",
               "mage_jax.forge.skillcheck", "mage_jax.forge.engine", "mage_jax.harness.collect",
               "mage_jax.evolve.loop", "mage_jax.runs.proof_steps"):
    importlib.import_module(name)
  ours = [m for m in flags.FLAGS.flags_by_module_dict()
          if m.split(".")[0] in ("mage_jax", "configs") or "mage_jax" in m.split("/")]
  assert ours == [], f"library modules define absl flags: {ours}"


@pytest.mark.parametrize("shell,flag", [("train", "--workdir"), ("curriculum", "--workdir"),
                                        ("sweep", "--mode"), ("pack", "--workers"),
                                        ("plot", "--workdir"), ("rl", "--server_url"),
                                        ("serve", "--config")])
def test_shell_parses_its_flags(shell, flag):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  p = subprocess.run([sys.executable, "-m", f"launch.{shell}", "--helpfull"], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]  # absl help exits 1
  assert f"  {flag}:" in p.stdout


def test_sweep_shell_prints_every_point(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT)
  p = subprocess.run([sys.executable, "-m", "launch.sweep", "--config=configs/stage2_gui_sft.py:tiny",
                      f"--workdir={tmp_path}"], cwd=ROOT, env=env, capture_output=True, text=True,
                     timeout=120)
  assert p.returncode == 0, p.stderr[-2000:]
  lines = [l for l in p.stdout.splitlines() if "launch.train" in l]
  assert len(lines) == 6 and all("--config.optimizer.learning_rate=" in l for l in lines)
