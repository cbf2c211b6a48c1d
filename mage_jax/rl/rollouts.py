"""Rollout workers' side of RL: harness episodes -> RLSamples.

`RolloutPolicy` is an `agent.episode.Policy` that sends the harness's rendered
prompt token ids to the rollout engine (`RolloutClient.complete`, token in /
token out), so the learner trains on exactly the ids the engine saw and
sampled, with the engine's log-probs; a prompt with screenshots goes through
the chat route with image parts and records the engine's echoed prompt ids and
the screenshots (GUI / hybrid tasks). It stamps every call with the policy
version of the weights that made it: the engine's per-choice `weight_versions`
where it returns them (vLLM >= 0.33; the oldest span), else the served version
read just before the call, where the call is made (`ServedVersion`: GET
/weight_info from the env host inside a Ray actor too, never a snapshot taken
when the episode was handed out). A sync landing mid-call can only make the
pre-call stamp older, never newer, so the staleness check stays conservative.

A group = one task x N episodes through the harness's slot pool; each policy
call of each episode becomes one `RLSample` (multi-turn: every step is
trained), the episode's reward is the task checker's score. Invalid model
output is the harness's business (a parse error is a step of the budget,
counted in the episode result; its tokens are trained with the episode's
advantage when that is negative and never reinforced: `RLSample.parsed`). What the workload does to its environment is the
policy's outcome: an episode whose sandbox or display it destroyed (status
env_lost) is in the group with its checker score, 0 when the state is
unreadable. Only a harness fault the workload cannot cause (status env_error)
is left out of the group, and counted. A dead or
misbehaving engine raises `RolloutError` out of the group (never a silent
env_error).

`rollout_fn(ctx, task_id, episodes, group_id) -> RolloutGroup` is what the
RL loop calls; `HarnessRollouts` is the harness-backed one, tests pass toys.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Protocol, Sequence
import zlib

import numpy as np

from mage_jax.agent.env import Env
from mage_jax.agent.episode import EpisodeConfig, EpisodeResult, PolicyOutput, PolicyRequest
from mage_jax.agent.policies import prompt_to_messages
from mage_jax.agent.slots import Job, LocalSlotPool, SlotPool
from mage_jax.agent.spray import mean_of as spray_means
from mage_jax.data.images import num_image_tokens
from mage_jax.data.tokenizer import load_tokenizer
from mage_jax.engine.rollout_client import Completion, RolloutClient, RolloutError
from mage_jax.models.config import IMAGE_PAD_ID
from mage_jax.rl import screenshot_pack
from mage_jax.rl.batch import RLSample
from mage_jax.rl.group_queue import GroupQueue
from mage_jax.tasks.package import TaskPackage


def label_version(label: str, where: str) -> int:
  """A weight-version label -> the RL update number it names (the loop labels each sync so)."""
  try:
    return int(label)
  except (TypeError, ValueError):
    raise RolloutError(f"{where}: weight version label {label!r} is not an integer (the RL loop "
                       "labels each weight sync with its update number)") from None


class ServedVersion:
  """`RolloutContext.version` for RL: the version the engine serves, read from the engine (GET
  /weight_info, the label `weight_sync` sets) when called, so in the process that makes the
  model call: the rollout thread with the local pool, the env host inside a Ray actor. A value
  taken when the episode was handed out would stamp a long GUI episode's late calls with the
  weights it started under. `fallback` (the learner's counter) answers where the engine has no
  such route (vLLM < 0.29); a copy shipped to a Ray actor holds its value at hand-out there:
  older or equal to the truth, so the lag check stays conservative."""

  def __init__(self, client: RolloutClient, fallback: Callable[[], int]):
    self.client, self.fallback = client, fallback
    self._no_route = False

  def __call__(self) -> int:
    label = None if self._no_route else self.client.weight_version()
    if label is None:
      self._no_route = True
      return int(self.fallback())
    return label_version(label, f"GET {self.client.root_url}/weight_info")


@dataclasses.dataclass
class RolloutContext:
  """What a rollout worker needs to act: the engine, the served version, sampling knobs."""
  client: RolloutClient
  version: Callable[[], int]          # the policy version the engine serves now (ServedVersion)
  max_tokens: int = 512
  temperature: float = 1.0
  top_p: float = 1.0
  seed: int = 0


@dataclasses.dataclass
class EpisodeSamples:
  episode_id: str
  reward: float
  samples: list[RLSample]             # advantage 0 until the learner assigns group advantages
  parse_errors: int = 0
  spray: dict[str, float] = dataclasses.field(default_factory=dict)  # EpisodeResult.spray
  returned_image_bytes: int = 0       # its screenshots' packed size on the way back (Ray; 0 local)


@dataclasses.dataclass
class RolloutGroup:
  task_id: str
  group_id: str
  episodes: list[EpisodeSamples]
  env_errors: int = 0                 # episodes left out: their environment failed
  deadline_episodes: int = 0          # of those, episodes ended by the per-episode deadline
  dropped_extras: int = 0             # redundant episodes cancelled or dropped once the group was full

  @property
  def rewards(self) -> np.ndarray:
    return np.asarray([e.reward for e in self.episodes], np.float32)

  @property
  def version(self) -> int | None:
    """The oldest policy version among the group's samples (None: no samples)."""
    versions = [s.version for e in self.episodes for s in e.samples]
    return min(versions) if versions else None

  @property
  def num_samples(self) -> int:
    return sum(len(e.samples) for e in self.episodes)


def spray_stats(groups: Sequence[RolloutGroup]) -> dict[str, float]:
  """Mean spray metrics (agent/spray.py) of the groups' episodes: RL drifting toward floods or
  click sprays shows here before it shows as reward."""
  return spray_means([e.spray for g in groups for e in g.episodes])


GROUP_QUEUES = ("shared", "per_worker")


class RolloutFn(Protocol):
  def __call__(self, ctx: RolloutContext, task_id: str, episodes: int, group_id: str) -> RolloutGroup: ...


def call_seed(base: int, episode_id: str, call: int) -> int:
  """A distinct, reproducible sampling seed per (episode, call)."""
  return (base * 1_000_003 + zlib.crc32(episode_id.encode()) * 97 + call) % (2 ** 31)


class RolloutPolicy:
  """Policy over the rollout engine; one instance per episode.

  Text-only prompts go token in / token out (`/v1/completions` with the
  rendered ids). A prompt with screenshots goes to `/v1/chat/completions`: the
  rendered prompt is decoded and split into chat messages with the images as
  base64 image_url parts (agent.policies.prompt_to_messages), and the sample
  records the engine's echoed prompt ids (its chat template applied, each
  image's `<|image_pad|>` run expanded: what it actually sampled under) with the
  screenshots, so the learner recomputes log-probs on exactly that context.
  Records every call as an RLSample (in call order) with the served version.
  """

  def __init__(self, ctx: RolloutContext, task_id: str = "", episode_id: str | None = None):
    self.ctx, self.task_id, self.episode_id = ctx, task_id, episode_id
    self.samples: list[RLSample] = []
    self.error: RolloutError | None = None
    self.returned_image_bytes = 0   # packed screenshots received from another process (Ray)

  # A copy that crosses processes (Ray: the finished episode's policy comes back through the
  # object store) carries its samples' screenshots packed: each distinct one once, as PNG.
  def __getstate__(self) -> dict:
    state = dict(self.__dict__)
    if any(s.images for s in self.samples):
      state["samples"], state["_screenshots"] = screenshot_pack.pack(self.samples)
    return state

  def __setstate__(self, state: dict) -> None:
    packed = state.pop("_screenshots", None)
    self.__dict__.update(state)
    if packed is not None:
      self.samples = screenshot_pack.unpack(self.samples, packed)
      self.returned_image_bytes = packed.nbytes

  def act(self, request: PolicyRequest) -> PolicyOutput:
    self.episode_id = request.episode.id
    prompt = [int(i) for i in request.prompt_tokens]
    images = [np.asarray(im) for im in request.images or []]
    version = self.ctx.version()
    seed = call_seed(self.ctx.seed, request.episode.id, len(self.samples))
    try:
      if images:
        comp, prompt = self._chat(request, prompt, images, seed)
      else:
        comp = self.ctx.client.complete(prompt, max_tokens=self.ctx.max_tokens,
                                        temperature=self.ctx.temperature, top_p=self.ctx.top_p,
                                        seed=seed)
        if comp.prompt_token_ids and list(comp.prompt_token_ids) != prompt:
          raise RolloutError(f"{self.ctx.client.base_url}/completions echoed prompt_token_ids that "
                             f"differ from the {len(prompt)} ids sent (token-in/token-out broken)")
      if comp.finish_reason == "abort":
        raise RolloutError(f"{self.ctx.client.base_url}: the engine aborted the completion "
                           f"(task {self.task_id!r}); a cut-off completion is not the policy's")
      if len(comp.logprobs) != len(comp.token_ids):
        raise RolloutError(f"{self.ctx.client.base_url}: {len(comp.logprobs)} log-probs returned "
                           f"for {len(comp.token_ids)} tokens")
    except RolloutError as e:
      self.error = e
      raise
    if comp.weight_versions:   # the weights that sampled the tokens, exactly: the oldest counts
      version = min(label_version(v, f"{self.ctx.client.base_url} weight_versions")
                    for v, _, _ in comp.weight_versions)
    logprobs = [float(x) for x in comp.logprobs]
    self.samples.append(RLSample(prompt_ids=prompt, completion_ids=list(comp.token_ids),
                                 rollout_logprobs=logprobs, advantage=0.0, version=int(version),
                                 task_id=self.task_id, episode_id=request.episode.id,
                                 images=images or None))
    return PolicyOutput(text=comp.text, prompt_ids=prompt, completion_ids=list(comp.token_ids),
                        logprobs=logprobs, output_tokens=len(comp.token_ids))

  def absorb_remote(self, remote: "RolloutPolicy") -> None:
    """Take over what a copy of this policy recorded in another process (agent/ray_slots.py:
    the episode ran in a Ray actor; its samples and screenshots came back through the object
    store, screenshots packed: rl/screenshot_pack.py). The copy stamped each call on the env
    host, with the version the engine served at that call (ServedVersion), not one taken when
    the job was handed out."""
    self.samples, self.error, self.episode_id = remote.samples, remote.error, remote.episode_id
    self.returned_image_bytes = remote.returned_image_bytes

  def _chat(self, request: PolicyRequest, prompt: list[int], images: list[np.ndarray], seed: int
            ) -> tuple[Completion, list[int]]:
    """One screenshot call through the chat route -> (completion, the engine's prompt ids)."""
    where = f"task {request.task.id!r} step {request.t}"
    text = load_tokenizer("").decode(prompt, skip_special_tokens=False)
    try:
      messages = prompt_to_messages(text, images)
    except ValueError as e:
      raise RolloutError(f"{where}: the rendered prompt does not split into chat messages: {e}") from e
    comp = self.ctx.client.chat(messages, max_tokens=self.ctx.max_tokens,
                                temperature=self.ctx.temperature, top_p=self.ctx.top_p, seed=seed)
    url = f"{self.ctx.client.base_url}/chat/completions"
    engine_prompt = [int(i) for i in comp.prompt_token_ids or []]
    if not engine_prompt:
      raise RolloutError(f"{where}: {url} returned no prompt_token_ids (needs return_token_ids); "
                         "the learner must train on the ids the engine sampled under")
    needed = [num_image_tokens(*im.shape[:2]) for im in images]
    pads = engine_prompt.count(IMAGE_PAD_ID)
    if pads != sum(needed):
      raise RolloutError(
          f"{where}: {url} echoed a prompt with {pads} <|image_pad|> tokens, but the "
          f"{len(images)} screenshot(s) of sizes {[im.shape[:2] for im in images]} need "
          f"{needed} merged tokens (sum {sum(needed)}); the engine resized or dropped an image, "
          "so the learner's patches would not match what was sampled")
    return comp, engine_prompt


def _policy_of(res: EpisodeResult, policies: Sequence[RolloutPolicy]) -> RolloutPolicy | None:
  """The policy that played `res`. EpisodeResult carries no episode id: use the
  trajectory's id when the episode has steps, else match the recorded completions
  (an episode of parse errors only has no trajectory)."""
  if res.episode is not None:
    for p in policies:
      if p.episode_id == res.episode.id:
        return p
  if res.records:
    first = res.records[0].get("completion_ids")
    for p in policies:
      if p.samples and p.samples[0].completion_ids == first and len(p.samples) == len(res.records):
        return p
  return None


def group_from_results(task_id: str, group_id: str, results: Sequence[EpisodeResult],
                       policies: Sequence[RolloutPolicy]) -> RolloutGroup:
  """Episode results of one group -> RolloutGroup; a policy's engine error is raised."""
  for p in policies:
    if p.error is not None:
      raise RolloutError(f"group {group_id} (task {task_id!r}): {p.error}") from p.error
  group = RolloutGroup(task_id, group_id, [])
  used: set[int] = set()
  for res in results:
    if res.status == "env_error":
      group.env_errors += 1
      group.deadline_episodes += res.error_reason == "deadline"
      continue
    p = _policy_of(res, [q for q in policies if id(q) not in used])
    if p is None or not p.samples:
      group.env_errors += 1 if p is None and res.model_calls else 0
      continue
    used.add(id(p))
    if len(res.records) != len(p.samples):
      raise RolloutError(f"group {group_id} (task {task_id!r}): episode {p.episode_id!r} recorded "
                         f"{len(res.records)} calls, its policy {len(p.samples)} samples")
    samples = [dataclasses.replace(s, parsed=not rec.get("parse_error"))
               for s, rec in zip(p.samples, res.records)]
    group.episodes.append(EpisodeSamples(p.episode_id or "", float(res.score), samples,
                                         sum(res.parse_errors.values()), dict(res.spray),
                                         p.returned_image_bytes))
  return group


class HarnessRollouts:
  """rollout_fn over the agent harness.

  `group_queue` "shared" (default): one slot pool for the whole fleet fed by one FIFO of
  episodes (rl/group_queue.py), each group `episodes + redundancy` jobs of which the first
  `episodes` to finish are kept. "per_worker": one pool of `slots_per_worker` slots per
  rollout thread (a pool's slots each own one environment, so two threads must not share a
  pool) that runs its group's episodes and waits for the slowest."""

  def __init__(self, tasks: Sequence[TaskPackage], env_factory: Callable[[], Env],
               episode_cfg: EpisodeConfig, slots_per_worker: int,
               pool_factory: Callable[[], SlotPool] | None = None, *,
               group_queue: str = "per_worker", redundancy: int = 0):
    self.tasks = {t.id: t for t in tasks}
    if len(self.tasks) != len(tasks):
      raise ValueError("HarnessRollouts: duplicate task ids")
    if group_queue not in GROUP_QUEUES:
      raise ValueError(f"group_queue={group_queue!r}: expected one of {GROUP_QUEUES}")
    if redundancy and group_queue != "shared":
      raise ValueError(f"redundancy={redundancy} needs group_queue='shared'")
    self.env_factory, self.episode_cfg = env_factory, episode_cfg
    self.slots_per_worker = max(1, slots_per_worker)
    self.group_queue, self.redundancy = group_queue, int(redundancy)
    # The pool(s) episodes run on; default the local thread pool (config env.backend, make_pool).
    self.pool_factory = pool_factory or (
        lambda: LocalSlotPool(self.env_factory, self.episode_cfg, self.slots_per_worker))
    self._local = threading.local()
    self._pools: list[SlotPool] = []
    self._queue: GroupQueue | None = None
    self._closed = False
    self._lock = threading.Lock()

  def _pool(self) -> SlotPool:
    pool = getattr(self._local, "pool", None)
    if pool is None:
      pool = self.pool_factory()
      self._local.pool = pool
      with self._lock:
        self._pools.append(pool)
    return pool

  def shared_queue(self) -> GroupQueue:
    """The fleet's one queue, its pool built by the first caller (the others wait)."""
    with self._lock:
      if self._closed:
        raise RuntimeError("HarnessRollouts is closed: no new group can start")
      if self._queue is None:
        pool = self.pool_factory()
        self._pools.append(pool)
        self._queue = GroupQueue(pool, self.redundancy)
      return self._queue

  @property
  def dropped_extras(self) -> int:
    return self._queue.dropped_extras if self._queue is not None else 0

  def __call__(self, ctx: RolloutContext, task_id: str, episodes: int, group_id: str) -> RolloutGroup:
    if task_id not in self.tasks:
      raise KeyError(f"HarnessRollouts: unknown task id {task_id!r}")
    task = self.tasks[task_id]
    shared = self.group_queue == "shared"
    ids = [f"{group_id}-e{i}" for i in range(episodes + (self.redundancy if shared else 0))]
    policies = [RolloutPolicy(ctx, task_id, i) for i in ids]
    jobs = [Job(task, p, i) for i, p in zip(ids, policies)]
    if not shared:
      results = list(self._pool().run(jobs))
      return group_from_results(task_id, group_id, results, policies)
    results = self.shared_queue().run_group(jobs, keep=episodes)
    reported = {r.episode_id for r in results}
    group = group_from_results(task_id, group_id, results,
                               [p for p, i in zip(policies, ids) if i in reported])
    group.dropped_extras = len(ids) - len(reported)
    return group

  def close(self) -> None:
    with self._lock:
      self._closed = True
      if self._queue is not None:
        self._queue.close()
        self._queue = None
      for pool in self._pools:
        pool.close()
      self._pools.clear()
