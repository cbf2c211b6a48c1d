"""Continuous batching in the embedded rollout server (engine/generate_batcher.py, models/slot_decode.py):
a request's tokens and log-probs in a batch equal those it gets alone, also when it joins a running
batch or others finish (max_tokens, EOS) around it; the sampler's draws follow the distribution;
vLLM's pause modes abort / wait / keep; a reload drains the slots on the old weights first."""
from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mage_jax.models import sampling
from mage_jax.engine import generate_batcher as gb
from mage_jax.engine.rollout_client import RolloutClient
from tests.test_rl_rollout import PROMPT, log_softmax, make_hf_dir

PROMPTS = [PROMPT, PROMPT[:2], [9707, 11, 1879, 0, 374, 1207, 88, 3] * 3, [151644, 872]]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  return make_hf_dir(str(tmp_path_factory.mktemp("batching") / "a"), 0)


@pytest.fixture(scope="module")
def policy(ckpt):
  from mage_jax import api
  return api.load(ckpt)


def _jobs(temperatures):
  return [gb.Job(np.asarray(p, np.int32), max_tokens=3 + 5 * i, temperature=t, top_p=1.0 - 0.05 * i,
                 seed=100 + i) for i, (p, t) in enumerate(zip(PROMPTS, temperatures))]


def _alone(policy, job, eos_id):
  return gb.run_alone(policy, gb.Job(job.prompt, job.max_tokens, job.temperature, job.top_p, job.seed),
                      eos_id=eos_id)


@pytest.mark.parametrize("temperatures", [(1.0,) * 4, (0.0, 1.0, 0.0, 0.7)], ids=["sampled", "mixed"])
def test_a_request_samples_the_same_alone_and_in_a_batch(policy, temperatures):
  # Row 3 stops at EOS: make its 3rd token (alone) the EOS id for every run.
  probe = _alone(policy, _jobs(temperatures)[3], eos_id=-1)
  eos = probe.tokens[2]
  jobs = _jobs(temperatures)
  engine = gb.SlotEngine(8, eos_id=eos)
  engine.use(policy, "v")
  finished = engine.admit(jobs[:2])      # 2 rows running ...
  finished += engine.step()
  assert finished == [jobs[0]]           # max_tokens 3: done after one call
  finished += engine.admit(jobs[2:])     # ... 2 more join mid-flight (the pool grows to 4 rows)
  sizes = {engine.active}
  while engine.active:
    finished += engine.step()
    sizes.add(engine.active)
  assert len(finished) == 4 and {3, 1} <= sizes          # rows left early, one ran on alone
  assert jobs[3].finish == "stop" and jobs[3].tokens == probe.tokens[:3]
  for job in jobs:
    alone = _alone(policy, job, eos)
    assert alone.tokens == job.tokens and alone.finish == job.finish
    np.testing.assert_allclose(alone.logprobs, job.logprobs, atol=1e-5)
  assert [len(j.tokens) for j in jobs[:3]] == [j.max_tokens for j in jobs[:3]]
  assert len({tuple(j.tokens) for j in jobs}) == 4
  # The log-probs are the policy's (an independent NumPy log-softmax of its full forward).
  job = jobs[0] if temperatures[0] == 1.0 else jobs[1]
  logp = log_softmax(policy.logits(list(job.prompt) + job.tokens[:-1])[len(job.prompt) - 1:])
  if job.temperature == 1.0 and job.top_p == 1.0:
    np.testing.assert_allclose(job.logprobs, logp[np.arange(len(job.tokens)), job.tokens], atol=1e-4)
  if temperatures[0] == 0.0:             # greedy: the argmax of the raw log-softmax
    logp = log_softmax(policy.logits(list(jobs[0].prompt) + jobs[0].tokens[:-1])[len(jobs[0].prompt) - 1:])
    assert jobs[0].tokens == logp.argmax(-1).tolist()
  other = _alone(policy, gb.Job(jobs[1].prompt, jobs[1].max_tokens, 1.0, 1.0, seed=jobs[1].seed + 1), eos)
  assert other.tokens != jobs[1].tokens


def test_the_sampler_draws_from_the_processed_distribution():
  p = np.array([0.45, 0.25, 0.15, 0.1, 0.05, 0.0])
  n = 8_000
  logits = jnp.log(jnp.asarray(p, jnp.float32))[None].repeat(n, 0)
  keys = jax.vmap(jax.random.key)(jnp.arange(n, dtype=jnp.uint32))
  tokens, logp = jax.jit(lambda l, k: sampling.sample_token(l, k, greedy=False, temperature=1.0,
                                                            top_p=1.0))(logits, keys)
  freq = np.bincount(np.asarray(tokens), minlength=len(p)) / n
  assert freq[-1] == 0                                            # p = 0 never drawn
  np.testing.assert_array_less(np.abs(freq - p), 4 * np.sqrt(p * (1 - p) / n) + 1e-9)
  np.testing.assert_allclose(np.asarray(logp), np.log(p[np.asarray(tokens)]), atol=1e-6)
  # one key for the whole batch draws independent rows too
  tokens = sampling.sample_token(logits, jax.random.key(1), greedy=False, temperature=1.0, top_p=1.0)[0]
  freq = np.bincount(np.asarray(tokens), minlength=len(p)) / n
  np.testing.assert_array_less(np.abs(freq - p), 4 * np.sqrt(p * (1 - p) / n) + 1e-9)


