"""Forge's LLM path: workflows with LLM nodes against (1) a replay server of recorded responses
(tasks must pass the sandbox gates; a dead endpoint stops the run with a clear error and keeps
what was accepted) and (2) launch.serve's rollout server with a tiny random model (invalid JSON:
schema retries, fallbacks and gate rejections show up in the manifest); and the
workflow-vs-agent-loop cost comparison on a recorded trace set."""
import json
import os
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _forge_skills  # noqa: E402,F401  registers the test skills
from mage_jax.forge import cost, engine, replay  # noqa: E402
from mage_jax.forge.run import ForgeError  # noqa: E402
from test_forge_engine import tiny_config  # noqa: E402


def _llm(url, **kw):
  return dict({"params": True, "reword": True, "siblings": 0, "base_url": url, "model": "mage",
               "timeout_s": 120.0, "max_tokens": 256, "temperature": 0.0, "max_retries": 1,
               "prices": {"default": {"prompt": 0.6, "completion": 2.4}}}, **kw)


def test_replay_llm_path_passes_gates_and_dead_endpoint_keeps_accepted(tmp_path):
  traces = str(tmp_path / "traces.jsonl")
  skills = ["test.text.upper", "test.csv.sum"]
  # record once with the oracle responder (what a competent model answers) ...
  with replay.ReplayServer(traces, responder=cost.workflow_responder) as srv:
    engine.run_forge(tiny_config(tmp_path / "rec", skills=skills, rounds=1, attempts_per_skill=2, gate=False,
                                 student={"enabled": False}, llm=_llm(srv.url)))
  # ... then replay it over HTTP with no responder: every request must be in the recording
  with replay.ReplayServer(traces) as srv:
    c = tiny_config(tmp_path / "w", skills=skills, rounds=1, attempts_per_skill=2,
                    student={"enabled": False}, llm=_llm(srv.url))
    m = engine.run_forge(c)
    assert srv.misses == 0 and srv.hits == 2 * 2 * 2  # (params + reword) x 2 skills x 2 attempts
  r = m["rounds"][0]
  assert r["accepted"] == 4 and r["rejections"] == {}, r["rejections_by_skill"]
  assert r["llm"]["calls"] == 8 and r["llm"]["fallbacks"] == 0 and m["cost"]["dollars"] > 0
  from mage_jax.tasks.package import load_suite
  assert all(p.instruction.startswith("Task: ") for p in load_suite(m["suite"]))  # the reworded text
  # the endpoint dies: a new attempt needs it -> a clear error naming URL, skill and node;
  # the 4 accepted tasks stay in the suite
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
  with pytest.raises(ForgeError) as e:
    engine.run_forge(dict(c, attempts_per_skill=3, llm=_llm(dead)))
  assert dead in str(e.value) and "test." in str(e.value) and "node 'params'" in str(e.value)
  assert len(os.listdir(m["suite"])) == 4
  with open(os.path.join(c["workdir"], "manifest.json")) as f:
    assert "unreachable" in json.load(f)["rounds"][0]["error"]


def test_tiny_random_model_retries_fallbacks_rejections(tmp_path):
  # launch.serve in its own process (JAX stays out of this one: the forge workers are forked)
  proc = subprocess.Popen([sys.executable, "-m", "launch.serve", "--config=configs/serve.py:tiny",
                           "--config.port=0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  try:
    url = json.loads(proc.stdout.readline())["url"]
    c = tiny_config(tmp_path / "w", skills=["test.text.upper", "test.text.badmention"], rounds=1,
                    attempts_per_skill=1, workers=1, student={"enabled": False},
                    llm=_llm(url, reword=False, max_tokens=8, max_retries=1))
    m = engine.run_forge(c)
  finally:
    proc.terminate()
    proc.wait(timeout=60)
  llm = m["rounds"][0]["llm"]
  # random tokens are never valid JSON: each params node retries once, then falls back to the draw
  assert llm["calls"] == 2 and llm["retries"] == 2 and llm["fallbacks"] == 2 and llm["requests"] == 4
  assert llm["prompt_tokens"] > 0 and llm["completion_tokens"] > 0 and m["cost"]["dollars"] > 0
  assert m["rejections"] == {"file_gate": 1} and m["counts"]["per_skill"] == {"test.text.upper": 1}


def test_cost_comparison_on_recorded_traces(tmp_path):
  skills = ["test.text.upper", "test.csv.sum", "test.xlsx.cell"]
  rec = cost.compare(skills, 2, str(tmp_path))
  again = cost.compare(skills, 2, str(tmp_path), record=False)  # replay only: identical numbers
  assert again["workflow"] == rec["workflow"] and again["agent_loop"] == rec["agent_loop"]
  assert rec["workflow"]["requests"] == 2 and rec["agent_loop"]["requests"] >= 6
  # the agent loop re-sends its system prompt (the package docs) every turn
  with open(cost.DOCS) as f:
    docs_tokens = len(f.read()) / 4
  assert rec["agent_loop"]["prompt_tokens"] > rec["agent_loop"]["requests"] * docs_tokens
  assert 0.9 < rec["tokens_reduction"] < 1 and 0.9 < rec["cost_reduction"] < 1
  assert rec["frontier_endpoint"] == "pending"
