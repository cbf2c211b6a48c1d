"""The episode loop: observation -> prompt (data.render) -> policy -> parse -> execute, until
terminate or the step budget.

Every episode becomes a `data.trajectory.Episode` (so rollouts are SFT data)
plus per-step records (exact prompt/completion token ids and sampled-token
log-probs when the policy returns them) and per-episode counters.

An invalid response (see `parsing`) is not a trajectory step: it consumes a
step of the budget, is kept verbatim in the step records, and the policy sees
the parse error prepended to its next observation.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import time
from typing import Any, Callable, Protocol

import numpy as np

from mage_jax.actions import parsing
from mage_jax.actions import schema as tools
from mage_jax.agent.env import Env, Observation
from mage_jax.agent.spray import SprayCounter
from mage_jax.tasks.package import TaskPackage
from mage_jax.data import prompts
from mage_jax.data import render as render_lib
from mage_jax.data import trajectory as tr


@dataclasses.dataclass
class PolicyRequest:
  task: TaskPackage
  t: int                                   # 1-based step
  episode: tr.Episode                      # history; steps[t-1] holds o_t and no response yet
                                           # (think/action "", tool_call None)
  prompt_tokens: np.ndarray | None         # rendered prompt ending with "<|im_start|>assistant\n"
  images: list[np.ndarray]                 # the prompt's screenshots, smart-resized, in order
  resolve: Callable[[dict[str, Any]], dict[str, Any]]  # env.resolve ('@app.widget' refs)
  harness: Any = None                      # the teacher harness variant the episode runs under (its
                                           # prompt, tools and libraries are in the rendered prompt;
                                           # a scripted stand-in teacher reads them here)


@dataclasses.dataclass
class PolicyOutput:
  text: str                                # the assistant turn (three parts)
  prompt_ids: list[int] | None = None
  completion_ids: list[int] | None = None
  logprobs: list[float] | None = None
  output_tokens: int | None = None
  prompt_tokens: int | None = None         # the endpoint's usage count (None: the rendered prompt's length)
  dollars: float | None = None             # the endpoint's reply priced by its client (None: not priced)


class Policy(Protocol):
  def act(self, request: PolicyRequest) -> PolicyOutput: ...


@dataclasses.dataclass
class EpisodeConfig:
  max_steps: int = 50
  full_responses: int = 4
  visual_turns: int = 3
  context_len: int = 32_768
  out_dir: str = "/tmp/mage_episodes"      # screenshots go to <out_dir>/<episode id>/
  score_settle: float = 0.3                # seconds between the last action and the checker: apps
                                           # handle the final click (e.g. Save) on their own schedule
                                           # (tasks without a desktop get none, as in the gates)
  toolset: str = "hybrid"                  # schema.TOOLSETS: "hybrid" (computer_use + bash) or "gui"
                                           # (computer_use only: the channel ablation's GUI-only agent)
  harness: Any = None                      # a harness.HarnessVariant (teacher harness: its system
                                           # prompt, tools incl. extra ones, parse and execute); set
                                           # by HarnessVariant.episode_config, None = the student's
  deadline_s: float = 0.0                  # > 0: an episode still running after this many seconds
                                           # ends at its next policy call (EpisodeDeadline; the slot
                                           # pool reports env_error, error_reason "deadline")

  def __post_init__(self):
    if self.toolset not in tools.TOOLSETS:
      raise ValueError(f"episode.toolset={self.toolset!r}: expected one of {sorted(tools.TOOLSETS)}")


@dataclasses.dataclass
class EpisodeResult:
  task_id: str
  kind: str
  episode: tr.Episode | None
  score: float = 0.0
  status: str = "budget"                   # terminated | budget | env_lost | env_error (see run_episode)
  steps: int = 0
  model_calls: int = 0
  output_tokens: int = 0
  prompt_tokens: int = 0                   # per call: the endpoint's usage, else the rendered prompt's length
  dollars: float = 0.0                     # replies priced by the policy's client (0 for local policies)
  priced_calls: int = 0                    # model calls whose reply carried a price
  gui_actions: int = 0
  terminal_actions: int = 0
  parse_errors: dict[str, int] = dataclasses.field(default_factory=dict)
  spray: dict[str, float] = dataclasses.field(default_factory=dict)  # SprayCounter.summary
  wall_time: float = 0.0
  error: str | None = None
  records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
  episode_id: str = ""                     # names the trajectory, its screenshots and its step records
  skills: list[str] = dataclasses.field(default_factory=list)  # the task's skill ids (per-skill reports)
  harness: str = ""                        # the harness variant's id ("" = no variant)
  extra_actions: int = 0                   # calls to a variant's extra tools (neither gui nor terminal)
  error_reason: str = ""                   # env_error cause the pools name: "deadline", "slot_lost"

  @property
  def success(self) -> bool:
    return self.status != "env_error" and self.score >= 1.0

  def summary(self) -> dict[str, Any]:
    d = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("episode", "records")}
    d["success"] = self.success
    return d


class EpisodeDeadline(Exception):
  """The episode ran past EpisodeConfig.deadline_s (raised before the next policy call)."""


_RENDERERS: dict[tuple, render_lib.Renderer] = {}


def renderer_for(cfg: EpisodeConfig) -> render_lib.Renderer:
  """The data path's renderer with one fixed system prompt (no decoupling at inference)."""
  system = (cfg.harness.system_prompt,) if cfg.harness is not None else prompts.SYSTEM_PROMPTS
  key = (cfg.full_responses, cfg.visual_turns, cfg.context_len, system)
  if key not in _RENDERERS:
    _RENDERERS[key] = render_lib.Renderer(render_lib.RenderConfig(
        full_responses=cfg.full_responses, visual_turns=cfg.visual_turns, context_len=cfg.context_len,
        prompt_variants=False, train_all_turns=False, mask_think_body=False, system_prompts=system))
  return _RENDERERS[key]


