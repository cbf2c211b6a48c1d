"""Checkpoints: SIGTERM (clean save and exit 0) and SIGKILL + resume reproduce the
uninterrupted run exactly; fallback to the previous checkpoint, with one warning line,
when the latest is unreadable, truncated or silently changed on disk (array checksums);
clear mismatch errors; log.profile_steps writes a trace."""
import glob
import json
import os
import random
import re
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
from tests._train_helpers import ROOT, subprocess_env, write_bins

SEQ = 128
STEPS = 30  # many cheap steps, so the signals land well before the end
VOCAB = 2048  # the bins use ids < 2000 and no pad token, so a small head is enough


def train_args(workdir: str, packed: str, *extra: str) -> list[str]:
  return [sys.executable, "-m", "launch.train", "--config=configs/stage2_gui_sft.py:tiny",
          f"--workdir={workdir}", "--config.synth.enabled=False", f"--config.data.packed_dir={packed}",
          f"--config.data.seq_len={SEQ}", "--config.data.patch_budget=4",
          "--config.model.arch=qwen3", f"--config.model.text.vocab_size={VOCAB}",
          f"--config.train.total_steps={STEPS}",
          "--config.checkpoint.every_steps=2", "--config.log.batch_fingerprints=True",
          "--config.log.every_steps=1", "--config.log.tensorboard=False",
          "--config.log.peak_tflops_per_device=1.0", "--config.eval.click_jsonl=",
          "--config.data.batch_size=2", "--config.step.loss_chunk_size=32", *extra]


def per_step(workdir: str) -> dict[int, dict]:
  out = {}
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return out
  with open(path) as f:
    for line in f:
      r = json.loads(line)
      if "bins" in r:
        out[r["step"]] = r  # the latest occurrence wins (a resumed run re-logs lost steps)
  return out


def _start_and_signal(args, env, workdir: str, at_step: int, sig: int, log_path: str):
  """Start a run, send `sig` once it has logged `at_step`; returns (returncode, stdout)."""
  with open(log_path, "w") as log:
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
      if max(per_step(workdir), default=0) >= at_step:
        break
      time.sleep(0.05)
    proc.send_signal(sig)
    rc = proc.wait(timeout=300)
  with open(log_path) as f:
    return rc, f.read()


