"""A scripted teacher with a documented noise model, for harness evolution without an LLM.

It solves a task by replaying its reference calls (policies.ScriptedPolicy's oracle) and is
noisy in two ways, each drawn from an RNG seeded by (seed, episode id, turn), so a run is
reproducible and two variants see the same draws on the same turn:

  * tool curiosity: before each reference call, for each *extra* tool the harness declares
    (harness/extra_tools.py; it reads them from the episode's offered tools, so it is never
    told which tools are wasteful), with probability `p_extra` it first calls that tool. The
    extra tools overlap the base ones, so such a call costs a step and achieves nothing the
    reference needs. Step budgets make this cost success as well as steps.
  * slips: with probability `p_invalid` a turn is malformed (its tool-call JSON is cut short),
    an invalid call that costs a step of the budget.

Everything else (which reference call comes next, its arguments) is exact.
"""
from __future__ import annotations

import dataclasses
import random

from mage_jax.actions import schema as tools
from mage_jax.agent.episode import PolicyOutput, PolicyRequest
from mage_jax.agent.policies import ScriptedPolicy
from mage_jax.harness import extra_tools as xt

_EXTRA_ARGS = {"xdotool": {"command": "getmouselocation"}, "ax_tree": {}}


class NoisyScriptedTeacher:
  def __init__(self, p_extra: float = 0.5, p_invalid: float = 0.1, seed: int = 0):
    if not (0 <= p_extra <= 1 and 0 <= p_invalid < 1):
      raise ValueError(f"noisy teacher: p_extra={p_extra} must be in [0, 1], p_invalid={p_invalid} in [0, 1)")
    self.p_extra, self.p_invalid, self.seed = p_extra, p_invalid, seed
    self.turn = 0
    self.oracle = ScriptedPolicy("reference")
    self.queue: list[str] = []   # extra tools still to call before the next reference call
    self.planned = -1            # the reference call the queue was drawn for

  def act(self, request: PolicyRequest) -> PolicyOutput:
    self.turn += 1
    rng = random.Random(f"{self.seed}/{request.episode.id}/{self.turn}")
    i = sum(s.tool_call is not None and s.tool_call.name in tools.TOOL_NAMES for s in request.episode.steps)
    extras = [n for n in request.episode.tool_names if n in xt.EXTRA_TOOLS]
    if self.planned != i:  # one curiosity draw per reference call
      self.planned = i
      self.queue = [n for n in extras if rng.random() < self.p_extra]
    if rng.random() < self.p_invalid:
      return PolicyOutput(text="<think>\nNext step.\n</think>\n\nAction: act\n<tool_call>\n{\"name\": \"")
    if self.queue:
      name = self.queue.pop(0)
      return PolicyOutput(text=tools.format_response(f"Let me inspect the screen with {name}.",
                                                     f"Inspect with {name}", name, _EXTRA_ARGS[name]))
    # the oracle's step index is the reference call's, not the episode's (extra calls are steps too)
    return self.oracle.act(dataclasses.replace(request, t=i + 1))
