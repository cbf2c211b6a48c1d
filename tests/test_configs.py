"""Every config and every sweep point loads; overrides and unknown fields behave."""
import importlib
import os
import subprocess
import sys

import ml_collections
import pytest

from configs import common
from mage_jax.runs import sweep as sweep_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ["stage1_midtrain", "stage2_gui_sft", "stage3_code_sft", "stage4_hybrid_sft", "stage5_rl"]


@pytest.mark.parametrize("name", STAGES + ["mage_vl_cowork"])
@pytest.mark.parametrize("arg", [None, "tiny"])
def test_config_and_sweep_points_load(name, arg, tmp_path):
  mod = importlib.import_module(f"configs.{name}")
  cfg = mod.get_config(arg)
  assert "python -m launch." in mod.__doc__  # the exact command is documented
  runs = sweep_lib.expand(f"configs/{name}.py" + (f":{arg}" if arg else ""), str(tmp_path))
  assert len(runs) == len(mod.sweep(arg)) >= 1
  for r in runs:
    c = mod.get_config(arg)
    sweep_lib.apply_point(c, r["point"])
    for key, value in r["point"].items():
      node = c
      for p in key.split("."):
        node = node[p]
      assert node == value
  if name != "mage_vl_cowork":
    from configs import models
    models.build_model_config(cfg.model)


def test_full_size_defaults_are_the_papers():
  from configs import stage1_midtrain, stage4_hybrid_sft, stage5_rl
  c = stage4_hybrid_sft.get_config()
  assert c.data.seq_len == 32_768 and c.model.text.compute_dtype == "bfloat16"
  assert dict(c.mesh) == {"data": 3, "fsdp": 8, "tensor": 1}
  assert c.train.num_epochs == 2 and c.train.paper_bins == 1_377_805
  s1 = stage1_midtrain.get_config()
  assert s1.data.render.mask_think_body and s1.data.render.prompt_variants
  assert "grounding" in s1.data.sources
  rl = stage5_rl.get_config().rl
  assert (rl.groups_per_update, rl.episodes_per_group, rl.max_policy_lag, rl.tis_cap,
          rl.admission_window, rl.num_tasks) == (96, 8, 3, 2.0, 4, 1_988)


def test_bad_arg_and_unknown_sweep_field():
  from configs import stage2_gui_sft
  with pytest.raises(ValueError, match="huge"):
    stage2_gui_sft.get_config("huge")
  with pytest.raises(KeyError, match="learning_rat"):
    sweep_lib.apply_point(stage2_gui_sft.get_config(), {"optimizer.learning_rat": 1.0})


def test_slurm_array_script(tmp_path):
  runs = sweep_lib.expand("configs/stage4_hybrid_sft.py:tiny", str(tmp_path))
  script = sweep_lib.slurm_script(runs, str(tmp_path))
  assert f"--array=0-{len(runs) - 1}" in script
  assert script.count("launch.train") == len(runs)


def _run_train(args, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)  # one device, like a laptop (conftest sets 8)
  return subprocess.run([sys.executable, "-m", "launch.train", *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=120)


def test_unknown_config_field_errors_before_compile(tmp_path):
  p = _run_train(["--config=configs/stage2_gui_sft.py:tiny", f"--workdir={tmp_path}/w",
                  "--config.optimizer.learning_rat=1.0"], tmp_path)
  assert p.returncode != 0
  assert "learning_rat" in p.stderr
  assert not os.path.exists(f"{tmp_path}/w/manifest.json")


def test_override_reaches_the_config_and_missing_data_path_errors(tmp_path):
  p = _run_train(["--config=configs/stage2_gui_sft.py:tiny", f"--workdir={tmp_path}/w",
                  "--config.synth.enabled=False", f"--config.data.packed_dir={tmp_path}/none",
                  "--config.data.sources.gui.paths=/nonexistent/gui.jsonl"], tmp_path)
  assert p.returncode != 0
  assert "config.data.sources.gui.paths" in p.stderr and "/nonexistent/gui.jsonl" in p.stderr


def test_unwritable_workdir(tmp_path):
  blocker = tmp_path / "a_file"   # a path under a regular file can't be created, even as root
  blocker.write_text("x")
  p = _run_train(["--config=configs/stage2_gui_sft.py:tiny", f"--workdir={blocker}/w"], tmp_path)
  assert p.returncode != 0 and "not writable" in p.stderr


def test_init_from_pointing_nowhere(tmp_path):
  p = _run_train(["--config=configs/stage2_gui_sft.py:tiny", f"--workdir={tmp_path}/w",
                  f"--config.init.from_dir={tmp_path}/nowhere"], tmp_path)
  assert p.returncode != 0 and "config.init.from_dir" in p.stderr and "nowhere" in p.stderr


def test_curriculum_overrides_parse_json_and_reject_unknown_fields():
  from mage_jax.runs import curriculum
  cfg = ml_collections.ConfigDict(dict(train=dict(total_steps=-1), name="x"))
  curriculum.apply_overrides(cfg, "train.total_steps=2; name=stage_b")
  assert cfg.train.total_steps == 2 and cfg.name == "stage_b"
  with pytest.raises(KeyError, match="train.nope"):
    curriculum.apply_overrides(cfg, "train.nope=1")


def test_workdir_check_from_many_processes_at_once(tmp_path):
  """The processes of a multi-host job check one shared workdir together: each probe is its own
  (a fixed probe name let one process remove another's: test_multihost failed so once)."""
  import threading
  from mage_jax.train.run_setup import check_workdir
  errors = []

  def check():
    for _ in range(300):
      try:
        check_workdir(str(tmp_path / "shared"))
      except Exception as e:   # noqa: BLE001 - any failure is the finding
        errors.append(e)
  threads = [threading.Thread(target=check) for _ in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors, errors[:3]
  assert os.listdir(tmp_path / "shared") == []   # no probe left behind
