"""Scripted stand-in teachers for harness evolution without an LLM (an LLM teacher is
`policy.kind=openai`): `HarnessSensitiveTeacher` (the default of configs/evolve.py:scripted)
and `NoisyScriptedTeacher` (kept for the earlier measurements).

HarnessSensitiveTeacher: the reference calls with per-call slips whose rate depends on the
harness it runs under (request.harness: tools, system prompt, libraries, CLI trees), read
through named *features*: "tool:<extra tool>", "library:<name>", "cli:<name>",
"prompt:<text in the system prompt>". Each working reference call slips (policies.wrong_call:
a bash command becomes `true`, a click hits the corner, typed text is reversed) when
u < p_slip x prod(1 - helps[f] for every present feature f), u a uniform draw fixed by (seed,
episode id, call index) so every variant meets the same draws (common random numbers): a
helpful feature removes slips, never adds any. Before each reference call, each offered
*distractor* tool is called with probability distractors[tool] (a wasted step), and after such
a call the next reference call slips with probability `derail` (its output misled the
teacher). Which features help or distract is the teacher's profile (config
`policy.helps` / `policy.distractors`), never told to the search: a correct search must find
the helpful feature and prune the distractor. This is a stand-in, so on it the search can only
rediscover the profile; what helps a real teacher needs policy.kind=openai.

NoisyScriptedTeacher:

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
from mage_jax.agent.policies import ScriptedPolicy, wrong_call
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


def harness_features(variant) -> set[str]:
  """The named features of a harness variant a HarnessSensitiveTeacher can react to."""
  if variant is None:
    return set()
  return ({f"tool:{n}" for n in variant.extra_tools} | {f"library:{n}" for n, _ in variant.libraries}
          | {f"cli:{n}" for n, _ in variant.cli_tools})


class HarnessSensitiveTeacher:
  """The reference solution with slips whose rate the harness changes (the module docstring)."""

  def __init__(self, p_slip: float = 0.25, helps: dict[str, float] | None = None,
               distractors: dict[str, float] | None = None, derail: float = 0.5, seed: int = 0):
    helps, distractors = dict(helps or {}), dict(distractors or {})
    bad = [f"helps[{k!r}]={v}" for k, v in helps.items() if not 0 <= v <= 1]
    bad += [f"distractors[{k!r}]={v}" for k, v in distractors.items()
            if not 0 <= v <= 1 or k not in xt.EXTRA_TOOLS]
    bad += [f"{k}={v}" for k, v in (("p_slip", p_slip), ("derail", derail)) if not 0 <= v <= 1]
    bad += [f"helps key {k!r} (expected tool:|library:|cli:|prompt:<name>)" for k in helps
            if k.split(":", 1)[0] not in ("tool", "library", "cli", "prompt") or ":" not in k]
    if bad:
      raise ValueError("harness-sensitive teacher: bad " + ", ".join(bad) + " (probabilities in [0, 1]; "
                       f"distractors name extra tools {sorted(xt.EXTRA_TOOLS)})")
    self.p_slip, self.helps, self.distractors, self.derail, self.seed = p_slip, helps, distractors, derail, seed
    self.oracle = ScriptedPolicy("reference")
    self.queue: list[str] = []
    self.planned = -1
    self.misled = False

  def slip_rate(self, variant) -> float:
    present = harness_features(variant)
    prompt = variant.system_prompt if variant is not None else ""
    p = self.p_slip
    for feature, cut in self.helps.items():
      kind, _, name = feature.partition(":")
      if feature in present or (kind == "prompt" and name in prompt):
        p *= 1 - cut
    return p

  def act(self, request: PolicyRequest) -> PolicyOutput:
    steps = request.episode.steps
    i = sum(s.tool_call is not None and s.tool_call.name in tools.TOOL_NAMES for s in steps)
    key = f"{self.seed}/{request.episode.id}/{i}"
    offered = [n for n in request.episode.tool_names if n in self.distractors]
    if self.planned != i:  # one distractor draw per reference call
      self.planned = i
      rng = random.Random(key + "/distract")
      self.queue = [n for n in offered if rng.random() < self.distractors[n]]
    if self.queue:
      name = self.queue.pop(0)
      self.misled = self.misled or random.Random(f"{key}/derail/{name}").random() < self.derail
      return PolicyOutput(text=tools.format_response(f"Let me look with {name} first.",
                                                     f"Inspect with {name}", name, _EXTRA_ARGS[name]))
    calls = request.task.reference or []
    req = dataclasses.replace(request, t=i + 1)
    if i < len(calls) and (calls[i].get("arguments") or {}).get("action") != "terminate":
      slip = random.Random(key + "/slip").random() < self.slip_rate(request.harness) or self.misled
      self.misled = False
      if slip:
        task = dataclasses.replace(request.task, references=[{"channel": "hybrid", "calls": [
            *calls[:i], wrong_call(calls[i]), *calls[i + 1:]]}])
        return self.oracle.act(dataclasses.replace(req, task=task))
    return self.oracle.act(req)
