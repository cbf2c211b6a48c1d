"""The learning proof's one command at toy scale (configs/proof.py:smoke): teacher data through
the real harness -> eval at init -> pack + SFT -> eval -> RL (embedded engine, train split) ->
eval -> results.json + plots. Checks the plumbing, that the SFT loss falls and that an RL update
raises the log-probs of a rewarded completion; success figures are not asserted (toy scale)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests._agent_helpers import needs_sandbox
from tests._train_helpers import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  wd = str(tmp_path_factory.mktemp("proof") / "w")
  proc = subprocess.run([sys.executable, "-m", "launch.curriculum", "--config=configs/proof.py:smoke",
                         f"--workdir={wd}", "--config.seed=1"], cwd=ROOT, env=subprocess_env(),
                        capture_output=True, text=True, timeout=2700)   # a hang guard; ~4 CPU-min of work
  print(proc.stdout[-4000:])
  assert proc.returncode == 0, proc.stderr[-4000:]
  return wd


def read(wd, *parts):
  with open(os.path.join(wd, *parts)) as f:
    return json.load(f)


@needs_sandbox
@pytest.mark.timeout(3000)
def test_smoke_pipeline_writes_every_figure(smoke):
  from mage_jax.tasks.proof_family import TEMPLATES
  data = read(smoke, "data", "summary.json")
  assert data["instances"] == {"train": 8, "heldout": 4, "rl": 8} and data["teacher_episodes"] == 8
  assert data["probe_episodes"].endswith("teacher_heldout/episodes.jsonl")
  assert data["grounding"] == {"train": 2, "heldout": 1}   # the vision stage's click screens
  vision = read(smoke, "vision", "summary.json")   # GUI midtraining: its steps and held-out clicks
  assert vision["steps"] == 2 and vision["eval"]["click_samples"] == 1.0
  assert 0.0 <= vision["eval"]["click_accuracy"] <= vision["eval"]["click_parsed"] <= 1.0
  res = read(smoke, "results.json")
  for label, ev in res["evaluations"].items():   # the copy probe on the 4 held-out teacher episodes
    probe = ev["copy_probe"]
    assert probe["value_tokens"] > 0 and probe["nll"] > 0 and 0 <= probe["accuracy"] <= 1, label
  with open(os.path.join(smoke, "results.md")) as f:
    assert "copy probe" in f.read()
  assert sorted(res["evaluations"]) == ["init", "rl", "sft"]
  for label, ev in res["evaluations"].items():
    t1 = ev["summary"]["t1"]
    assert t1["all"]["episodes"] == 4 and t1["all"]["env_errors"] == 0, label
    assert sorted(t1["template"]) == sorted(TEMPLATES) and sorted(t1["kind"]) == ["gui", "hybrid", "terminal"]
    assert 0.0 <= t1["all"]["success_lo"] <= t1["all"]["success"] <= t1["all"]["success_hi"] <= 1.0
    assert t1["all"]["calls_per_task"] >= 1 and t1["all"]["output_tokens_per_task"] > 0
    if label != "init":   # the random init gets T=1 and greedy only
      assert ev["summary"]["blind"]["all"]["episodes"] == 2   # the GUI and the hybrid instance
  assert res["evaluations"]["init"]["params_from"].startswith("random init (seed 1)")
  assert res["evaluations"]["sft"]["params_from"].endswith("/sft")
  assert read(smoke, "sft", "summary.json")["init_from"].endswith("/vision")   # sft starts from vision
  assert res["evaluations"]["rl"]["params_from"].endswith("/rl")
  # every evaluation played the same held-out instances (the pairs are whole)
  ids = {label: sorted(r["task_id"] for r in read(smoke, f"eval_{label}", "episodes.json") if r["mode"] == "t1")
         for label in ("init", "sft", "rl")}
  assert ids["init"] == ids["sft"] == ids["rl"] and all("_heldout_" in i for i in ids["rl"])
  assert res["paired"]["sft_vs_rl"]["t1"]["instances"] == 4
  assert 0.0 <= res["paired"]["sft_vs_rl"]["t1"]["mcnemar"]["p_value"] <= 1.0
  assert len(res["rl_curve"]) == 1 and res["rl_curve"][0]["episodes"] == 2
  for png in ("proof_success_reward.png", "proof_calls.png", "proof_tokens.png"):
    assert os.path.getsize(os.path.join(smoke, "plots", png)) > 1000
  # RL played its own suite only: train values that no train instance (no SFT episode) holds
  with open(os.path.join(smoke, "rl", "groups.jsonl")) as f:
    groups = [json.loads(line) for line in f]
  assert groups and all("_rl_" in g["task_id"] for g in groups)
  from mage_jax.tasks import proof_family as pf
  from mage_jax.tasks.package import load_suite
  train, rl = (pf.used_values(load_suite(os.path.join(smoke, "data", d))) for d in ("train_suite", "rl_suite"))
  assert not set(train["words"]) & set(rl["words"]) and not set(train["file_names"]) & set(rl["file_names"])
  pf.check_suite(load_suite(os.path.join(smoke, "data", "rl_suite")), "train")


@needs_sandbox
@pytest.mark.timeout(3000)
def test_smoke_sft_loss_falls(smoke):
  rows = [json.loads(line) for line in open(os.path.join(smoke, "sft", "metrics.jsonl"))]
  losses = [r["loss"] for r in rows if "loss" in r and "step" in r]
  assert len(losses) == 3 and losses[-1] < losses[0], losses


@needs_sandbox
@pytest.mark.timeout(3000)
def test_rl_update_raises_logprobs_of_the_rewarded_completion(smoke):
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "_proof_rl_check.py"), smoke],
                        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-4000:]
  r = json.loads(proc.stdout.strip().splitlines()[-1])
  print(r)
  assert r["packed"] == 2 and r["flat_groups"] == 0 and r["advantages"][0] > 0 > r["advantages"][1]
  assert r["good_after"] > r["good_before"] and r["bad_after"] < r["bad_before"], r
