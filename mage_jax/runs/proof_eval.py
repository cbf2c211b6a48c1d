"""Held-out evaluation for the learning proof, through RL's episode runner.

Every held-out instance is played once per mode by `rl.rollouts.RolloutPolicy` (the policy RL's
rollout workers use: prompt ids to the engine's completion route, screenshots through its chat
route) in a slot pool (`agent.slots`, `agent.episode.run_episode`), against one rollout engine:

  t1      temperature 1 (what RL samples), one episode per instance
  greedy  temperature 0, one episode per instance
  blind   temperature 1 with every screenshot replaced by a blank (black) image of the same
          size, on the instances whose prompts carry screenshots (GUI / hybrid): what the policy
          earns without looking

`summarize` turns the per-episode outcomes into success with a 95% Wilson interval overall, per
template and per kind, model calls per task and per solved task, output tokens per task, the
invalid-call rate (parse errors / model calls) and the GUI / terminal channel share.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from mage_jax.agent.episode import EpisodeResult, PolicyOutput, PolicyRequest
from mage_jax.agent.slots import Job, SlotPool
from mage_jax.agent.success_stats import wilson_interval
from mage_jax.tasks.package import TaskPackage
from mage_jax.rl.rollouts import RolloutContext, RolloutPolicy

MODES = ("t1", "greedy", "blind")
SCREEN_KINDS = ("gui", "hybrid")


class BlindPolicy(RolloutPolicy):
  """RolloutPolicy that sees a blank image in place of every screenshot (same size, so the
  prompt's image-token count and everything else are unchanged)."""

  def act(self, request: PolicyRequest) -> PolicyOutput:
    blank = [np.zeros_like(np.asarray(im)) for im in request.images or []]
    return super().act(PolicyRequest(request.task, request.t, request.episode, request.prompt_tokens,
                                     blank, request.resolve))


def episode_row(mode: str, template: str, res: EpisodeResult) -> dict[str, Any]:
  """One episode's outcome in the form `summarize` and results.json use."""
  return {"mode": mode, "task_id": res.task_id, "template": template, "kind": res.kind,
          "status": res.status, "success": bool(res.success), "score": float(res.score),
          "model_calls": res.model_calls, "output_tokens": res.output_tokens,
          "invalid_calls": int(sum(res.parse_errors.values())),
          "gui_actions": res.gui_actions, "terminal_actions": res.terminal_actions,
          "env_error": res.status == "env_error", "error": (res.error or "")[:200],
          # why calls were invalid, and the first invalid response as produced (for diagnosis)
          "parse_errors": dict(res.parse_errors),
          "first_invalid": next((r.get("response") or r.get("raw") or "" for r in res.records
                                 if r.get("parse_error")), "")[:300],
          # each call's Action line and tool call (the response's tail): what the policy did
          "calls": [(r.get("response") or r.get("raw") or "")[-200:] for r in res.records]}


def run_heldout(tasks: Sequence[TaskPackage], template_of: Callable[[TaskPackage], str],
                ctx_for: Callable[[str], RolloutContext], pool: SlotPool,
                modes: Iterable[str] = MODES, on_result: Callable[[dict], None] | None = None,
                done: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
  """Play each task once per mode; returns episode rows (order: mode, then task order).
  `ctx_for(mode)` gives the engine context (temperature 1 for t1/blind, 0 for greedy).
  Every mode's episodes go to the pool as one queue (mode by mode), so the slots and the
  engine's batch stay full across a mode boundary instead of draining between modes.
  `done` (episode_key -> row) holds rows an interrupted run already played: those episodes are
  not replayed (an episode's sampling seed depends only on its id, so a replay would be the
  same episode) and their rows are returned in place."""
  done = done or {}
  jobs, meta = [], {}
  for mode in modes:
    if mode not in MODES:
      raise ValueError(f"unknown evaluation mode {mode!r}; expected one of {MODES}")
    todo = [t for t in tasks if mode != "blind" or t.kind in SCREEN_KINDS]
    if not todo:
      continue
    ctx = ctx_for(mode)
    cls = BlindPolicy if mode == "blind" else RolloutPolicy
    for t in todo:
      key = episode_key(mode, t.id)
      if key in meta:
        raise ValueError(f"run_heldout: two held-out tasks have the id {t.id!r}; the pairs would not be whole")
      meta[key] = (mode, t)
      if key not in done:
        jobs.append(Job(t, cls(ctx, t.id, key), key))
  by_key = {k: done[k] for k in meta if k in done}
  for res in pool.run(jobs):   # results come back by episode id (= job key), in any order
    mode, task = meta[res.episode_id]
    by_key[res.episode_id] = row = episode_row(mode, template_of(task), res)
    if on_result:
      on_result(row)
  return [by_key[k] for k in meta if k in by_key]


def episode_key(mode: str, task_id: str) -> str:
  """The job key and episode id of one held-out episode (also a row's key in `done`)."""
  return f"{mode}-{task_id}"


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
  scored = [r for r in rows if not r["env_error"]]
  n, k = len(scored), sum(r["success"] for r in scored)
  lo, hi = wilson_interval(k, n)
  calls = sum(r["model_calls"] for r in scored)
  solved = [r for r in scored if r["success"]]
  gui, term = sum(r["gui_actions"] for r in scored), sum(r["terminal_actions"] for r in scored)
  return {"episodes": len(rows), "env_errors": len(rows) - n, "solved": k,
          "success": k / n if n else 0.0, "success_lo": lo, "success_hi": hi,
          "mean_score": sum(r["score"] for r in scored) / max(1, n),
          "calls_per_task": calls / max(1, n),
          "calls_per_solved_task": (sum(r["model_calls"] for r in solved) / len(solved)) if solved else None,
          "output_tokens_per_task": sum(r["output_tokens"] for r in scored) / max(1, n),
          "invalid_call_rate": sum(r["invalid_calls"] for r in scored) / max(1, calls),
          "gui_share": gui / max(1, gui + term), "terminal_share": term / max(1, gui + term)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
  """{mode: {"all": stats, "kind": {kind: stats}, "template": {name: stats}}}."""
  out = {}
  for mode in MODES:
    mine = [r for r in rows if r["mode"] == mode]
    if not mine:
      continue
    groups = {"kind": collections.defaultdict(list), "template": collections.defaultdict(list)}
    for r in mine:
      groups["kind"][r["kind"]].append(r)
      groups["template"][r["template"]].append(r)
    out[mode] = {"all": _stats(mine), **{g: {name: _stats(rs) for name, rs in sorted(d.items())}
                                         for g, d in groups.items()}}
  return out


def outcomes(rows: list[dict[str, Any]], mode: str) -> dict[str, int]:
  """task id -> 0/1 success for one mode (env errors count as failures: the pairs stay whole)."""
  return {r["task_id"]: int(r["success"]) for r in rows if r["mode"] == mode}
