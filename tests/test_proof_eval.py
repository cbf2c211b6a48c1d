"""The proof's held-out figures from episode rows, and the screenshot-blind policy."""
from __future__ import annotations

import base64
import json
import io
import types

import numpy as np
import pytest
from PIL import Image

from mage_jax.runs import proof_eval


def row(mode, task, template, kind, success, calls, tokens, invalid=0, gui=0, term=0, env_error=False):
  return {"mode": mode, "task_id": task, "template": template, "kind": kind, "success": success,
          "score": float(success), "model_calls": calls, "output_tokens": tokens, "invalid_calls": invalid,
          "gui_actions": gui, "terminal_actions": term, "env_error": env_error, "status": "terminated",
          "error": ""}


def test_summarize_by_hand():
  rows = [row("t1", "a", "make_file", "terminal", True, 2, 100, term=1),
          row("t1", "b", "make_file", "terminal", False, 4, 300, invalid=2, term=2),
          row("t1", "c", "click_colour", "gui", True, 2, 80, gui=1),
          row("t1", "d", "click_colour", "gui", False, 3, 90, env_error=True),
          row("greedy", "a", "make_file", "terminal", False, 1, 10)]
  s = proof_eval.summarize(rows)
  a = s["t1"]["all"]
  # env errors are left out of the rates (and counted)
  assert (a["episodes"], a["env_errors"], a["solved"]) == (4, 1, 2)
  assert a["success"] == pytest.approx(2 / 3)
  assert a["calls_per_task"] == pytest.approx(8 / 3) and a["calls_per_solved_task"] == pytest.approx(2.0)
  assert a["output_tokens_per_task"] == pytest.approx(480 / 3)
  assert a["invalid_call_rate"] == pytest.approx(2 / 8)
  assert a["gui_share"] == pytest.approx(1 / 4) and a["terminal_share"] == pytest.approx(3 / 4)
  assert s["t1"]["template"]["make_file"]["success"] == 0.5 and s["t1"]["kind"]["gui"]["episodes"] == 2
  assert s["greedy"]["all"]["calls_per_solved_task"] is None and "blind" not in s
  assert proof_eval.outcomes(rows, "t1") == {"a": 1, "b": 0, "c": 1, "d": 0}


def test_blind_policy_sends_blank_screens_of_the_same_size():
  from mage_jax.agent.episode import PolicyRequest
  from mage_jax.data.images import num_image_tokens
  from mage_jax.data.tokenizer import load_tokenizer
  from mage_jax.models.config import IMAGE_PAD_ID
  from mage_jax.engine.rollout_client import Completion
  from mage_jax.rl.rollouts import RolloutContext
  shot = np.full((64, 96, 3), 200, np.uint8)
  n = num_image_tokens(64, 96)
  text = ("<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nClick red.<|vision_start|>"
          + "<|image_pad|>" * n + "<|vision_end|><|im_end|>\n<|im_start|>assistant\n")
  prompt = load_tokenizer("").encode(text)
  sent = []

  class Client:
    base_url = "fake"

    def chat(self, messages, **kw):
      sent.append(messages)
      return Completion(text="x", token_ids=[5], logprobs=[-1.0], prompt_token_ids=list(prompt),
                        finish_reason="stop")
  req = PolicyRequest(types.SimpleNamespace(id="gui"), 1, types.SimpleNamespace(id="e"),
                      np.asarray(prompt), [shot], lambda a: a)
  pol = proof_eval.BlindPolicy(RolloutContext(Client(), lambda: 0), "gui", "e")
  pol.act(req)
  urls = [p["image_url"]["url"] for m in sent[0] if isinstance(m["content"], list)
          for p in m["content"] if p["type"] == "image_url"]
  assert len(urls) == 1
  img = np.asarray(Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1]))))
  assert img.shape == shot.shape and not img.any()          # blank, same size
  assert pol.samples[0].prompt_ids.count(IMAGE_PAD_ID) == n and not pol.samples[0].images[0].any()
  assert req.images[0].min() == 200                          # the seeing request is untouched


