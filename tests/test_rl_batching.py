"""Batched generation in the embedded rollout server (rl/generate_batcher.py): a request's tokens and
log-probs in a batch equal those it gets alone; vLLM's pause modes abort / wait / keep."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mage_jax.rl import generate_batcher as gb
from mage_jax.rl.rollout_client import RolloutClient
from tests.test_rl_rollout import PROMPT, log_softmax, make_hf_dir

PROMPTS = [PROMPT, PROMPT[:2], [9707, 11, 1879, 0, 374, 1207, 88, 3] * 3, [151644, 872]]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  return make_hf_dir(str(tmp_path_factory.mktemp("batching") / "a"), 0)


@pytest.fixture(scope="module")
def policy(ckpt):
  from mage_jax import api
  return api.load(ckpt)


def _jobs(temperature: float):
  return [gb.Job(np.asarray(p, np.int32), max_tokens=3 + 2 * i, temperature=temperature, top_p=1.0 - 0.05 * i,
                 seed=100 + i) for i, p in enumerate(PROMPTS)]


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_a_request_samples_the_same_alone_and_in_a_batch(policy, temperature):
  batched = _jobs(temperature)
  gb.run_batch(policy, batched)      # 4 rows of different lengths, max_tokens, top_p and seeds
  for job in batched:
    alone = gb.Job(job.prompt, job.max_tokens, job.temperature, job.top_p, job.seed)
    gb.run_batch(policy, [alone])
    assert alone.tokens == job.tokens and len(job.tokens) == job.max_tokens
    np.testing.assert_allclose(alone.logprobs, job.logprobs, atol=1e-5)
  # Not all alike: the rows' own seeds matter, and the log-probs are the policy's.
  assert len({tuple(j.tokens) for j in batched}) > 1
  job = batched[0]
  logp = log_softmax(policy.logits(list(job.prompt) + job.tokens[:-1])[len(job.prompt) - 1:])
  if temperature == 1.0 and job.top_p == 1.0:
    np.testing.assert_allclose(job.logprobs, logp[np.arange(len(job.tokens)), job.tokens], atol=1e-4)
  other = gb.Job(job.prompt, job.max_tokens, 1.0, 1.0, seed=job.seed + 1)
  gb.run_batch(policy, [other])
  assert temperature == 0.0 or other.tokens != job.tokens


def test_concurrent_requests_to_the_server_run_as_one_batch_with_their_alone_results(ckpt):
  from mage_jax.rl.rollout_server import RolloutServer
  with RolloutServer(ckpt) as server:
    client = RolloutClient(server.url, "mage", timeout=300)
    alone = [client.complete(p, max_tokens=4, temperature=1.0, seed=i) for i, p in enumerate(PROMPTS)]
    sizes_before = sum(server.batcher.batch_sizes.values())
    results = {}
    # A long request first: the others queue behind it and then run together.
    head = threading.Thread(target=lambda: client.complete(PROMPT, max_tokens=64, seed=9))
    head.start()
    while server._inflight == 0:
      time.sleep(0.005)
    threads = [threading.Thread(target=lambda i=i, p=p: results.setdefault(
        i, client.complete(p, max_tokens=4, temperature=1.0, seed=i))) for i, p in enumerate(PROMPTS)]
    for t in threads:
      t.start()
    for t in [head, *threads]:
      t.join(300)
  assert max(server.batcher.batch_sizes) >= 2          # some requests shared a generate
  assert sum(server.batcher.batch_sizes.values()) - sizes_before < 1 + len(PROMPTS)
  for i, a in enumerate(alone):
    assert results[i].token_ids == a.token_ids
    np.testing.assert_allclose(results[i].logprobs, a.logprobs, atol=1e-5)


# ---- pause modes, on a batcher whose generate blocks until released ------------------------------
@pytest.fixture
def gated(monkeypatch):
  gate, started = threading.Event(), threading.Event()

  def fake_run_batch(policy, jobs):
    started.set()
    gate.wait(30)
    for j in jobs:
      j.tokens, j.logprobs, j.finish = [policy], [-0.5], "length"

  monkeypatch.setattr(gb, "run_batch", fake_run_batch)
  weights = ["old"]
  batcher = gb.GenerateBatcher(lambda: (weights[0], weights[0]))
  yield batcher, gate, started, weights
  gate.set()
  batcher.stop()


def _submit(batcher, out, key):
  job = gb.Job(np.asarray([1]), 1, 1.0, 1.0, 0)
  t = threading.Thread(target=lambda: out.setdefault(key, batcher.submit(job)))
  t.start()
  return t


def _until(cond, timeout=10.0):
  deadline = time.monotonic() + timeout
  while not cond():
    assert time.monotonic() < deadline
    time.sleep(0.005)


def _running_and_queued(batcher, started, out):
  """One request running on the device (held at the gate) and one queued behind it."""
  running = _submit(batcher, out, "running")
  started.wait(10)
  queued = _submit(batcher, out, "queued")
  _until(lambda: len(batcher.queue) == 1)
  return running, queued


def test_pause_abort_returns_queued_requests_as_aborted(gated):
  batcher, gate, started, _ = gated
  out = {}
  running, queued = _running_and_queued(batcher, started, out)
  pauser = threading.Thread(target=lambda: batcher.pause("abort"))
  pauser.start()
  queued.join(10)
  assert out["queued"].finish == "abort" and out["queued"].tokens == []
  assert pauser.is_alive()            # still waiting for the running batch
  gate.set()
  for t in (running, pauser):
    t.join(10)
  assert out["running"].finish == "length" and not pauser.is_alive()


def test_pause_wait_lets_queued_requests_finish_first(gated):
  batcher, gate, started, _ = gated
  out = {}
  threads = list(_running_and_queued(batcher, started, out))
  pauser = threading.Thread(target=lambda: batcher.pause("wait"))
  pauser.start()
  time.sleep(0.2)
  assert pauser.is_alive()
  gate.set()
  for t in (*threads, pauser):
    t.join(10)
  assert out["queued"].finish == "length" and batcher.inflight == 0 and batcher.paused


def test_pause_keep_freezes_queued_requests_until_resume_on_the_new_weights(gated):
  batcher, gate, started, weights = gated
  out = {}
  threads = list(_running_and_queued(batcher, started, out))
  gate.set()
  batcher.pause("keep")               # returns once the running batch is done
  threads[0].join(10)
  assert out["running"].label == "old" and len(batcher.queue) == 1
  time.sleep(0.2)
  assert "queued" not in out          # frozen while paused
  weights[0] = "new"                  # the sync swaps weights
  batcher.resume()
  threads[1].join(10)
  assert out["queued"].label == "new" and out["queued"].tokens == ["new"]


def test_requests_wait_while_paused_or_are_refused_in_reject_mode(gated):
  batcher, gate, started, _ = gated
  gate.set()
  batcher.pause("wait")
  out = {}
  waiting = _submit(batcher, out, "late")
  time.sleep(0.2)
  assert "late" not in out and not batcher.queue     # held before admission
  batcher.resume()
  waiting.join(10)
  assert out["late"].finish == "length"
  batcher.reject_while_paused = True
  batcher.pause("wait")
  with pytest.raises(gb.Paused, match="Generation is paused"):
    batcher.submit(gb.Job(np.asarray([1]), 1, 1.0, 1.0, 0))
  with pytest.raises(ValueError, match="sideways"):
    batcher.pause("sideways")
