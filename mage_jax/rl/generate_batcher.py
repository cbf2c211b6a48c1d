"""Static batching and vLLM's pause semantics for the embedded rollout server.

Requests are admitted (or held, or refused, while paused) and queued; one worker thread
runs every queued text request that shares the first one's greedy/sampling kind as a
single batched `models.sampling.generate`, while the next requests queue behind it.
A request with images runs alone (its vision inputs are per request). Each row has its
own key (fold_in(seed key, step)) and its own temperature / top_p, so a request samples
the same tokens alone or in a batch. Rows and lengths are padded to power-of-two buckets,
so a server compiles a handful of generate shapes.

Pause modes, as vLLM's POST /pause?mode= (vllm/entrypoints/rl/online/api_router.py):
  wait   in-flight requests (running or queued) finish; pause returns once none is left;
  keep   queued requests are frozen and run after /resume (with the weights live then);
         the running batch finishes first (a jitted generate cannot be frozen mid-way);
  abort  queued requests come back at once with finish_reason "abort" and no tokens;
         the running batch finishes (vLLM would cut it short).
While paused, new requests wait for /resume (vLLM <= 0.32) or are refused with
`Paused` (HTTP 503 "Generation is paused", vLLM >= 0.33), per `reject_while_paused`.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any, Callable

import numpy as np

PAUSE_MODES = ("abort", "wait", "keep")


class Paused(RuntimeError):
  """A request arrived while paused and the server refuses (vLLM >= 0.33's HTTP 503)."""


@dataclasses.dataclass(eq=False)
class Job:
  prompt: np.ndarray
  max_tokens: int
  temperature: float
  top_p: float
  seed: int
  vision: dict = dataclasses.field(default_factory=dict)
  tokens: list[int] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  finish: str = ""
  label: str = ""                 # weight version label of the weights that ran it
  error: BaseException | None = None
  done: threading.Event = dataclasses.field(default_factory=threading.Event)

  @property
  def greedy(self) -> bool:
    return self.temperature == 0


def bucket(n: int, minimum: int) -> int:
  return max(minimum, 1 << max(0, n - 1).bit_length())


class GenerateBatcher:
  """`snapshot()` -> (policy, weight label), read under the lock when a batch starts."""

  def __init__(self, snapshot: Callable[[], tuple[Any, str]], *, max_batch: int = 32,
               reject_while_paused: bool = False):
    self.snapshot, self.max_batch, self.reject_while_paused = snapshot, max_batch, reject_while_paused
    self.cond = threading.Condition()
    self.queue: collections.deque[Job] = collections.deque()
    self.paused = self.frozen = self.running = self.stopped = False
    self.inflight = 0              # admitted and not finished (queued or running)
    self.batch_sizes: collections.Counter[int] = collections.Counter()  # requests per batch run
    self.thread = threading.Thread(target=self._work, daemon=True, name="generate-batcher")
    self.thread.start()

  def submit(self, job: Job) -> Job:
    """Blocks until the job ran (or was aborted); raises Paused in reject mode."""
    with self.cond:
      if self.paused and self.reject_while_paused:
        raise Paused("Generation is paused")
      self.cond.wait_for(lambda: not self.paused or self.stopped)
      if self.stopped:
        raise RuntimeError("the rollout server is stopping")
      self.inflight += 1
      self.queue.append(job)
      self.cond.notify_all()
    job.done.wait()
    if job.error is not None:
      raise job.error
    return job

  def pause(self, mode: str = "abort") -> None:
    if mode not in PAUSE_MODES:
      raise ValueError(f"/pause mode={mode!r}: must be one of {PAUSE_MODES}")
    with self.cond:
      self.paused = True
      if mode == "keep":
        self.frozen = True
        self.cond.wait_for(lambda: not self.running)
        return
      if mode == "abort":
        while self.queue:
          job = self.queue.popleft()
          job.finish = "abort"
          self.inflight -= 1
          job.done.set()
      self.cond.wait_for(lambda: self.inflight == 0)

  def resume(self) -> None:
    with self.cond:
      self.paused = self.frozen = False
      self.cond.notify_all()

  def stop(self) -> None:
    with self.cond:
      self.stopped = True
      self.paused = self.frozen = False
      for job in self.queue:
        job.error = RuntimeError("the rollout server stopped before this request ran")
        job.done.set()
      self.queue.clear()
      self.cond.notify_all()

  def _take_batch(self) -> list[Job]:
    first = self.queue.popleft()
    batch = [first]
    if not first.vision:
      for job in list(self.queue):
        if len(batch) >= self.max_batch:
          break
        if not job.vision and job.greedy == first.greedy:
          self.queue.remove(job)
          batch.append(job)
    return batch

  def _work(self) -> None:
    while True:
      with self.cond:
        self.cond.wait_for(lambda: self.stopped or (self.queue and not self.frozen))
        if self.stopped:
          return
        batch = self._take_batch()
        self.running = True
        policy, label = self.snapshot()
      try:
        run_batch(policy, batch)
        for job in batch:
          job.label = label
      except BaseException as e:  # noqa: BLE001 - handed to each waiting request
        for job in batch:
          job.error = e
      with self.cond:
        self.running = False
        self.inflight -= len(batch)
        self.batch_sizes[len(batch)] += 1
        for job in batch:
          job.done.set()
        self.cond.notify_all()


def run_batch(policy, jobs: list[Job]) -> None:
  """One batched generate over the jobs' right-padded prompts; fills tokens/logprobs/finish."""
  import jax
  import jax.numpy as jnp
  from mage_jax.models.config import IM_END_ID, PAD_ID
  from mage_jax.models.sampling import generate
  rows = bucket(len(jobs), 1)
  length = bucket(max(len(j.prompt) for j in jobs), 16)
  tokens = np.full((rows, length), PAD_ID, np.int32)
  lengths = np.ones(rows, np.int32)       # padding rows: a one-token prompt, output discarded
  temperature, top_p = np.ones(rows, np.float32), np.ones(rows, np.float32)
  seeds = np.zeros(rows, np.uint32)
  for i, j in enumerate(jobs):
    tokens[i, :len(j.prompt)] = j.prompt
    lengths[i] = len(j.prompt)
    temperature[i], top_p[i], seeds[i] = max(j.temperature, 1e-6), j.top_p, j.seed
  keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
  out = generate(policy.model, jnp.asarray(tokens), bucket(max(j.max_tokens for j in jobs), 8),
                 prompt_lengths=jnp.asarray(lengths), greedy=jobs[0].greedy,
                 temperature=jnp.asarray(temperature), top_p=jnp.asarray(top_p), rng=keys,
                 **jobs[0].vision)
  out_tokens, out_logprobs, out_lengths = (np.asarray(x) for x in (out.tokens, out.logprobs, out.lengths))
  for i, j in enumerate(jobs):
    n = min(int(out_lengths[i]), j.max_tokens)
    j.tokens = [int(t) for t in out_tokens[i, :n]]
    j.logprobs = [float(x) for x in out_logprobs[i, :n]]
    j.finish = "stop" if j.tokens and j.tokens[-1] == IM_END_ID else "length"
