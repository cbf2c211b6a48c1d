"""The noisy scripted student of the adaptive rounds (its noise model: rounds.NoiseModel and the
rounds module docstring). Its own module because the episode code it builds on imports JAX, which
the forge's workers (forked) and its start-up do not need.
"""
from __future__ import annotations

import dataclasses
import random

from mage_jax.agent.policies import ScriptedPolicy, wrong_call
from mage_jax.forge.rounds import NoiseModel


class NoisyScriptedPolicy(ScriptedPolicy):
  """ScriptedPolicy('reference') with per-step wrong actions (the noise model: rounds' module docstring)."""

  def __init__(self, p: float, seed: str):
    super().__init__("reference")
    self.p, self.rng = p, random.Random(seed)

  def act(self, request):
    calls = request.task.reference or []
    i = request.t - 1
    if i < len(calls) and (calls[i].get("arguments") or {}).get("action") != "terminate" \
        and self.rng.random() < self.p:
      wrong = wrong_call(calls[i])
      task = dataclasses.replace(request.task, references=[{"channel": "hybrid", "calls": [
          *calls[:i], wrong, *calls[i + 1:]]}])
      return super().act(dataclasses.replace(request, task=task))
    return super().act(request)


def student_factory(noise: NoiseModel, round_k: int):
  def factory(task):
    skill = task.skills[0] if task.skills else task.id
    return NoisyScriptedPolicy(noise.p(skill), seed=f"{task.id}:{round_k}")
  return factory
