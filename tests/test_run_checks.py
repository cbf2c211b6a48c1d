"""Config checks and the divergence stop shared by the SFT and RL loops (train/run_setup.py,
train/guards.py), and what the launchers print for them: one line naming the field."""
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

from mage_jax.train import guards, run_setup
from tests._train_helpers import ROOT, subprocess_env, write_bins

STAGES = ["stage1_midtrain", "stage2_gui_sft", "stage3_code_sft", "stage4_hybrid_sft", "stage5_rl"]


@pytest.mark.parametrize("name", STAGES)
@pytest.mark.parametrize("arg", [None, "tiny"])
def test_every_shipped_config_passes_the_checks(name, arg):
  run_setup.check_config(importlib.import_module(f"configs.{name}").get_config(arg), ())


BAD = [("optimizer.learning_rate", float("nan")), ("optimizer.learning_rate", -1.0),
       ("optimizer.learning_rate", float("inf")), ("optimizer.b2", 1.0), ("optimizer.eps", 0.0),
       ("step.grad_accum_steps", 0), ("data.batch_size", 0), ("data.batch_size", -4),
       ("data.patch_budget", 6), ("train.total_steps", 0), ("train.num_epochs", 0),
       ("train.max_nonfinite_steps", 0), ("checkpoint.every_steps", 0), ("log.every_steps", 0),
       ("eval.num_batches", 0)]


@pytest.mark.parametrize("field,value", BAD, ids=[f"{f}={v}" for f, v in BAD])
def test_a_bad_number_is_a_config_error_naming_the_field(field, value):
  c = importlib.import_module("configs.stage4_hybrid_sft").get_config("tiny")
  section, key = field.split(".")
  c[section][key] = value
  with pytest.raises(run_setup.ConfigError, match=rf"config\.{field.replace('.', '[.]')}="):
    run_setup.check_config(c, ())


def test_rl_numbers_and_cross_field_checks():
  """The rl section's ranges belong to rl/ (rl/config_fields.py); the SFT set-up checks them
  only when handed them, as launch.rl's validate does."""
  from configs import stage5_rl
  from mage_jax.rl import loop as rl_loop
  from mage_jax.rl.config_fields import RL_FIELDS
  for key, value in (("tis_cap", float("nan")), ("sync_tolerance", -1.0), ("max_tokens", 0)):
    c = stage5_rl.get_config("tiny")
    c.rl[key] = value
    run_setup.check_config(c, ())   # the SFT set-up knows nothing of the rl section
    with pytest.raises(run_setup.ConfigError, match=f"config.rl.{key}="):
      run_setup.check_config(c, (), RL_FIELDS)
    with pytest.raises(run_setup.ConfigError, match=f"config.rl.{key}="):
      rl_loop.validate(c)
  c = stage5_rl.get_config("tiny")
  c.data.batch_size, c.step.grad_accum_steps = 6, 4
  with pytest.raises(run_setup.ConfigError, match="not divisible by config.step.grad_accum_steps"):
    run_setup.check_config(c, ())
  c = stage5_rl.get_config("tiny")
  c.data.sources["x"] = {"paths": "a.jsonl", "weight": 0.0, "stage": 0, "packed_dir": ""}
  with pytest.raises(run_setup.ConfigError, match=r"config.data.sources.x.weight=0.0"):
    run_setup.check_config(c, ())
  c = stage5_rl.get_config("tiny")
  c.step.foo = 1
  with pytest.raises(run_setup.ConfigError, match="config.step: .*'foo'"):
    run_setup.check_config(c, ())


def test_guard_stops_after_the_limit_of_consecutive_nonfinite_steps():
  g = guards.NonFiniteGuard(3)
  for step, bad in enumerate([1, 1, 0, 1, 1], start=1):   # a finite step resets the count
    g.update(step, {"nonfinite": bad, "loss": np.nan if bad else 1.0})
  with pytest.raises(guards.NonFiniteRun, match=r"steps 4\.\.6: 3 consecutive .*max_nonfinite_steps=3"):
    g.update(6, {"nonfinite": 1, "loss": np.nan})