def render_prompt(renderer: render_lib.Renderer, ep: tr.Episode, t: int) -> tuple[np.ndarray, list[np.ndarray]]:
  """Prompt tokens + images for step t (the data path's context window, `Renderer.render_prompt`)."""
  return renderer.render_prompt(ep, t)


def _save_observation(obs: Observation, directory: str, t: int, prefix: str | None) -> tr.Observation:
  shot = None
  if obs.screenshot is not None:
    os.makedirs(directory, exist_ok=True)
    shot = os.path.join(directory, f"o{t:03d}.png")
    obs.screenshot.save(shot)
  text = obs.text
  if prefix:
    text = prefix + ("\n" + text if text else "")
  return tr.Observation(screenshot=shot, text=text)


def run_episode(env: Env, task: TaskPackage, policy: Policy, cfg: EpisodeConfig,
                episode_id: str | None = None, first_observation: Observation | None = None) -> EpisodeResult:
  """One episode. Env exceptions propagate (the slot pool reports them as env errors).

  Statuses: `terminated` (the policy called terminate), `budget` (steps ran out), `env_lost` (the
  workload destroyed its environment, e.g. `kill -9 -1`: the episode ends there and the checker
  scores the state as it stands, 0 if unreadable; the policy's outcome like any other), and
  `env_error` (set by the slot pool: an exception the workload can't cause, not scored).

  `first_observation`: the env was already reset for `task` (e.g. by the gates) and this is
  o_1; otherwise the episode starts with `env.reset(task)`.
  """
  start = time.monotonic()
  episode_id = episode_id or f"{task.id}-{int(time.time() * 1000)}"
  # Observations store paths under out_dir and the episode resolves them against its root, so the
  # root must be absolute: a relative one resolved twice ('missing_image: o_1' on every GUI step).
  out_dir = os.path.abspath(cfg.out_dir)
  shot_dir = os.path.join(out_dir, episode_id)
  renderer = renderer_for(cfg)
  harness = cfg.harness
  res = EpisodeResult(task.id, task.kind, None, episode_id=episode_id, skills=list(task.skills),
                      harness=harness.variant_id if harness is not None else "")
  errors: collections.Counter = collections.Counter()
  spray = SprayCounter()
  max_steps = min(cfg.max_steps, task.max_steps or cfg.max_steps)

  obs = first_observation if first_observation is not None else env.reset(task)
  current = _save_observation(obs, shot_dir, 1, None)
  steps: list[tr.Step] = []
  offered = harness.schemas() if harness is not None else tools.toolset_schemas(cfg.toolset)
  screen = (obs.screenshot.width, obs.screenshot.height) if obs.screenshot is not None else None
  for t in range(1, max_steps + 1):
    if cfg.deadline_s > 0 and time.monotonic() - start > cfg.deadline_s:
      raise EpisodeDeadline(f"episode {episode_id} ran {time.monotonic() - start:.1f} s, past "
                            f"deadline_s={cfg.deadline_s:g}, before call {t}")
    n = len(steps) + 1  # trajectory step index (invalid turns are not steps)
    ep = tr.Episode(id=episode_id, instruction=task.instruction,
                    steps=steps + [tr.Step(current, "", "", None)], screen_size=screen,
                    source="rollout", root=out_dir, tools=offered)
    prompt, images = render_prompt(renderer, ep, n)
    out = policy.act(PolicyRequest(task, n, ep, prompt, images, env.resolve, harness))
    res.model_calls += 1
    res.prompt_tokens += out.prompt_tokens if out.prompt_tokens is not None else int(len(prompt))
    if out.dollars is not None:
      res.dollars += out.dollars
      res.priced_calls += 1
    out_tokens = out.output_tokens
    if out_tokens is None:
      out_tokens = len(out.completion_ids) if out.completion_ids is not None else len(renderer.tok.encode(out.text))
    res.output_tokens += out_tokens
    parsed = harness.parse(out.text) if harness is not None else parsing.parse_for_toolset(out.text, cfg.toolset)
    res.records.append({"t": t, "step": n, "prompt_tokens": int(len(prompt)), "images": len(images),
                        "prompt_ids": out.prompt_ids, "completion_ids": out.completion_ids,
                        "logprobs": out.logprobs, "output_tokens": out_tokens,
                        "parse_error": parsed.error_kind,
                        "raw": out.text if not parsed.ok else None,
                        # for the episode viewer (launch.report): which episode, and the text as produced
                        "episode_id": episode_id, "response": out.text})
    if not parsed.ok:
      errors[parsed.error_kind] += 1
      current = tr.Observation(current.screenshot, parsed.error_observation()
                               + ("\n" + current.text if current.text else ""))
      continue
    channel = harness.channel_of(parsed.name) if harness is not None else parsing.channel_of(parsed.name)
    if channel == "gui":
      if parsed.arguments.get("action") != "terminate":
        res.gui_actions += 1
    elif channel == "terminal":
      res.terminal_actions += 1
    else:
      res.extra_actions += 1
    steps.append(tr.Step(current, parsed.think, parsed.summary, tr.ToolCall(parsed.name, parsed.arguments)))
    obs = (harness.execute(env, parsed.name, parsed.arguments) if harness is not None
           else env.step(parsed.name, parsed.arguments))
    res.records[-1].update(spray.observe(parsed.name, parsed.arguments, obs.text))
    if obs.env_lost:
      res.status, res.error = "env_lost", obs.env_lost
      break
    if obs.done:
      res.status = "terminated"
      break
    current = _save_observation(obs, shot_dir, len(steps) + 1, None)
  res.steps = len(steps)
  if steps and task.needs_desktop:  # no desktop, no apps: the shell commands have returned, files written
    time.sleep(cfg.score_settle)
  res.score = env.score()
  res.parse_errors = dict(errors)
  res.spray = spray.summary(len(steps))
  res.wall_time = time.monotonic() - start
  if steps:
    res.episode = tr.Episode(id=episode_id, instruction=task.instruction, steps=steps, screen_size=screen,
                             source="rollout", outcome="success" if res.score >= 1 else "failure",
                             reward=res.score, root=out_dir, tools=offered,
                             meta={"task_id": task.id, "kind": task.kind, "status": res.status,
                                   "toolset": cfg.toolset, "skills": list(task.skills),
                                   **({"harness": res.harness} if harness is not None else {})})
  return res
