"""Checkpoints: SIGKILL + resume reproduces the uninterrupted run exactly; fallback
to the previous checkpoint when the latest is unreadable; clear mismatch errors."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mage_jax.train import checkpoint as ckpt_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 128


def write_bins(directory: str, n: int = 24, seed: int = 0) -> None:
  from mage_jax.data import packing, records
  rng = np.random.default_rng(seed)
  bins = []
  for i in range(n):
    segs = []
    for j, length in enumerate((rng.integers(30, 60), rng.integers(30, 60))):
      toks = rng.integers(0, 2000, length).astype(np.int32)
      mask = np.zeros(length, bool)
      mask[length // 2:] = True
      segs.append(packing.Segment(tokens=toks, loss_mask=mask,
                                  patches=np.zeros((0, 768), np.uint8),
                                  patch_positions=np.zeros((0, 3), np.int32), image_patches=[],
                                  source_id=0, meta={"episode_id": f"b{i}-{j}"}))
    bins.append(packing.PackedBin(segs))
  records.write_bins(bins, os.path.join(directory, "gui"), SEQ, 4, 8)


def train_args(workdir: str, packed: str, steps: int = 8) -> list[str]:
  return [sys.executable, "-m", "launch.train", "--config=configs/stage2_gui_sft.py:tiny",
          f"--workdir={workdir}", "--config.synth.enabled=False", f"--config.data.packed_dir={packed}",
          f"--config.data.seq_len={SEQ}", "--config.data.patch_budget=4",
          "--config.model.arch=qwen3", f"--config.train.total_steps={steps}",
          "--config.checkpoint.every_steps=2", "--config.log.batch_fingerprints=True",
          "--config.log.every_steps=1", "--config.log.tensorboard=False",
          "--config.log.peak_tflops_per_device=1.0", "--config.eval.click_jsonl=",
          "--config.data.batch_size=2", "--config.step.loss_chunk_size=32"]


def per_step(workdir: str) -> dict[int, dict]:
  out = {}
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    for line in f:
      r = json.loads(line)
      if "bins" in r:
        out[r["step"]] = r  # the latest occurrence wins (a resumed run re-logs lost steps)
  return out


def _env():
  return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT, XLA_FLAGS="")


@pytest.mark.slow
def test_sigkill_resume_matches_uninterrupted_run(tmp_path):
  packed = str(tmp_path / "packed")
  write_bins(packed)
  ref_dir, run_dir = str(tmp_path / "ref"), str(tmp_path / "run")
  subprocess.run(train_args(ref_dir, packed), cwd=ROOT, env=_env(), check=True,
                 capture_output=True, timeout=300)
  ref = per_step(ref_dir)
  assert sorted(ref) == list(range(1, 9))

  kill_at = random.Random().randint(3, 6)
  proc = subprocess.Popen(train_args(run_dir, packed), cwd=ROOT, env=_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while time.time() < deadline:
    if os.path.exists(os.path.join(run_dir, "metrics.jsonl")) and \
        max(per_step(run_dir), default=0) >= kill_at:
      break
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  killed_after = max(per_step(run_dir))
  assert killed_after < 8, "the run finished before it could be killed"

  out = subprocess.run(train_args(run_dir, packed), cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "resumed from" in out.stdout
  got = per_step(run_dir)
  assert sorted(got) == list(range(1, 9))
  for s in range(1, 9):
    assert got[s]["loss"] == ref[s]["loss"], (s, kill_at, got[s]["loss"], ref[s]["loss"])
    assert got[s]["bins"] == ref[s]["bins"], f"step {s}: different bins after resume"
  # Every bin of the uninterrupted order was trained exactly once in the same place.
  assert [b for s in range(1, 9) for b in got[s]["bins"]] == [b for s in range(1, 9) for b in ref[s]["bins"]]


def _state(scale: float, shape=(4, 3)):
  return {"params": {"w": jnp.full(shape, scale), "b": jnp.zeros(shape[-1])},
          "step": jnp.asarray(int(scale), jnp.int32)}


def _meta(state):
  return {"model": {"hidden_size": state["params"]["w"].shape[-1]},
          "param_shapes": {"w": [list(state["params"]["w"].shape), "float32"]}}


def test_fallback_when_latest_is_unreadable(tmp_path, capsys):
  ck = ckpt_lib.Checkpointer(str(tmp_path), keep=3, async_save=False)
  for step in (1, 2, 3):
    ck.save(step, _state(step), {"pos": step}, _meta(_state(step)))
  ck.wait()
  # Corrupt the newest checkpoint's array data.
  state_dir = os.path.join(ck.directory, "3", "state")
  for root, _, files in os.walk(state_dir):
    for f in files:
      if not f.endswith(".json") and "manifest" not in f:
        with open(os.path.join(root, f), "wb") as fh:
          fh.write(b"garbage")
  shutil.rmtree(os.path.join(state_dir, "d"), ignore_errors=True)
  abstract = jax.eval_shape(lambda: _state(0.0))
  restored = ckpt_lib.Checkpointer(str(tmp_path), keep=3, async_save=False).restore(
      abstract, _meta(_state(1)))
  assert restored is not None
  state, data_state, step = restored
  assert step == 2 and data_state == {"pos": 2}
  np.testing.assert_array_equal(state["params"]["w"], np.full((4, 3), 2.0))
  assert "falling back" in capsys.readouterr().out


def test_mismatched_model_is_a_clear_error(tmp_path):
  ck = ckpt_lib.Checkpointer(str(tmp_path), keep=2, async_save=False)
  ck.save(1, _state(1), None, _meta(_state(1)))
  ck.wait()
  other = _state(1, shape=(4, 5))
  with pytest.raises(ckpt_lib.CheckpointMismatch) as e:
    ck.restore(jax.eval_shape(lambda: other), _meta(other))
  msg = str(e.value)
  assert "model.hidden_size: checkpoint 3 vs config 5" in msg
  assert "param w: checkpoint shape [4, 3] vs model shape [4, 5]" in msg