def _launch(module: str, *args: str) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-m", f"launch.{module}", *args], cwd=ROOT,
                          env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def test_launchers_print_one_line_naming_the_bad_field(tmp_path):
  """Each launcher, run as a user would, exits 2 with a single error line and no traceback
  (run side by side: each start pays for importing JAX)."""
  w = str(tmp_path / "w")
  cases = [
      (_launch("train", "--config=configs/stage4_hybrid_sft.py:tiny", f"--workdir={w}",
               "--config.optimizer.learning_rate=nan"),
       "FATAL usage error: config.optimizer.learning_rate=nan: must be a finite number > 0"),
      (_launch("train", "--config=configs/stage4_hybrid_sft.py:tiny", f"--workdir={w}",
               "--config.foo=1"),
       "FATAL Flags parsing error: --config.foo: the config has no field 'foo'"),
      (_launch("rl", "--config=configs/stage5_rl.py:tiny", f"--workdir={w}",
               "--config.data.batch_size=-4"),
       "FATAL usage error: config.data.batch_size=-4: must be an integer >= 1"),
      (_launch("curriculum", "--config=configs/mage_vl_cowork.py:tiny", f"--workdir={w}",
               "--config.stages.stage5_rl.overrides=step.grad_accum_steps=0"),
       "FATAL usage error: stage stage5_rl: config.step.grad_accum_steps=0 must be >= 1"),
  ]
  for proc, line in cases:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, (proc.args, out, err)
    assert "Traceback" not in err and line in err.splitlines(), (proc.args, err)
  assert not os.path.exists(os.path.join(w, "synth"))  # the curriculum trained no stage


def test_sft_run_with_a_nonfinite_loss_stops_and_saves_nothing_final(tmp_path):
  """A learning rate of 1e30 makes every loss after the first non-finite; the step skips
  those updates, and after train.max_nonfinite_steps of them in a row the run stops."""
  from configs import stage2_gui_sft
  from mage_jax.train import checkpoint as ckpt_lib
  from mage_jax.train import loop
  packed = str(tmp_path / "packed")
  write_bins(os.path.join(packed, "gui"), n=16, seq_len=64)
  c = stage2_gui_sft.get_config("tiny")
  c.synth.enabled = False
  c.model.arch = "qwen3"
  c.model.text.vocab_size = 2048
  c.data.update(packed_dir=packed, seq_len=64, patch_budget=4, batch_size=8)
  c.step.loss_chunk_size = 32
  c.optimizer.update(learning_rate=1e30, warmup_steps=0)
  c.train.update(total_steps=6, max_nonfinite_steps=2)
  c.checkpoint.update(every_steps=100, async_save=False)
  c.log.update(tensorboard=False, peak_tflops_per_device=1.0)
  c.eval.click_jsonl = ""
  workdir = str(tmp_path / "w")
  with pytest.raises(guards.NonFiniteRun, match=r"steps 2\.\.3: 2 consecutive"):
    loop.train(c, workdir)
  assert not ckpt_lib.has_final_params(workdir)
  assert not os.path.exists(os.path.join(workdir, run_setup.SUMMARY))


def test_shell_exits_1_on_a_diverged_run_and_2_on_a_config_error(capsys):
  from launch import shell

  def diverged(config, workdir):
    raise guards.NonFiniteRun("steps 1..10: 10 consecutive non-finite losses")

  def bad(config, workdir):
    raise run_setup.ConfigError("config.data.batch_size=0: must be an integer >= 1")

  for job, code, line in ((diverged, 1, "FAILED: steps 1..10"), (bad, 2, "FATAL usage error")):
    with pytest.raises(SystemExit) as e:
      shell.run_job(job, object(), "w", run_setup.ConfigError)
    assert e.value.code == code
    assert capsys.readouterr().err.startswith(line)


def test_a_source_that_packs_to_nothing_is_a_config_error_saying_why(tmp_path):
  """Episodes whose screenshots are gone (e.g. a JSONL moved away from its images/) render to no
  sample; the SFT set-up names the source and the skip reason, not a bare 'no shards'."""
  import shutil
  from configs import stage2_gui_sft
  from mage_jax.data import synth
  from mage_jax.train import loop
  synth.generate(str(tmp_path / "synth"), seed=0, episodes=4, grounding=2)
  shutil.rmtree(tmp_path / "synth" / "images")
  c = stage2_gui_sft.get_config("tiny")
  c.synth.enabled = False
  c.data.sources = {"screens": {"paths": str(tmp_path / "synth" / "grounding.jsonl"), "weight": 1.0,
                                "stage": 2}}
  c.data.packed_dir = str(tmp_path / "packed")
  c.prep.pack_if_missing = True
  with pytest.raises(run_setup.ConfigError, match=r"data source 'screens': no bins .*0 samples packed, "
                                                 r"skipped: read: missing image 2"):
    loop.prepare(c, str(tmp_path / "w"))
