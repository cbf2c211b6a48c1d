"""End to end (Levanter style): the tiny curriculum trains 2 steps per SFT stage on
synthetic data with held-out episodes, then one RL update from the last SFT stage's
params, writes the table/plots, and a rerun skips completed stages."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(workdir):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)  # one CPU device, as on a laptop
  env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the curriculum's own cache in <workdir>/jax_cache
  args = [sys.executable, "-m", "launch.curriculum", "--config=configs/mage_vl_cowork.py:tiny",
          f"--workdir={workdir}", "--config.synth.episodes=8", "--config.synth.grounding=2",
          "--config.stages.stage3_code_sft.enabled=False",
          "--config.stages.stage4_hybrid_sft.enabled=False"]
  for stage, extra in (("stage1_midtrain", ""), ("stage2_gui_sft", ";eval.every_steps=1")):
    args.append(f"--config.stages.{stage}.overrides=train.total_steps=2;log.every_steps=1;"
                "eval.max_new_tokens=4;eval.click_samples=1;checkpoint.async_save=false;"
                "data.batch_size=1" + extra)
  # Stage 5 starts from stage 2's params: one RL update of one group of 2 episodes.
  args.append("--config.stages.stage5_rl.overrides=rl.total_updates=1;rl.groups_per_update=1;"
              "rl.episodes_per_group=2;checkpoint.async_save=false")
  return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_tiny_curriculum_two_steps_per_stage_and_resume(tmp_path):
  out = _run(tmp_path)
  assert out.returncode == 0, out.stderr[-4000:]
  rows = json.load(open(tmp_path / "curriculum.json"))
  assert [r["stage"] for r in rows] == ["stage1_midtrain", "stage2_gui_sft", "stage5_rl"]
  rl_row = rows.pop()
  assert rl_row["kind"] == "rl" and rl_row["steps"] == 1
  # every policy call of the 2 episodes trained, or (a group of equal rewards: the tiny policy's are
  # often all 0) counted as zero-advantage and not packed; tokens are the trained ones
  m = [json.loads(l) for l in open(tmp_path / "stage5_rl" / "metrics.jsonl") if '"reward_mean"' in l][0]
  assert m["packed_samples"] + m["zero_advantage_samples"] >= 2
  assert (rl_row["tokens"] > 0) == (m["packed_samples"] > 0), (rl_row["tokens"], m["packed_samples"])
  assert rl_row["reward_first"] is not None  # the update's groups were played and scored
  assert f"initialised params from {tmp_path / 'stage2_gui_sft'}" in out.stdout  # RL starts from SFT
  assert "reward " in out.stdout  # the RL row of the table
  for r in rows:
    assert r["steps"] == 2 and r["tokens"] > 0 and r["flops_6nd"] > 0
    assert r["final_loss"] == r["final_loss"]  # not NaN
    # One held-out episode per source, never trained, gives a per-source held-out loss.
    assert {k for k in r["eval"] if k.startswith("heldout_loss/")} == {
        f"heldout_loss/{s}" for s in (["grounding", "gui"] if r["stage"] == "stage1_midtrain" else ["gui"])}
  assert "click_accuracy" in rows[0]["eval"]
  # eval.every_steps=1: stage 2 also evaluated at step 1, during training.
  during = [json.loads(l) for l in open(tmp_path / "stage2_gui_sft" / "metrics.jsonl")]
  assert any(r["step"] == 1 and "eval/heldout_loss/gui" in r for r in during)
  assert "initialised params from" in out.stdout  # stage 2 started from stage 1
  assert "final loss" in out.stdout and "held-out" in out.stdout  # the table
  assert os.path.exists(tmp_path / "plots" / "loss.png")
  assert os.path.exists(tmp_path / "stage2_gui_sft" / "manifest.json")
  manifest = json.load(open(tmp_path / "stage2_gui_sft" / "manifest.json"))
  assert manifest["git_commit"] and manifest["mesh"] and manifest["devices"]
  # Stage 2 has stage 1's shapes: its step came from the shared compilation cache.
  assert any(f.startswith("jit_") for f in os.listdir(tmp_path / "jax_cache"))
  again = _run(tmp_path)
  assert again.returncode == 0, again.stderr[-4000:]
  assert again.stdout.count("complete, skipping") == 3
