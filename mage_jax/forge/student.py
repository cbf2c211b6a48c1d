"""The adaptive rounds' student: any policy (`policy_factory`), by default the noisy scripted
stand-in of the adaptive rounds (its noise model: rounds.NoiseModel and the
rounds module docstring). Its own module because the episode code it builds on imports JAX, which
the forge's workers (forked) and its start-up do not need.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

import ml_collections

from mage_jax.agent.policies import ScriptedPolicy, wrong_call
from mage_jax.agent.policies import factory_from_config
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
    try:
      return super().act(request)
    except KeyError:  # an earlier slip (e.g. a missed scroll) left the widget this step clicks off
      # screen: the stand-in clicks wrong, as a model would, instead of failing the episode
      task = dataclasses.replace(request.task, references=[{"channel": "hybrid", "calls": [
          *calls[:i], wrong_call(calls[i]), *calls[i + 1:]]}])
      return super().act(dataclasses.replace(request, task=task))


def student_factory(noise: NoiseModel, round_k: int):
  """A fresh noisy student per episode; repeats of one task draw different noise (the factory is
  called once per job, in the job list's fixed order)."""
  seen: dict[str, int] = {}

  def factory(task):
    skill = task.skills[0] if task.skills else task.id
    seen[task.id] = seen.get(task.id, -1) + 1
    repeat = seen[task.id]
    return NoisyScriptedPolicy(noise.p(skill), seed=f"{task.id}:{round_k}" + (f":{repeat}" if repeat else ""))
  return factory


def policy_factory(student: dict[str, Any], round_k: int):
  """The round's student from config `student`: kind noisy_scripted (the stand-in above) or any
  launch.eval policy kind (scripted | openai: an endpoint, e.g. a checkpoint served by
  launch.serve's embedded engine or vLLM | checkpoint: an HF directory run in this process),
  with the same fields as configs/eval.py's `policy` section."""
  if student["kind"] == "noisy_scripted":
    return student_factory(NoiseModel(**student["noise"]), round_k)
  return factory_from_config(ml_collections.ConfigDict(dict(student)))
