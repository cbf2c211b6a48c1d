"""Continuous batching and vLLM's pause semantics for the embedded rollout server.

Requests are admitted (or held, or refused, while paused) and queued; one worker thread
owns a `SlotEngine`: a fixed-shape KV cache of slots (models/slot_decode.py). Between decode
calls the worker moves queued requests into free slots (one prefill per request, with or
without images, its shape independent of the others), then runs `STEPS` decode steps for every slot and hands the
tokens out; a request that hit EOS or max_tokens leaves and its slot is reused. So a request
never waits for a longer one to finish, and the device runs one batch of every live request.
Each row has its own key (fold_in(key(seed), i) for its token i), temperature, top_p and
greedy flag, so a request samples the same tokens alone or in a batch. Slot rows, prompt
lengths and the cache length are padded to buckets (`length_bucket`), so a server compiles a
handful of shapes. A request stays on the weights it was admitted with: after a reload the
worker admits nothing until the slots on the old weights have drained.

Pause modes, as vLLM's POST /pause?mode= (vllm/entrypoints/rl/online/api_router.py):
  wait   in-flight requests (running or queued) finish; pause returns once none is left;
  keep   queued requests are frozen and run after /resume (with the weights live then);
         running requests finish first (their slots drain; nothing new is admitted);
  abort  queued requests come back at once with finish_reason "abort" and no tokens;
         running requests finish (vLLM would cut them short).
While paused, new requests wait for /resume (vLLM <= 0.32) or are refused with
`Paused` (HTTP 503 "Generation is paused", vLLM >= 0.33), per `reject_while_paused`.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from mage_jax.engine import prefix_cache
from mage_jax.models import slot_decode
from mage_jax.models import vocab_serving
from mage_jax.models.config import IM_END_ID
from mage_jax.models.config import PAD_ID

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


def length_bucket(n: int, minimum: int) -> int:
  """A prompt's padded length, or a pool's cache length: powers of two up to 512, then multiples
  of 256. Each value is a compile (prefill per prompt length, decode per pool shape), so they are
  few; pure powers of two padded the proof's 666-1,095-token prompts to 1,024 and 2,048 and its
  pools to 2,048 and 4,096 slots, and prefill and decode attention paid for every padded slot."""
  n = max(n, minimum)
  return bucket(n, minimum) if n <= 512 else -(-n // 256) * 256


def pool_rows(n: int) -> int:
  """Pool rows for n live requests: 1, 8, 32, then powers of two. Few tiers, because every
  (rows, length) shape is a compile of the decode step and every pair of shapes a compile of
  the grow copy (seconds each on a busy machine, paid inside the request that grew the pool);
  8 rows cost ~3x one on CPU (the LM head), so 2-8 live requests share the 8-row shape."""
  return next((t for t in (1, 8, 32) if n <= t), bucket(n, 1))


STEPS = 4   # decode steps per device call: one host round trip (dispatch, fetch) per 4 tokens


class GenerateBatcher:
  """`snapshot()` -> (policy, weight label), read under the lock when requests are admitted."""

  def __init__(self, snapshot: Callable[[], tuple[Any, str]], *, max_batch: int = 32,
               reject_while_paused: bool = False):
    self.snapshot, self.max_batch, self.reject_while_paused = snapshot, max_batch, reject_while_paused
    self.cond = threading.Condition()
    self.queue: collections.deque[Job] = collections.deque()
    self.paused = self.frozen = self.running = self.stopped = self.reset_prefix = False
    self.inflight = 0              # admitted and not finished (queued or running)
    # live requests per decode call (and per prefill call that finished every row it admitted)
    self.batch_sizes: collections.Counter[int] = collections.Counter()
    self.engine = SlotEngine(max_batch)
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

  def reset_prefix_cache(self) -> bool:
    """Drop the rows kept for prefix reuse before the next admission (the worker owns them)."""
    with self.cond:
      self.reset_prefix = True
      self.cond.notify_all()
    return True

  def stop(self) -> None:
    with self.cond:
      self.stopped = True
      self.paused = self.frozen = False
      for job in self.queue:
        job.error = RuntimeError("the rollout server stopped before this request ran")
        job.done.set()
      self.queue.clear()
      self.cond.notify_all()

  def _admit(self) -> list[Job]:
    """Queued jobs for the free slots, FIFO (under the lock). Nothing while frozen, nor while
    slots still run on weights that a reload has replaced."""
    policy, label = self.snapshot()
    engine = self.engine
    if self.frozen or (engine.active and policy is not engine.policy):
      return []
    engine.use(policy, label)
    jobs = []
    while self.queue and len(jobs) < engine.capacity - engine.active:
      jobs.append(self.queue.popleft())
    return jobs

  def _work(self) -> None:
    engine = self.engine
    while True:
      with self.cond:
        self.cond.wait_for(lambda: self.stopped or engine.active or (self.queue and not self.frozen))
        if self.stopped:
          # Requests still generating are answered (an error, HTTP 500 from the server) rather
          # than left waiting: their clients would otherwise sit out the whole request timeout.
          failed = engine.fail(RuntimeError("the rollout server stopped before this request finished"))
          self.inflight -= len(failed)
          for job in failed:
            job.done.set()
          self.cond.notify_all()
          return
        if self.reset_prefix:
          engine.prefix.clear()
          self.reset_prefix = False
        jobs = self._admit()
        self.running = True
      try:
        finished = engine.admit(jobs)
        if engine.active:
          self.batch_sizes[engine.active] += 1
          finished += engine.step()
      except BaseException as e:  # noqa: BLE001 - handed to each waiting request
        finished = engine.fail(e, also=jobs)
      with self.cond:
        self.running = bool(engine.active)
        self.inflight -= len(finished)
        for job in finished:
          job.done.set()
        self.cond.notify_all()


class SlotEngine:
  """Host side of continuous batching: which job sits in which slot of the KV-cache pool,
  and each row's state (`slot_decode.Rows`); the math is in `models.slot_decode`."""

  def __init__(self, capacity: int, *, eos_id: int | None = None, steps: int = STEPS,
               prefix_cache_bytes: int = prefix_cache.DEFAULT_BUDGET_BYTES):
    self.capacity, self.steps = capacity, steps
    self.eos_id = IM_END_ID if eos_id is None else eos_id
    self.policy, self.label, self.split, self.table, self.race = None, "", None, None, None
    self.model = None                     # what decodes: the policy's model, or it on its distinct rows
    self.pool = None                      # KVCache [rows, max_len], index [rows]; slot i = position i
    self.slots: dict[int, Job] = {}       # slot -> the job generating there
    self.held: dict[int, np.ndarray] = {}  # slot -> its prompt's cache keys (then its job's tokens[:-1])
    self.need: dict[int, int] = {}        # slot -> the pool length its job needs
    self.rows = self._host_rows(0)
    # rows of finished requests kept for later prompts that start the same way (0 bytes: no reuse)
    self.prefix = prefix_cache.PrefixCache(prefix_cache_bytes)
    self.image_token_id, self.merge_group = None, 4

  @property
  def active(self) -> int:
    return len(self.slots)

  def use(self, policy, label: str) -> None:
    """The weights (and label) for jobs admitted from now on; callers drain slots first."""
    if policy is not self.policy:
      self.model, self.table = vocab_serving.serving_model(policy.model)
      self.race = vocab_serving.row_race(self.table)      # the sampler's view of the rows
      self.policy, self.split = policy, slot_decode.split(self.model)
      self.prefix.clear()                 # kept rows hold the old weights' keys and values
      cfg = policy.model.cfg
      self.image_token_id = getattr(cfg, "image_token_id", None)
      if hasattr(cfg, "vision"):
        self.merge_group = cfg.vision.spatial_merge_size ** 2
    self.label = label

  @staticmethod
  def _host_rows(n: int) -> dict[str, np.ndarray]:
    return {"token": np.zeros(n, np.int32), "position": np.zeros(n, np.int32),
            "count": np.zeros(n, np.int32), "seed": np.zeros(n, np.uint32),
            "temperature": np.ones(n, np.float32), "top_p": np.ones(n, np.float32),
            "greedy": np.zeros(n, bool)}

  # ---- pool layout -------------------------------------------------------------------------------
  def _layout(self, rows: int, max_len: int) -> None:
    """Make the pool rows x max_len: a fresh one when no slot is live, else a grown copy."""
    if self.pool is None or not self.slots:
      if self.pool is None or self.pool.segment_ids.shape != (rows, max_len):
        self.pool = slot_decode.init_pool(self.model, rows, max_len)
      self.slots, self.held, self.need, self.rows = {}, {}, {}, self._host_rows(rows)
      return
    source = np.arange(rows, dtype=np.int32)    # grows only: slot i stays slot i
    source[source >= self.pool.segment_ids.shape[0]] = -1
    self.pool = slot_decode.relayout(self.pool, jnp.asarray(source), rows=rows, max_len=max_len)
    new_rows = self._host_rows(rows)
    slots = {}
    for new, src in enumerate(source):
      if src >= 0:
        for name, values in self.rows.items():
          new_rows[name][new] = values[src]
        if src in self.slots:
          slots[new] = self.slots[src]
    self.slots, self.rows = slots, new_rows

  @staticmethod
  def _need(job: Job, match: prefix_cache.Match) -> int:
    """Cache slots the job's row needs: its padded prompt (or the padded rest after a reused
    prefix), then a slot per token from the prompt's end (slot i = position i)."""
    n = len(job.prompt)
    if not match.shared:
      return max(length_bucket(n, 16), n + job.max_tokens)
    kept = match.stored.length if match.stored is not None else 0
    return max(match.shared + length_bucket(n - match.shared, 64), n + job.max_tokens, kept)

  def _held_keys(self, slot: int) -> np.ndarray:
    """What the live row in `slot` holds: its prompt, then every sampled token but the last."""
    tokens = self.slots[slot].tokens[:-1]
    return np.concatenate([self.held[slot], np.asarray(tokens, np.int64)]) if tokens else self.held[slot]

  # ---- admission: prefill into free slots --------------------------------------------------------
  def admit(self, jobs: list[Job]) -> list[Job]:
    """Prefill the jobs into free slots (each reusing the longest prefix a live or kept row holds);
    -> the jobs already finished (max_tokens 1, EOS)."""
    if not jobs:
      return []
    rows = min(pool_rows(self.active + len(jobs)), max(self.capacity, self.active + len(jobs)))
    fresh = self.pool is None or not self.slots
    total = rows if fresh else max(rows, self.pool.segment_ids.shape[0])
    free = [s for s in range(total) if s not in self.slots]
    live = {} if fresh else {s: self._held_keys(s) for s in self.slots}
    plans = []
    for job, slot in zip(jobs, free):
      prompt = prefix_cache.prompt_keys(job.prompt, job.vision, self.image_token_id, self.merge_group)
      match = self.prefix.match(prompt, live)
      plans.append((job, slot, prompt, match))
      live[slot] = prompt.keys   # a later job of this batch may share it (its prompt is in the row)
    needs = [self._need(job, match) for job, _, _, match in plans]
    max_len = length_bucket(max([*needs, *self.need.values()]), 64)
    if fresh:
      self._layout(rows, max_len)
    else:
      have_rows, have_len = self.pool.segment_ids.shape
      if rows > have_rows or max_len > have_len:
        self._layout(max(rows, have_rows), max(max_len, have_len))
    finished = []
    for (job, slot, prompt, match), need in zip(plans, needs):   # one prefill per request
      self.need[slot] = need
      if self._prefill(job, slot, prompt, match):
        finished.append(job)
    return finished

  def _prefill(self, job: Job, slot: int, prompt: prefix_cache.Prompt, match: prefix_cache.Match) -> bool:
    """Prefill `job` into `slot`, the whole prompt or the rest after `match.shared` reused
    positions (copied from a live slot or a kept row); True when it is already finished. The
    shape of a prefill never depends on who else came."""
    n, m = len(job.prompt), match.shared
    # the rest after a reused prefix is padded to at least 64: each length is a compile of extend_slot
    tokens = np.full((1, length_bucket(n - m, 64 if m else 16)), PAD_ID, np.int32)
    tokens[0, :n - m] = job.prompt[m:]
    vision = prefix_cache.suffix_vision(job.vision, prompt, m) if m else job.vision
    if vision.get("patch_image_ids") is not None:
      validate = getattr(self.policy.model, "validate_inputs", None)
      if validate is not None:   # inside jit a token/image count mismatch can't raise
        validate(tokens, **vision)
      vision = {k: jnp.asarray(v) for k, v in vision.items()}
    params = {"seed": job.seed, "temperature": max(job.temperature, 1e-6), "top_p": job.top_p,
              "greedy": job.greedy}
    for name, value in params.items():
      self.rows[name][slot] = value
    model_def, leaves = self.split
    row_params = [jnp.asarray(self.rows[name][slot:slot + 1]) for name in params]
    length = jnp.asarray([n - m], jnp.int32)
    if not m:
      token, logp, row = slot_decode.prefill_row(model_def, leaves, self.table, jnp.asarray(tokens), length,
                                                 *row_params, vision, self.race)
      self.pool = slot_decode.insert_row(self.pool, row, jnp.int32(slot))
    else:
      if match.stored is not None:
        self.pool = slot_decode.insert_row(self.pool, match.stored.row, jnp.int32(slot))
      else:
        self.pool = slot_decode.copy_row(self.pool, jnp.int32(match.slot), jnp.int32(slot))
      embeds = slot_decode.embed_tokens(model_def, leaves, self.table, jnp.asarray(tokens), vision)
      logits, self.pool = slot_decode.extend_slot(model_def, leaves, self.pool, jnp.int32(slot), embeds, length,
                                                  jnp.int32(m))
      token, logp = slot_decode.first_token(self.table, logits, *row_params, self.race)
    self.prefix.count(n, m)
    job.label = self.label
    token, logp = int(np.asarray(token)[0]), float(np.asarray(logp)[0])
    self.rows["token"][slot], self.rows["position"][slot], self.rows["count"][slot] = (token, n, 1)
    self.slots[slot], self.held[slot] = job, prompt.keys
    if self._emit(job, token, logp):
      self._leave(slot)
      return True
    return False

  def _leave(self, slot: int) -> None:
    """A finished job leaves its slot; its row is kept for later prompts that share its prefix."""
    keys = self._held_keys(slot)
    if self.prefix.wants(keys):
      length = min(self.pool.segment_ids.shape[1], length_bucket(len(keys), 64))
      self.prefix.keep(keys, slot_decode.take_row(self.pool, jnp.int32(slot), length=length))
    del self.slots[slot], self.held[slot], self.need[slot]

  def _emit(self, job: Job, token: int, logp: float) -> bool:
    """Append one token; True when the job is finished."""
    job.tokens.append(token)
    job.logprobs.append(logp)
    if token == self.eos_id:
      job.finish = "stop"
    elif len(job.tokens) >= job.max_tokens:
      job.finish = "length"
    return bool(job.finish)

  # ---- decode ------------------------------------------------------------------------------------
  def step(self) -> list[Job]:
    """`steps` decode steps for every slot; -> the jobs that finished."""
    rows = slot_decode.Rows(**{k: jnp.asarray(v) for k, v in self.rows.items()})
    model_def, leaves = self.split
    tokens, logps, self.pool = slot_decode.decode_slots(model_def, leaves, self.table, self.pool, rows,
                                                         steps=self.steps, race=self.race)
    tokens, logps = np.asarray(tokens), np.asarray(logps)     # one fetch per call
    self.rows["position"] += self.steps
    self.rows["count"] += self.steps
    self.rows["token"] = tokens[-1].copy()
    finished = []
    for slot, job in list(self.slots.items()):
      for i in range(self.steps):
        if self._emit(job, int(tokens[i, slot]), float(logps[i, slot])):
          self._leave(slot)
          finished.append(job)
          break
    # No shrinking while slots are live (each new pool shape is a compile, seconds on a busy
    # machine); an emptied pool is re-made at the size of the next arrivals (`admit`).
    return finished

  def fail(self, error: BaseException, also: list[Job] = ()) -> list[Job]:
    """Every job in a slot (and `also`) gets `error`; the pool is dropped. -> those jobs."""
    jobs = list(dict.fromkeys([*self.slots.values(), *also]))
    for job in jobs:
      job.error = error
    self.slots, self.held, self.need, self.pool = {}, {}, {}, None
    self.prefix.clear()
    return jobs


def run_alone(policy, job: Job, *, eos_id: int | None = None, steps: int = STEPS) -> Job:
  """Run one job to its end on a fresh engine (what the job gets with no other request)."""
  engine = SlotEngine(1, eos_id=eos_id, steps=steps)
  engine.use(policy, "")
  finished = engine.admit([job])
  while not finished:
    finished = engine.step()
  return job