@pytest.mark.slow
def test_sigterm_and_sigkill_resume_match_uninterrupted_run(tmp_path):
  """Uninterrupted reference (with a 1-step profiler trace) vs. a run stopped by
  SIGTERM at a random step (clean exit, checkpoint at that step), resumed, killed
  by SIGKILL at a later random step, and resumed to the end: per-step losses
  and bins are identical, no bin repeated or skipped. The four runs share a
  persistent compilation cache, so only the first compiles the step."""
  packed = str(tmp_path / "packed")
  write_bins(os.path.join(packed, "gui"), n=32, seq_len=SEQ)
  env = subprocess_env(str(tmp_path / "jax_cache"))
  ref_dir, run_dir = str(tmp_path / "ref"), str(tmp_path / "run")
  out = subprocess.run(train_args(ref_dir, packed, "--config.log.profile_steps=1:2"), cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  ref = per_step(ref_dir)
  assert sorted(ref) == list(range(1, STEPS + 1))
  traces = glob.glob(os.path.join(ref_dir, "profile", "**", "*.xplane.pb"), recursive=True)
  assert traces and os.path.getsize(traces[0]) > 0, "log.profile_steps wrote no trace"

  # SIGTERM: save at the current step and exit 0.
  rng = random.Random()
  term_at = rng.randint(2, 4)
  rc, log = _start_and_signal(train_args(run_dir, packed), env, run_dir, term_at, signal.SIGTERM,
                              str(tmp_path / "term.log"))
  assert rc == 0, log[-3000:]
  match = re.search(r"stopped at step (\d+) on SIGTERM; checkpoint saved", log)
  assert match, log[-3000:]
  stopped = int(match.group(1))
  assert term_at <= stopped < STEPS
  saved = [int(d) for d in os.listdir(os.path.join(run_dir, "checkpoints")) if d.isdigit()]
  assert max(saved) == stopped
  assert max(per_step(run_dir)) == stopped  # every finished step was logged before exiting

  # Resume from the SIGTERM checkpoint, then SIGKILL at a later random step.
  kill_at = rng.randint(stopped + 2, stopped + 4)
  rc, log = _start_and_signal(train_args(run_dir, packed), env, run_dir, kill_at, signal.SIGKILL,
                              str(tmp_path / "kill.log"))
  assert f"resumed from {os.path.abspath(run_dir)}/checkpoints/{stopped}" in log, log[-3000:]
  assert rc == -signal.SIGKILL
  assert max(per_step(run_dir)) < STEPS, "the run finished before it could be killed"

  out = subprocess.run(train_args(run_dir, packed), cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "resumed from" in out.stdout
  got = per_step(run_dir)
  assert sorted(got) == list(range(1, STEPS + 1))
  for s in range(1, STEPS + 1):
    assert got[s]["loss"] == ref[s]["loss"], (s, stopped, kill_at, got[s]["loss"], ref[s]["loss"])
    assert got[s]["bins"] == ref[s]["bins"], f"step {s}: different bins after resume"
  # Every bin of the uninterrupted order was trained exactly once in the same place.
  steps = range(1, STEPS + 1)
  assert [b for s in steps for b in got[s]["bins"]] == [b for s in steps for b in ref[s]["bins"]]


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


def _random_state(seed: int):
  """Incompressible arrays (random floats), so damaged bytes land in the values themselves."""
  keys = jax.random.split(jax.random.key(0), 8)
  return {f"a{i}": jax.random.normal(k, (128, 64)) + seed for i, k in enumerate(keys)} | {
      "step": jnp.asarray(seed, jnp.int32)}


def _two_steps_damaged(tmp_path, damage):
  ck = ckpt_lib.Checkpointer(str(tmp_path), keep=3, async_save=False)
  for step in (1, 2):
    ck.save(step, _random_state(step), {"pos": step}, _meta(_state(1)))
  ck.close()
  files = [f for f in glob.glob(os.path.join(ck.directory, "2", "state", "**"), recursive=True)
           if os.path.isfile(f)]
  biggest = max(files, key=os.path.getsize)   # the OCDBT data file holding the arrays
  with open(biggest, "rb") as f:
    data = bytearray(f.read())
  with open(biggest, "wb") as f:
    f.write(damage(data))
  return ckpt_lib.Checkpointer(str(tmp_path), keep=3, async_save=False).restore(
      jax.eval_shape(lambda: _random_state(0)), _meta(_state(1)))


def _flip_4kb(data: bytearray) -> bytes:
  start = len(data) // 3
  for i in range(start, start + 4096):
    data[i] ^= 0xFF
  return bytes(data)


def test_flipped_bytes_fail_the_checksum_and_fall_back(tmp_path, capfd):
  """4 KB of inverted bytes inside the array data still decode (no compression check
  catches them); the per-array checksum does, and the restore takes step 1."""
  state, data_state, step = _two_steps_damaged(tmp_path, _flip_4kb)
  assert step == 1 and data_state == {"pos": 1}
  for k, v in _random_state(1).items():
    np.testing.assert_array_equal(np.asarray(state[k]), np.asarray(v))
  out, err = capfd.readouterr()
  lines = [line for line in (out + err).splitlines() if line.strip()]
  assert len(lines) == 1 and "arrays differ from what was saved" in lines[0], lines


def test_truncated_step_falls_back_with_one_warning_line(tmp_path, capfd):
  _, _, step = _two_steps_damaged(tmp_path, lambda data: bytes(data[:len(data) // 2]))
  assert step == 1
  out, err = capfd.readouterr()
  lines = [line for line in (out + err).splitlines() if line.strip()]
  assert len(lines) == 1 and "falling back to the previous checkpoint" in lines[0], lines


def test_checksum_sees_every_bit_at_its_position():
  """An independent NumPy reference of the checksum (DESIGN of checkpoint.py: uint32 sum of
  fmix32(bits ^ fmix32(index + 1))), and that one flipped bit or two swapped values change it."""
  def fmix(h):
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))

  x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
  with np.errstate(over="ignore"):
    index = np.arange(x.size, dtype=np.uint32).reshape(x.shape)
    want = int(np.sum(fmix(x.view(np.uint32) ^ fmix(index + np.uint32(1))), dtype=np.uint32))
  sums = ckpt_lib.array_checksums({"x": jnp.asarray(x), "bf": jnp.asarray(x, jnp.bfloat16),
                                   "i": jnp.arange(3, dtype=jnp.int32)})
  assert sums["x"] == [want, "float32"] and sums["bf"][1] == "bfloat16"
  flipped = x.copy()
  flipped.view(np.uint32)[2, 3] ^= np.uint32(1)
  swapped = x.copy()
  swapped[0, 0], swapped[0, 1] = x[0, 1], x[0, 0]
  for other in (flipped, swapped):
    assert ckpt_lib.array_checksums({"x": jnp.asarray(other)})["x"][0] != want


def test_damaged_final_params_are_one_clear_error(tmp_path):
  params = _random_state(3)
  meta = _meta(_state(1))
  ckpt_lib.save_final_params(str(tmp_path), params, meta)
  files = [f for f in glob.glob(os.path.join(ckpt_lib.final_params_dir(str(tmp_path)), "**"),
                                recursive=True) if os.path.isfile(f)]
  biggest = max(files, key=os.path.getsize)
  with open(biggest, "rb") as f:
    data = bytearray(f.read())
  with open(biggest, "wb") as f:
    f.write(_flip_4kb(data))
  with pytest.raises(ckpt_lib.CheckpointCorrupt, match="arrays differ from what was saved"):
    ckpt_lib.load_final_params(str(tmp_path), jax.eval_shape(lambda: _random_state(0)), meta)


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
