"""Teacher trajectory collection: keep checker-score-1 episodes in the student's schema, count the rest.

An episode is kept only if its checker scored 1 and every step is a call in the student's fixed
schema (schema.TOOLSETS[toolset]). A success that used a variant's extra tool is rejected
(`extra_tool`, its extra steps counted): dropping those steps would leave later observations
that the remaining actions don't explain. A kept trajectory's `tools` are the student's
schemas (never the variant's descriptions), so the student's system turn stays byte-identical
to DESIGN.md's; the variant's id, the task and its skills go into `meta`.

Resumable: <workdir>/collect_state.jsonl gets one line per finished job (written after its
trajectory line), so a restarted run skips those jobs and rebuilds its counters from the file;
jobs that ended in env_error (a harness fault, not an outcome) run again.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Any

from mage_jax.actions import schema as tools
from mage_jax.agent.episode import EpisodeResult
from mage_jax.data import trajectory as tr
from mage_jax.harness.variant import uses_extra_tools

STATE, TRAJECTORIES = "collect_state.jsonl", "trajectories.jsonl"


def rejection(res: EpisodeResult) -> str | None:
  """None if the episode is kept, else the reason (env_error | env_lost | budget | failed_check |
  no_steps | extra_tool)."""
  if res.status == "env_error":
    return "env_error"
  if res.episode is None or not res.episode.steps:
    return "no_steps"
  if res.status == "env_lost":
    return "env_lost"
  if res.score < 1.0:
    return "budget" if res.status == "budget" else "failed_check"
  if uses_extra_tools(res.episode):
    return "extra_tool"
  return None


def student_episode(ep: tr.Episode, toolset: str, harness: str) -> tr.Episode:
  """The trajectory as SFT data: the student's tool schemas, ids in meta."""
  return dataclasses.replace(ep, tools=tools.toolset_schemas(toolset), source="teacher",
                             meta={**ep.meta, "harness": harness})


@dataclasses.dataclass
class CollectReport:
  episodes: int = 0
  successes: int = 0              # checker score 1 (kept, or rejected only for an extra tool)
  kept: int = 0
  kept_steps: int = 0
  rejected: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  extra_tool_steps: int = 0       # steps of rejected episodes that called an extra tool
  resumed: int = 0                # jobs found done in the state file
  env_errors_retried: int = 0     # env_error jobs of an earlier run, run again on resume

  @property
  def acceptance(self) -> float:
    return self.kept / max(1, self.episodes)

  def to_dict(self) -> dict[str, Any]:
    return {"episodes": self.episodes, "successes": self.successes, "kept": self.kept, "kept_steps": self.kept_steps,
            "acceptance": round(self.acceptance, 4), "rejected": dict(self.rejected),
            "extra_tool_steps": self.extra_tool_steps, "resumed": self.resumed,
            "env_errors_retried": self.env_errors_retried}


class Collector:
  """Appends kept trajectories and job states under `workdir` as results arrive."""

  def __init__(self, workdir: str, toolset: str):
    self.workdir, self.toolset = workdir, toolset
    self.state_path = os.path.join(workdir, STATE)
    self.traj_path = os.path.join(workdir, TRAJECTORIES)
    self.report = CollectReport()
    self.done: set[str] = set()
    os.makedirs(workdir, exist_ok=True)
    self._written = self._trajectory_ids()
    if os.path.exists(self.state_path):
      with open(self.state_path, encoding="utf-8") as f:
        for line in f:
          if not line.strip():
            continue
          st = json.loads(line)
          if st["reason"] == "env_error":  # a harness fault, not the teacher's outcome: run it again
            self.report.env_errors_retried += 1
            continue
          self._count(st)
          self.report.resumed += 1

  def _trajectory_ids(self) -> set[str]:
    if not os.path.exists(self.traj_path):
      return set()
    with open(self.traj_path, encoding="utf-8") as f:
      return {json.loads(line)["id"] for line in f if line.strip()}

  def _count(self, st: dict[str, Any]) -> None:
    self.done.add(st["episode_id"])
    self.report.episodes += 1
    self.report.successes += st["status"] != "env_error" and st["score"] >= 1.0
    if st["reason"] is None:
      self.report.kept += 1
      self.report.kept_steps += st["steps"]
    else:
      self.report.rejected[st["reason"]] += 1
      self.report.extra_tool_steps += st.get("extra_steps", 0)

  def add(self, res: EpisodeResult) -> str | None:
    reason = rejection(res)
    if reason is None and res.episode.id not in self._written:
      ep = student_episode(res.episode, self.toolset, res.harness)
      with open(self.traj_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(tr.episode_to_dict(ep, self.workdir), ensure_ascii=False) + "\n")
      self._written.add(ep.id)
    st = {"episode_id": res.episode_id, "task_id": res.task_id, "skills": res.skills, "harness": res.harness,
          "reason": reason, "score": res.score, "status": res.status, "steps": res.steps,
          "extra_steps": uses_extra_tools(res.episode) if res.episode is not None else 0}
    with open(self.state_path, "a", encoding="utf-8") as f:
      f.write(json.dumps(st) + "\n")
    self._count(st)
    return reason
