"""Episode loop, policies (scripted, OpenAI-compatible over loopback, in-process checkpoint), slots,
evaluation and launch.eval."""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from mage_jax.actions import schema as tools
from mage_jax.agent import evaluation
from mage_jax.agent.env import Env, Observation
from mage_jax.agent.episode import EpisodeConfig, PolicyOutput, run_episode
from mage_jax.agent.policies import OpenAIChatPolicy, ScriptedPolicy, prompt_to_messages
from mage_jax.agent.slots import Job, LocalSlotPool
from mage_jax.tasks.builtin import builtin_packages
from mage_jax.tasks.package import package_from_dict
from mage_jax.data import trajectory as tr
from tests._agent_helpers import StubEnv, builtin_suite_run, local_env, needs_sandbox

TASKS = {p.id: p for p in builtin_packages()}


class FakeOpenAI:
  """A loopback OpenAI-compatible server that answers like vLLM with return_token_ids + logprobs."""

  def __init__(self, replies):
    self.replies, self.requests = list(replies), []
    outer = self

    class H(BaseHTTPRequestHandler):
      def log_message(self, *a):
        pass

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        outer.requests.append((self.path, body))
        text = outer.replies.pop(0)
        ids = list(range(100, 100 + len(text) // 4 + 1))
        resp = {"id": "x", "object": "chat.completion", "prompt_token_ids": [1, 2, 3],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "token_ids": ids, "finish_reason": "stop",
                             "logprobs": {"content": [{"token": str(i), "logprob": -0.5} for i in ids]}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": len(ids)}}
        data = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
    threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()


def test_prompt_to_messages_splits_turns_and_images():
  img = np.zeros((32, 32, 3), np.uint8)
  text = ("<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\ntask\n\n<|vision_start|><|image_pad|><|image_pad|>"
          "<|vision_end|><|im_end|>\n<|im_start|>assistant\n")
  msgs = prompt_to_messages(text, [img])
  assert [m["role"] for m in msgs] == ["system", "user"]
  assert msgs[0]["content"] == "sys"
  assert msgs[1]["content"][0] == {"type": "text", "text": "task\n\n"}
  assert msgs[1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
  with pytest.raises(ValueError):
    prompt_to_messages(text, [])


@pytest.mark.parametrize("prompt_variants", [False, True])
def test_render_prompt_equals_training_sample_up_to_target(tmp_path, prompt_variants):
  """The inference prompt is exactly the training sample's tokens before a_t (same window,
  folding, screenshots), ends with the assistant header, and never reads a_t."""
  import os
  from PIL import Image
  from mage_jax.data import render
  r = render.Renderer(render.RenderConfig(full_responses=2, visual_turns=2, prompt_variants=prompt_variants))
  steps = []
  for k in range(1, 7):
    shot = None
    if k % 3:  # some observations are text-only
      shot = os.path.join(tmp_path, f"o{k}.png")
      Image.new("RGB", (64 + 32 * k, 96), (40 * k % 256, 9, 9)).save(shot)
    call = tr.ToolCall("bash", {"command": f"echo {k}"}) if k % 2 else tr.ToolCall(
        "computer_use", {"action": "left_click", "coordinate": [k, 999 - k]})
    steps.append(tr.Step(tr.Observation(shot, f"OUT-{k}"), f"THINK-{k}", f"ACT-{k}", call))
  ep = tr.Episode("e", "Do six things.", steps)
  head = r.tok.encode("<|im_start|>assistant\n")
  for t in range(1, 7):
    sample = r.render_step(ep, t)
    cut = int(np.argmax(sample.loss_mask))
    tokens, images = r.render_prompt(ep, t)
    assert tokens.dtype == sample.tokens.dtype and tokens.tolist() == sample.tokens[:cut].tolist(), t
    assert list(tokens[-len(head):]) == head
    assert len(images) == len(sample.images) and all((a == b).all() for a, b in zip(images, sample.images))
    # a_t is not part of the prompt: an empty pending step renders the same prompt
    pending = tr.Episode("e", ep.instruction, steps[:t - 1] + [tr.Step(steps[t - 1].observation, "", "", None)])
    again, _ = r.render_prompt(pending, t)
    assert again.tolist() == tokens.tolist()
    assert f"THINK-{t}" not in r.tok.decode(tokens) and (t == 1 or f"THINK-{t - 1}" in r.tok.decode(tokens))
  with pytest.raises(ValueError, match="too_long"):
    render.Renderer(render.RenderConfig(context_len=64)).render_prompt(ep, 3)


@needs_sandbox
@pytest.mark.timeout(180)
def test_openai_policy_records_ids_logprobs_and_counts_parse_errors(tmp_path):
  good_bash = tools.format_response("Compute it.", "Multiply in the shell", "bash", {"command": "echo $((37*43))"})
  done = tools.format_response("Done.", "Finish", "computer_use", {"action": "terminate", "status": "success"})
  server = FakeOpenAI(["I will just answer 1591.", good_bash + "\nextra", good_bash, done])
  try:
    policy = OpenAIChatPolicy(server.url, "mage", max_tokens=64, server="vllm")  # a fake vLLM
    env = local_env()
    try:
      res = run_episode(env, TASKS["term_multiply"], policy, EpisodeConfig(out_dir=str(tmp_path)))
    finally:
      env.close()
  finally:
    server.close()
  assert res.status == "terminated" and res.score == 1.0
  assert res.parse_errors == {"no_tool_call": 1, "text_after_call": 1}
  assert res.model_calls == 4 and res.steps == 2 and res.terminal_actions == 1
  assert res.records[0]["raw"] == "I will just answer 1591."
  rec = res.records[2]
  assert rec["prompt_ids"] == [1, 2, 3] and rec["logprobs"] == [-0.5] * len(rec["completion_ids"])
  assert res.output_tokens == sum(len(r["completion_ids"]) for r in res.records)
  path, body = server.requests[2]
  assert path == "/v1/chat/completions" and body["logprobs"] and body["return_token_ids"]
  roles = [m["role"] for m in body["messages"]]
  assert roles[:2] == ["system", "user"] and "computer_use" in body["messages"][0]["content"]
  # the parse error was shown to the policy in its next prompt
  assert "Error (no_tool_call)" in json.dumps(server.requests[1][1]["messages"])
  # the episode is valid trajectory data (invalid turns are not steps)
  ep = tr.episode_from_dict(tr.episode_to_dict(res.episode))
  assert [s.tool_call.name for s in ep.steps] == ["bash", "computer_use"]
  assert "1591" in ep.steps[1].observation.text


@needs_sandbox
@pytest.mark.timeout(180)
def test_gui_prompt_carries_screenshots_and_budget(tmp_path):
  wait = tools.format_response("Look.", "Wait", "computer_use", {"action": "wait", "time": 0})
  server = FakeOpenAI([wait] * 3)
  try:
    env = local_env()
    try:
      res = run_episode(env, TASKS["gui_click_red"], OpenAIChatPolicy(server.url, "mage"),
                        EpisodeConfig(max_steps=3, out_dir=str(tmp_path)))
    finally:
      env.close()
  finally:
    server.close()
  assert res.status == "budget" and res.steps == 3 and res.score == 0.0 and res.gui_actions == 3
  n_images = [json.dumps(b["messages"]).count('"type": "image_url"') for _, b in server.requests]
  assert n_images == [1, 2, 3]  # o_1..o_t, at most visual_turns=3


class CrashingEnv(StubEnv):
  def reset(self, task):
    raise RuntimeError("X server died")


@needs_sandbox
@pytest.mark.timeout(180)
def test_slot_crash_is_env_error_and_slot_restarts(tmp_path):
  made = []

  def factory():
    made.append(1)
    return CrashingEnv() if len(made) == 1 else local_env()
  pool = LocalSlotPool(factory, EpisodeConfig(out_dir=str(tmp_path)), num_slots=1)
  task = TASKS["term_hello_file"]
  try:
    results = list(pool.run([Job(task, ScriptedPolicy(), "a"), Job(task, ScriptedPolicy(), "b")]))
  finally:
    pool.close()
  assert [r.status for r in results] == ["env_error", "terminated"]
  assert "X server died" in results[0].error and not results[0].success
  assert results[1].success and pool.restarts == 1
  rows = evaluation.summarize(results)
  assert rows[-1]["env_errors"] == 1 and rows[-1]["success_rate"] == 1.0  # env errors are not policy failures


@needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scripted_reference_policy_solves_every_builtin_task(tmp_path):
  _, results, _ = builtin_suite_run()   # the gates' reference runs: run_episode + ScriptedPolicy
  assert [r.task_id if r else None for r in results] == list(TASKS)
  failed = [(r.task_id, r.status, r.score, r.error) for r in results if not r.success]
  assert not failed
  assert all(r.status == "terminated" and r.model_calls == r.steps and not r.parse_errors for r in results)
  rows = evaluation.summarize(results)
  print("\n" + evaluation.format_table(rows))
  by = {r["group"]: r for r in rows}
  assert by["all"]["episodes"] == len(TASKS) and by["all"]["success_rate"] == 1.0
  assert by["terminal"]["gui_share"] == 0.0 and by["gui"]["terminal_share"] == 0.0
  assert 0 < by["hybrid"]["gui_share"] < 1
  paths = evaluation.write_results(str(tmp_path), results, rows)
  report = tr.ReadReport()
  eps = list(tr.read_all([paths["episodes"]], report=report))
  assert len(eps) == len(TASKS) and not report.skipped
  assert all(len(e.steps) == r.steps and e.reward == 1.0 for e, r in zip(eps, results))


class ScreenEnv(Env):
  """An in-memory GUI env: every observation is a small screenshot; nothing ever changes."""

  def __init__(self):
    from PIL import Image, ImageDraw
    self.image = Image.new("RGB", (160, 96), (30, 30, 40))
    ImageDraw.Draw(self.image).rectangle([20, 20, 90, 50], fill=(200, 40, 40))
    self.steps = 0

  def reset(self, task):
    return Observation(screenshot=self.image.copy())

  def step(self, name, arguments):
    self.steps += 1
    return Observation(screenshot=self.image.copy())

  def screenshot(self):
    return self.image.copy()

  def score(self):
    return 0.0

  def close(self):
    pass


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tiny_mage_vl_checkpoint_garbage_is_a_counted_parse_error(tmp_path):
  """A random-init Mage-VL saved as an HF directory, loaded by path and run in process through
  `generate` on the exact rendered prompt + screenshot: its garbage output becomes parse-error
  observations, counted, never a crash."""
  from flax import nnx
  from mage_jax.data import images as images_lib
  from mage_jax.models import mage_vl
  from mage_jax.models.config import MageVLConfig, MageViTConfig, Qwen3Config
  from mage_jax.agent.policies import CheckpointPolicy
  from mage_jax.weights import save_hf
  cfg = MageVLConfig(
      text=Qwen3Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=16, intermediate_size=64),
      vision=MageViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, out_hidden_size=32))
  save_hf(mage_vl.MageVL(cfg, rngs=nnx.Rngs(0)), cfg, str(tmp_path / "ckpt"), dtype="float32")

  seen = []

  class Recording(CheckpointPolicy):
    def act(self, request):
      seen.append(request)
      return super().act(request)
  policy = Recording(str(tmp_path / "ckpt"), max_new_tokens=8)
  env = ScreenEnv()
  res = run_episode(env, TASKS["gui_click_red"], policy,
                    EpisodeConfig(max_steps=2, out_dir=str(tmp_path / "eps"), score_settle=0))
  assert res.status == "budget" and res.model_calls == 2 and res.steps == 0 and env.steps == 0
  assert sum(res.parse_errors.values()) == 2 and res.episode is None
  assert all(r["parse_error"] and r["raw"] is not None for r in res.records)
  for rec, req in zip(res.records, seen):
    assert 0 < len(rec["completion_ids"]) == len(rec["logprobs"]) <= 8 and all(lp <= 0 for lp in rec["logprobs"])
    assert rec["prompt_ids"] == [int(i) for i in req.prompt_tokens] and len(req.images) == 1
    n_pad = images_lib.num_image_tokens(*req.images[0].shape[:2])
    assert int((req.prompt_tokens == cfg.image_token_id).sum()) == n_pad   # the screenshot is in the prompt
  text2 = policy.policy.decode(seen[1].prompt_tokens)
  assert f"Error ({res.records[0]['parse_error']})" in text2   # the error was shown to the policy
  # greedy: the policy's tokens are api.generate's on the same prompt and screenshot
  ref = policy.policy.generate(seen[0].prompt_tokens, 8, images=seen[0].images)
  assert res.records[0]["completion_ids"] == [int(i) for i in ref.tokens]
  assert res.records[0]["raw"] == policy.policy.decode([i for i in ref.tokens if i != 151645])


@needs_sandbox
@pytest.mark.timeout(300)
def test_launch_eval_smoke(tmp_path):
  r = subprocess.run([sys.executable, "-m", "launch.eval", "--config=configs/eval.py:scripted,tiny",
                      f"--workdir={tmp_path}", "--config.env.width=800", "--config.env.height=600"],
                     capture_output=True, text=True, timeout=280)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "| all | 3 | 0 | 100.0% |" in r.stdout
  res = json.loads((tmp_path / "results.json").read_text())
  assert res["summary"][-1]["success_rate"] == 1.0 and len(res["episodes"]) == 3


# ---- a workload that crashes the harness: the policy's outcome, never env_error ----------------
def _bash_task(commands, kind="terminal", setup=()):
  calls = [{"name": "bash", "arguments": {"command": c}} for c in commands]
  calls.append({"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}})
  return package_from_dict({"id": "hostile", "kind": kind, "instruction": "Write hello.txt.", "setup": list(setup),
                            "checker": {"type": "file_text", "path": "hello.txt", "equals": "hello world"},
                            "reference": calls})


class _KillsItsEnvironment(ScriptedPolicy):
  """Replays the task, and before step `at` kills part of the environment from the host (what a
  workload that found a way to do it would leave behind)."""

  def __init__(self, env, at, kill):
    super().__init__()
    self.env, self.at, self.kill = env, at, kill

  def act(self, request):
    if request.t == self.at:
      self.kill(self.env)
    return super().act(request)


@needs_sandbox
@pytest.mark.timeout(120)
def test_kill_everything_is_the_policys_outcome(tmp_path):
  """Old harness: `kill -9 -1` took the sandbox down, the next command raised RuntimeError and the
  slot pool reported env_error, which the success rate and GRPO groups leave out."""
  pool = LocalSlotPool(local_env, EpisodeConfig(out_dir=str(tmp_path), score_settle=0), num_slots=1)
  task = _bash_task(["echo 'hello world' > hello.txt", "kill -9 -1", "echo after"])
  try:
    [res] = list(pool.run([Job(task, ScriptedPolicy(), "k")]))
  finally:
    pool.close()
  assert res.status in ("terminated", "env_lost"), (res.status, res.error)
  assert res.score == (1.0 if res.status == "terminated" else 0.0)


@needs_sandbox
@pytest.mark.timeout(120)
def test_a_dead_sandbox_ends_the_episode_scored_as_it_stands(tmp_path):
  """Old harness: RuntimeError('sandbox is closed') out of env.step -> env_error."""
  from mage_jax.machine import sandbox as sb
  env = local_env()
  task = _bash_task(["echo 'hello world' > hello.txt", "cat hello.txt", "echo more"])
  try:
    res = run_episode(env, task, _KillsItsEnvironment(env, 2, lambda e: sb.kill_tree(e.sandbox._bwrap.pid)),
                      EpisodeConfig(out_dir=str(tmp_path), score_settle=0))
    try:  # the checker scores the state as it stands: still readable (1.0) or unreadable (0.0)
      expected = float(env.read_file("hello.txt") == b"hello world\n")
    except sb.Unreadable:
      expected = 0.0
  finally:
    env.close()
  assert res.status == "env_lost" and "sandbox is gone" in res.error and res.steps == 2
  assert res.score == expected
  row = evaluation.summarize([res])[-1]
  assert row["env_errors"] == 0 and row["env_lost"] == 1 and row["success_rate"] == expected


@needs_sandbox
@pytest.mark.timeout(120)
def test_a_dead_x_server_ends_the_episode_not_the_harness(tmp_path):
  """Old harness: the next GUI action raised an Xlib connection error -> env_error."""
  env = local_env()
  task = package_from_dict({
      "id": "x", "kind": "gui", "instruction": "x", "checker": {"type": "file_exists", "path": "out.json"},
      "reference": [{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [10, 10]}},
                    {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [20, 20]}},
                    {"name": "computer_use", "arguments": {"action": "terminate", "status": "success"}}]})

  def kill_x(e):
    e.desktop._xvfb.kill()
    e.desktop._xvfb.wait()
  try:
    res = run_episode(env, task, _KillsItsEnvironment(env, 2, kill_x), EpisodeConfig(out_dir=str(tmp_path),
                                                                                      score_settle=0))
  finally:
    env.close()
  assert res.status == "env_lost" and "X display is gone" in res.error and res.score == 0.0


def test_unreadable_reads_score_zero():
  """A checker read the workload made hang (a FIFO) or whose sandbox died is Unreadable -> 0."""
  import subprocess
  from mage_jax.machine import sandbox as sb
  from mage_jax.agent.env import LocalEnv
  from mage_jax.tasks import checkers

  class FailingSandbox:
    def __init__(self, alive, error):
      self._alive, self.error = alive, error

    def alive(self):
      return self._alive

    def read_file(self, path):
      raise self.error
    list_dir = read_file

  spec = {"type": "file_text", "path": "hello.txt", "equals": "hello world"}
  env = LocalEnv()
  for sandbox in (FailingSandbox(True, subprocess.TimeoutExpired(["head"], 60)),
                  FailingSandbox(False, RuntimeError("sandbox is closed"))):
    env.sandbox = sandbox
    with pytest.raises(sb.Unreadable):
      env.read_file("hello.txt")
    assert checkers.score(env, spec) == 0.0
  env.sandbox = FailingSandbox(True, RuntimeError("a harness bug"))
  with pytest.raises(RuntimeError, match="a harness bug"):   # not the workload's doing: it propagates
    env.read_file("hello.txt")


def test_env_errors_are_counted_and_reported():
  from mage_jax.agent.episode import EpisodeResult
  rs = [EpisodeResult("a", "terminal", None, score=1.0, status="terminated"),
        EpisodeResult("b", "terminal", None, score=0.0, status="env_lost", error="the sandbox is gone"),
        EpisodeResult("c", "terminal", None, status="env_error", error="OSError: No space left on device\ntb")]
  row = evaluation.summarize(rs)[-1]
  assert row["env_errors"] == 1 and row["env_lost"] == 1
  assert row["success_rate"] == 0.5 and row["success_rate_all"] == pytest.approx(1 / 3)
  assert row["env_error_reasons"] == {"OSError: No space left on device": 1}


def test_env_lost_episodes_stay_in_the_grpo_group():
  """A workload that destroyed its environment trains as the failure it is; only env_error is left out."""
  import types
  from mage_jax.rl.rollouts import group_from_results
  from mage_jax.rl.batch import RLSample
  pols = [types.SimpleNamespace(episode_id=f"e{i}", samples=[RLSample([1], [2], [-1.0], 0.0, 0)], error=None,
                                returned_image_bytes=0)
          for i in range(3)]   # RolloutPolicy's fields that group_from_results reads

  def res(i, status, score):
    return types.SimpleNamespace(status=status, model_calls=1, score=score, parse_errors={}, spray={},
                                 episode=types.SimpleNamespace(id=f"e{i}"), records=[{"parse_error": ""}],
                                 error_reason="")   # EpisodeResult.error_reason (deadline episodes)
  g = group_from_results("t", "g", [res(0, "terminated", 1.0), res(1, "env_lost", 0.0), res(2, "env_error", 0.0)],
                         pols)
  assert [e.episode_id for e in g.episodes] == ["e0", "e1"] and g.env_errors == 1
  assert g.rewards.tolist() == [1.0, 0.0]


def test_a_relative_out_dir_keeps_screenshots_reachable(tmp_path, monkeypatch):
  """run_episode with out_dir relative to the cwd: every GUI step's prompt still holds its image
  (the root was once resolved twice: 'missing_image: o_1')."""
  import os

  from PIL import Image

  from mage_jax.actions import schema as tools
  from mage_jax.agent import episode as episode_lib
  from mage_jax.agent.env import Observation
  from mage_jax.tasks.package import package_from_dict
  from tests._agent_helpers import StubEnv

  class ScreenEnv(StubEnv):
    def reset(self, task):
      return Observation(screenshot=Image.new("RGB", (64, 64), "red"), text=None)

    def step(self, name, arguments):
      return Observation(screenshot=Image.new("RGB", (64, 64), "blue"), text="")

  seen = []

  class Counter:
    def act(self, req):
      seen.append(len(req.images))
      return episode_lib.PolicyOutput(text=tools.format_response(
          "t", "Click", "computer_use", {"action": "left_click", "coordinate": [5, 5]}))

  monkeypatch.chdir(tmp_path)
  task = package_from_dict(dict(id="t", instruction="Click.", kind="gui",
                                checker={"type": "file_exists", "path": "x"}))
  res = episode_lib.run_episode(ScreenEnv(), task, Counter(), episode_lib.EpisodeConfig(
      out_dir="rel_shots", max_steps=2, score_settle=0.0))
  assert seen == [1, 2] and res.steps == 2
  assert all(os.path.isabs(s.observation.screenshot) for s in res.episode.steps)
