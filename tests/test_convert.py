"""launch.convert (subprocess, both directions, progress bar) and Orbax <-> HF exactness."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from mage_jax.weights import orbax_io
from test_weights import TINY_QWEN, TINY_MAGE_VL, _tensor_bytes, write_random_hf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _convert(*args):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["JAX_PLATFORMS"] = "cpu"
  return subprocess.run([sys.executable, "-m", "launch.convert", *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=180)


def test_cli_round_trip_with_progress_bar(tmp_path):
  write_random_hf(tmp_path / "hf", TINY_QWEN, ml_dtypes.bfloat16)
  out = _convert(f"--src={tmp_path}/hf", f"--dst={tmp_path}/orbax")  # direction inferred
  assert out.returncode == 0, out.stderr[-3000:]
  assert "hf_to_orbax Qwen3ForCausalLM" in out.stdout
  n = 2 * 11 + 3  # tensors: 11 per layer, embed, norm, lm_head
  assert f"load: 100%" in out.stderr and f"{n}/{n}" in out.stderr  # the tqdm bar
  assert os.path.isdir(tmp_path / "orbax" / orbax_io.PARAMS_DIR)
  out = _convert("--direction=orbax_to_hf", f"--src={tmp_path}/orbax", f"--dst={tmp_path}/back")
  assert out.returncode == 0, out.stderr[-3000:]
  assert f"save: 100%" in out.stderr
  assert _tensor_bytes(tmp_path / "hf") == _tensor_bytes(tmp_path / "back")  # bf16 default


def test_cli_bad_source_is_one_clear_line(tmp_path):
  (tmp_path / "empty").mkdir()
  out = _convert(f"--src={tmp_path}/empty", f"--dst={tmp_path}/x")
  assert out.returncode == 2
  assert "neither an HF directory" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("cfg", [TINY_QWEN, TINY_MAGE_VL], ids=["qwen3", "mage_vl"])
def test_orbax_hf_exact(tmp_path, cfg):
  write_random_hf(tmp_path / "hf", cfg, np.float32)
  orbax_io.hf_to_orbax(str(tmp_path / "hf"), str(tmp_path / "ob"))
  _, (_, state) = orbax_io.load_orbax(str(tmp_path / "ob"), return_state=True)
  from mage_jax.weights import hf
  _, (_, direct) = hf.load_hf(str(tmp_path / "hf"), return_state=True)
  a, b = hf.flat_params(state), hf.flat_params(direct)
  assert set(a) == set(b)
  for p in a:
    assert np.asarray(a[p][1]).tobytes() == np.asarray(b[p][1]).tobytes(), p
  orbax_io.orbax_to_hf(str(tmp_path / "ob"), str(tmp_path / "back"), dtype="float32")
  assert _tensor_bytes(tmp_path / "hf") == _tensor_bytes(tmp_path / "back")


@pytest.mark.parametrize("damage", ["truncate", "garbage_metadata"])
def test_damaged_orbax_data_is_one_clear_line(tmp_path, damage):
  """A truncated array file or unreadable Orbax metadata: ValueError in one line (what
  launch.convert prints, exit 2), not TensorStore's multi-line spec in a traceback."""
  import glob
  write_random_hf(tmp_path / "hf", TINY_QWEN, ml_dtypes.bfloat16)
  orbax_io.hf_to_orbax(str(tmp_path / "hf"), str(tmp_path / "orbax"))
  params = tmp_path / "orbax" / orbax_io.PARAMS_DIR
  if damage == "truncate":   # every file of array data (the top-level and per-process stores)
    for victim in glob.glob(str(params / "**" / "d" / "*"), recursive=True):
      data = open(victim, "rb").read()
      open(victim, "wb").write(data[:len(data) // 2])
  else:
    open(params / "_METADATA", "wb").write(b"\x00garbage")
  with pytest.raises(ValueError) as e:
    orbax_io.orbax_to_hf(str(tmp_path / "orbax"), str(tmp_path / "back"))
  msg = str(e.value)
  assert "\n" not in msg and len(msg) < 400 and "unreadable Orbax" in msg, msg