def test_run_heldout_one_queue_rows_by_mode_and_task():
  """All modes go to the pool in one run (mode by mode), results arrive in any order and are
  matched back by episode id; blind plays only the screenshot kinds; greedy gets its own context."""
  from mage_jax.agent.episode import EpisodeResult
  tasks = [types.SimpleNamespace(id=i, kind=k) for i, k in
           (("t_a", "terminal"), ("g_b", "gui"), ("h_c", "hybrid"), ("t_d", "terminal"))]
  runs = []

  class Pool:
    def run(self, jobs):
      jobs = list(jobs)
      runs.append(jobs)
      for j in reversed(jobs):   # out of order, as slots finish
        mode = j.episode_id.split("-")[0]
        yield EpisodeResult(j.task.id, j.task.kind, None, score=float(mode == "greedy" and j.task.id == "g_b"),
                            status="terminated", model_calls=2, episode_id=j.episode_id,
                            parse_errors={"no_tool_call": 1},
                            records=[{"parse_error": None, "response": "ok"},
                                     {"parse_error": "no_tool_call", "response": "bad " + j.episode_id}])
  ctxs = {m: types.SimpleNamespace(mode=m) for m in proof_eval.MODES}
  seen = []
  rows = proof_eval.run_heldout(tasks, lambda t: "tpl_" + t.id, ctxs.__getitem__, Pool(),
                                on_result=seen.append)
  assert len(runs) == 1
  assert [j.episode_id for j in runs[0]] == (["t1-t_a", "t1-g_b", "t1-h_c", "t1-t_d"]
                                             + ["greedy-t_a", "greedy-g_b", "greedy-h_c", "greedy-t_d"]
                                             + ["blind-g_b", "blind-h_c"])
  for j in runs[0]:
    mode = j.episode_id.split("-")[0]
    assert isinstance(j.policy, proof_eval.BlindPolicy) == (mode == "blind")
    assert j.policy.ctx is ctxs[mode]
  assert [(r["mode"], r["task_id"]) for r in rows] == [(j.episode_id.split("-")[0], j.task.id) for j in runs[0]]
  assert [r["task_id"] for r in rows if r["success"]] == ["g_b"] and rows[5]["mode"] == "greedy"
  assert rows[1]["template"] == "tpl_g_b" and len(seen) == 10
  assert rows[1]["parse_errors"] == {"no_tool_call": 1} and rows[1]["first_invalid"] == "bad t1-g_b"
  assert rows[1]["calls"] == ["ok", "bad t1-g_b"]   # every call as produced, valid ones too
  with pytest.raises(ValueError, match="t_a"):
    proof_eval.run_heldout(tasks + tasks[:1], str, ctxs.__getitem__, Pool(), modes=["t1"])
  with pytest.raises(ValueError, match="unknown evaluation mode"):
    proof_eval.run_heldout(tasks, str, ctxs.__getitem__, Pool(), modes=["hot"])


def test_run_heldout_skips_episodes_already_played():
  from mage_jax.agent.episode import EpisodeResult
  tasks = [types.SimpleNamespace(id="a", kind="terminal"), types.SimpleNamespace(id="b", kind="gui")]
  played = []

  class Pool:
    def run(self, jobs):
      for j in jobs:
        played.append(j.episode_id)
        yield EpisodeResult(j.task.id, j.task.kind, None, status="budget", episode_id=j.episode_id)
  old = row("t1", "b", "x", "gui", True, 2, 50)
  rows = proof_eval.run_heldout(tasks, lambda t: t.id, lambda m: None, Pool(), modes=["t1", "greedy"],
                                done={proof_eval.episode_key("t1", "b"): old})
  assert played == ["t1-a", "greedy-a", "greedy-b"]
  assert [(r["mode"], r["task_id"]) for r in rows] == [("t1", "a"), ("t1", "b"), ("greedy", "a"), ("greedy", "b")]
  assert rows[1] is old


def test_read_partial_checks_the_header_and_drops_a_cut_off_line(tmp_path):
  from mage_jax.runs.proof_steps import read_partial
  path = str(tmp_path / "episodes.partial.jsonl")
  head = {"params_from": "/w/sft", "seed": 0, "max_tokens": 96, "modes": "t1,greedy"}
  assert read_partial(path, head) == {}
  r1, r2 = row("t1", "a", "x", "terminal", True, 2, 50), row("greedy", "a", "x", "terminal", False, 4, 90)
  with open(path, "a") as f:
    f.write(json.dumps(r1) + "\n" + json.dumps(r2) + "\n" + json.dumps(r1)[:17])   # killed mid-write
  assert read_partial(path, head) == {"t1-a": r1, "greedy-a": r2}
  with open(path) as f:
    assert len(f.read().splitlines()) == 3            # header + 2 rows; the fragment is gone
  with pytest.raises(ValueError, match="episodes.partial.jsonl:1"):
    read_partial(path, {**head, "params_from": "/w/rl"})
