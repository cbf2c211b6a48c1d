"""Collection and synthesis on real sandboxes and a real OpenAI-compatible server on loopback
(the embedded rollout server behind launch.serve, a tiny random-init Qwen3: mostly invalid output,
so the rejection paths run); a harness variant's id in every result and trajectory; resume."""
from __future__ import annotations

import json
import os
import time

from _agent_helpers import needs_sandbox
from configs import evolve as evolve_config
from mage_jax.data import trajectory as tr
from mage_jax.forge import llm
from mage_jax.harness import load_variant
from mage_jax.runs.collect import run_collection
from mage_jax.harness.synthesis import SynthesisConfig, synthesize_file

TASKS = "term_hello_file,term_multiply,term_count_lines"


def _config(**policy):
  c = evolve_config.get_config("noisy,collect")  # the p_extra noise model below
  c.tasks, c.repeats, c.slots = TASKS, 2, 2
  c.episode.score_settle = 0.0
  c.policy.update(policy)
  return c


@needs_sandbox
def test_collect_keeps_schema_episodes_resumes_and_synthesis_rejects_random_output(tmp_path):
  from launch.serve import random_init_dir
  from mage_jax.engine.rollout_server import RolloutServer
  # 1. the noisy scripted teacher under the redundant-tools harness
  c = _config(p_extra=0.3, p_invalid=0.0, seed=3)
  c.harness = "configs/harness.py:redundant"
  variant = load_variant(c.harness)
  work = str(tmp_path / "collect")
  t0 = time.monotonic()
  rep = run_collection(c, work, progress=False)["collection"]
  print("scripted collection:", json.dumps(rep))
  assert rep["episodes"] == 6 and rep["kept"] + sum(rep["rejected"].values()) == 6
  assert rep["kept"] >= 1 and rep["rejected"].get("extra_tool", 0) >= 1 and rep["extra_tool_steps"] >= 1
  read = tr.ReadReport()
  kept = list(tr.read_all([os.path.join(work, "trajectories.jsonl")], report=read))
  assert len(kept) == rep["kept"] and not read.skipped
  for ep in kept:  # the student's schema and tools, the teacher's harness id
    assert ep.tool_names == ["computer_use", "bash"] and ep.meta["harness"] == variant.variant_id
    assert ep.meta["task_id"] in TASKS and ep.meta["skills"] and ep.outcome == "success"
  with open(os.path.join(work, "collect_state.jsonl")) as f:
    states = [json.loads(line) for line in f]
  assert {s["harness"] for s in states} == {variant.variant_id}
  # 2. rerunning resumes: no job runs twice, nothing is written twice
  rep2 = run_collection(c, work, progress=False)["collection"]
  assert rep2["resumed"] == 6 and rep2["episodes"] == 6 and rep2["kept"] == rep["kept"]
  with open(os.path.join(work, "trajectories.jsonl")) as f:
    assert len(f.readlines()) == rep["kept"]

  t1 = time.monotonic()
  path = random_init_dir("qwen3_tiny", 0, str(tmp_path / "tiny"))
  with RolloutServer(path) as server:
    t2 = time.monotonic()
    # 3. the random model as the teacher: nothing kept, every failure counted by reason
    c3 = _config(kind="openai", base_url=server.url, max_tokens=12, temperature=1.0)
    c3.tasks, c3.repeats, c3.episode.max_steps = "term_hello_file", 1, 2
    rep3 = run_collection(c3, str(tmp_path / "random"), progress=False)["collection"]
    t3 = time.monotonic()
    print("random-model collection:", json.dumps(rep3))
    assert rep3["episodes"] == 1 and rep3["kept"] == 0 and sum(rep3["rejected"].values()) == 1
    # 4. synthesis of the kept teacher steps by the random model: rejected, by reason
    ledger = llm.Ledger()
    client = llm.ChatClient(server.url, "mage", max_tokens=12)
    syn = synthesize_file(os.path.join(work, "trajectories.jsonl"), str(tmp_path / "syn.jsonl"), client,
                          SynthesisConfig(workers=2), ledger)
  print(f"seconds: scripted collection + resume {t1 - t0:.1f}, server start {t2 - t1:.1f}, "
        f"random collection {t3 - t2:.1f}, synthesis {time.monotonic() - t3:.1f}")
  print("random-model synthesis:", json.dumps({k: syn[k] for k in ("steps", "steps_kept", "rejected", "llm")}))
  steps = sum(len(ep.steps) for ep in kept)
  assert syn["steps"] == steps and syn["steps_kept"] + sum(syn["rejected"].values()) == steps
  assert syn["steps_kept"] < steps and all(r.startswith("parse:") or r in ("call_mismatch", "empty_think",
                                                                          "empty_action") for r in syn["rejected"])
  assert syn["llm"]["calls"] == steps and syn["llm"]["prompt_tokens"] > 500 * steps  # the real server's usage


def test_resume_skips_finished_jobs_and_reruns_env_errors(tmp_path):
  from mage_jax.agent.episode import EpisodeResult
  from mage_jax.harness.collect import Collector
  first = Collector(str(tmp_path), "hybrid")
  first.add(EpisodeResult("t", "terminal", None, status="env_error", episode_id="t-r0"))
  first.add(EpisodeResult("u", "terminal", None, status="budget", episode_id="u-r0"))
  assert first.report.rejected == {"env_error": 1, "no_steps": 1}
  again = Collector(str(tmp_path), "hybrid")
  assert again.done == {"u-r0"} and again.report.episodes == 1 and again.report.env_errors_retried == 1