def test_concurrent_requests_join_the_running_batch_with_their_alone_results(ckpt):
  from mage_jax.engine.rollout_server import RolloutServer
  with RolloutServer(ckpt) as server:
    client = RolloutClient(server.url, "mage", timeout=300)
    alone = [client.complete(p, max_tokens=4, temperature=1.0, seed=i) for i, p in enumerate(PROMPTS)]
    assert set(server.batcher.batch_sizes) == {1}
    results = {}
    # A long request first: the others join its running batch, and leave before it ends.
    head = threading.Thread(target=lambda: results.setdefault("head", client.complete(
        PROMPT, max_tokens=40, seed=9)))
    head.start()
    while not server.batcher.engine.active:
      time.sleep(0.005)
    threads = [threading.Thread(target=lambda i=i, p=p: results.setdefault(
        i, client.complete(p, max_tokens=4, temperature=1.0, seed=i))) for i, p in enumerate(PROMPTS)]
    for t in threads:
      t.start()
    for t in [head, *threads]:
      t.join(300)
  assert max(server.batcher.batch_sizes) >= 2          # requests shared decode steps
  assert len(results["head"].token_ids) == 40
  for i, a in enumerate(alone):
    assert results[i].token_ids == a.token_ids
    np.testing.assert_allclose(results[i].logprobs, a.logprobs, atol=1e-5)


# ---- pause modes, on a batcher whose generate blocks until released ------------------------------
class _GatedEngine:
  """A SlotEngine stand-in whose decode step blocks until the gate opens; it finishes every
  slot with one token naming the weights (the policy) it was admitted with."""

  def __init__(self, gate, started):
    self.gate, self.started, self.capacity = gate, started, 32
    self.slots, self.policy, self.label = [], None, ""

  @property
  def active(self):
    return len(self.slots)

  def use(self, policy, label):
    assert not self.slots or policy is self.policy, "switched weights under running slots"
    self.policy, self.label = policy, label

  def admit(self, jobs):
    for j in jobs:
      j.label, j.policy = self.label, self.policy
    self.slots += jobs
    return []

  def step(self):
    self.started.set()
    self.gate.wait(30)
    for j in self.slots:
      j.tokens, j.logprobs, j.finish = [j.policy], [-0.5], "length"
    done, self.slots = self.slots, []
    return done

  def fail(self, error, also=()):
    jobs, self.slots = [*self.slots, *also], []
    for j in jobs:
      j.error = error
    return jobs


@pytest.fixture
def gated(monkeypatch):
  gate, started = threading.Event(), threading.Event()
  monkeypatch.setattr(gb, "SlotEngine", lambda capacity: _GatedEngine(gate, started))
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


def test_a_reload_lets_the_slots_on_the_old_weights_finish_before_admitting(gated):
  batcher, gate, started, weights = gated
  out = {}
  running = _submit(batcher, out, "running")
  started.wait(10)
  weights[0] = "new"                   # reload_weights while a request runs, no pause
  late = _submit(batcher, out, "late")
  _until(lambda: len(batcher.queue) == 1)
  gate.set()
  for t in (running, late):
    t.join(10)
  assert out["running"].tokens == ["old"] and out["late"].tokens == ["new"]
  assert out["late"].label == "new"


class _EndlessEngine(_GatedEngine):
  """Every decode step waits at the gate and finishes nothing: its slots generate forever."""

  def step(self):
    self.started.set()
    self.gate.wait(30)
    return []


def test_stop_answers_a_request_still_generating(monkeypatch):
  # The RL stage stops its embedded server while a leftover rollout episode's request is still
  # generating. That request must come back at once with an error (the server answers HTTP 500),
  # not wait forever: before the fix its client sat out the whole request timeout (600 s).
  gate, started = threading.Event(), threading.Event()
  monkeypatch.setattr(gb, "SlotEngine", lambda capacity: _EndlessEngine(gate, started))
  batcher = gb.GenerateBatcher(lambda: ("w", "w"))
  errors = []
  job = gb.Job(np.asarray([1]), 100, 1.0, 1.0, 0)

  def submit():
    try:
      batcher.submit(job)
    except RuntimeError as e:
      errors.append(str(e))
  t = threading.Thread(target=submit, daemon=True)
  t.start()
  assert started.wait(10)
  batcher.stop()
  gate.set()
  t.join(10)
  assert not t.is_alive(), "a request still generating was never answered after stop()"
  assert errors == ["the rollout server stopped before this request finished"]
  assert batcher.inflight == 0
  with pytest.raises(RuntimeError, match="stopping"):   # and nothing new is admitted
    batcher.submit(gb.Job(np.asarray([1]), 1, 1.0, 1.0, 0))
