"""What the RL loop records per update for the report: one groups.jsonl row per rollout group.

The rows are small (a few numbers per episode), so every trained group is recorded and the report
samples which to show. Per-token TIS ratios are not here: the learner's log π_old exists only on
device inside the update, so each row carries the update's mean ratio and TIS truncation fraction.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

GROUPS_FILE = "groups.jsonl"


def group_rows(update: int, groups: Sequence[Any], samples: Sequence[Any],
               metrics: dict[str, float]) -> list[dict[str, Any]]:
  """Rows for the groups trained in `update` (the version the update produced): rewards, the
  advantages the learner gave each episode, the oldest sample's policy version and its lag behind the
  learner that trained it (update − 1 − version)."""
  advantage = {s.episode_id: float(s.advantage) for s in samples}
  rows = []
  for g in groups:
    versions = [s.version for e in g.episodes for s in e.samples]
    oldest = min(versions) if versions else None
    rows.append({
        "update": update, "task_id": g.task_id, "group_id": g.group_id,
        "rewards": [float(e.reward) for e in g.episodes],
        "advantages": [advantage.get(e.episode_id) for e in g.episodes],
        "version": oldest, "lag": None if oldest is None else update - 1 - oldest,
        "samples": sum(len(e.samples) for e in g.episodes), "env_errors": g.env_errors,
        "episode_ids": [e.episode_id for e in g.episodes],
        "update_mean_ratio": metrics.get("mean_ratio"), "update_tis_trunc_frac": metrics.get("tis_trunc_frac")})
  return rows


def append_groups(workdir: str, update: int, groups: Sequence[Any], samples: Sequence[Any],
                  metrics: dict[str, float]) -> None:
  with open(os.path.join(workdir, GROUPS_FILE), "a", encoding="utf-8") as f:
    for row in group_rows(update, groups, samples, metrics):
      f.write(json.dumps(row) + "\n")
