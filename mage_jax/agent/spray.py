"""Spray metrics of one episode: how much shell output it produced and how widely it clicked.

A policy that learned to spray (floods of output, clicks over the whole screen) shows up here
before it shows up as a reward hack: evaluation and RL summaries report these per episode.

  shell_output_bytes   bytes of bash observation text, summed over the episode's steps
  clicks               click actions (left/right/middle/double click, drag)
  click_targets        distinct places clicked: coordinates binned to a TARGET_BIN grid in [0, 999]
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mage_jax.actions import schema

CLICK_ACTIONS = ("left_click", "right_click", "middle_click", "double_click", "left_click_drag")
TARGET_BIN = 25  # [0, 999] units (~32 px on a 1280-wide screen): one widget is one target


@dataclasses.dataclass
class SprayCounter:
  shell_output_bytes: int = 0
  clicks: int = 0
  targets: set = dataclasses.field(default_factory=set)

  def observe(self, name: str, arguments: dict[str, Any], observation_text: str | None) -> dict[str, int]:
    """Counts one executed call; returns its per-step figures (for the step record)."""
    out_bytes = len((observation_text or "").encode()) if name == schema.BASH else 0
    click = int(name == schema.COMPUTER_USE and arguments.get("action") in CLICK_ACTIONS)
    if click and isinstance(arguments.get("coordinate"), (list, tuple)):
      self.targets.add(tuple(int(c) // TARGET_BIN for c in arguments["coordinate"]))
    self.shell_output_bytes += out_bytes
    self.clicks += click
    return {"shell_output_bytes": out_bytes, "clicks": click}

  def summary(self, steps: int) -> dict[str, float]:
    n = max(1, steps)
    return {"shell_output_bytes_per_step": self.shell_output_bytes / n, "clicks_per_step": self.clicks / n,
            "click_targets": len(self.targets)}


def mean_of(summaries: list[dict[str, float]]) -> dict[str, float]:
  """Per-episode spray summaries -> their means (keys of `SprayCounter.summary`, 0 when none)."""
  keys = ("shell_output_bytes_per_step", "clicks_per_step", "click_targets")
  n = max(1, len(summaries))
  return {k: sum(s.get(k, 0.0) for s in summaries) / n for k in keys}
