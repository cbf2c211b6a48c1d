"""Config -> suite run: the pieces launch.eval, launch.collect and launch.evolve share.

`config` is configs/eval.py's ConfigDict (configs/evolve.py extends it): its suite and task
filter, policy, env, episode and optional harness variant.
"""
from __future__ import annotations

import os
import sys

from mage_jax.agent import evaluation
from mage_jax.agent import policies
from mage_jax.agent.env import env_config_from
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.slots import make_pool
from mage_jax.forge.package_gates import check_package
from mage_jax.harness import load_variant
from mage_jax.harness.env import env_factory
from mage_jax.harness.teacher import HarnessSensitiveTeacher
from mage_jax.harness.teacher import NoisyScriptedTeacher
from mage_jax.machine.sandbox import SandboxUnavailable, check_available
from mage_jax.tasks.suites import load_tasks as load


def make_policy_factory(p):
  """config.policy -> task -> Policy: the harness's teacher stand-ins here, every other kind
  (scripted | openai | checkpoint) from agent/policies.py."""
  if p.kind == "noisy_teacher":  # harness/teacher.py: scripted, with a documented noise model
    return lambda task: NoisyScriptedTeacher(p_extra=p.p_extra, p_invalid=p.p_invalid, seed=p.seed)
  if p.kind == "sensitive_teacher":  # harness/teacher.py: a stand-in whose slips the harness changes
    HarnessSensitiveTeacher(p.p_slip, dict(p.helps), dict(p.distractors), p.derail, p.seed)  # bad config: fail now
    return lambda task: HarnessSensitiveTeacher(p.p_slip, dict(p.helps), dict(p.distractors), p.derail, p.seed)
  if p.kind not in policies.CONFIG_KINDS:
    raise ValueError(f"unknown policy.kind {p.kind!r}; expected "
                     f"{' | '.join(policies.CONFIG_KINDS[:1] + ('noisy_teacher', 'sensitive_teacher') + policies.CONFIG_KINDS[1:])}")
  return policies.factory_from_config(p)


def load_tasks(c):
  return load(c.suite, c.tasks, c.kinds)


def load_harness(c):
  """config.harness ("" = none) -> a HarnessVariant or None."""
  if not c.get("harness"):
    return None
  return load_variant(c.harness)


def env_factory_for(c, variant):
  return env_factory(variant, env_config_from(c.env))


def gated_tasks(c, env_factory):
  """config's task suite; with check_gates, only the packages whose gates pass."""
  tasks = load_tasks(c)
  if c.check_gates:
    kept = []
    for t in tasks:
      g = check_package(t, env_factory)
      print(g)
      if g.passed:
        kept.append(t)
    tasks = kept
  return tasks


def run_suite(c, workdir, tasks, variant, policy_factory, on_result=None, skip=()):
  """Every (task, repeat) job of `tasks` through the slot pool under `variant` (None = config.episode);
  shared by launch.eval, launch.collect and launch.evolve."""
  e = c.env
  ep_cfg = EpisodeConfig(out_dir=os.path.join(workdir, "shots"), **c.episode.to_dict())
  if variant is not None:
    ep_cfg = variant.episode_config(ep_cfg)
  if e.backend == "ray" and c.policy.kind == "checkpoint":
    sys.exit("launch.eval: policy.kind=checkpoint runs the model in this process; with env.backend=ray "
             "serve it (launch.serve / vLLM) and use policy.kind=openai")
  pool = make_pool(e.backend, env_factory_for(c, variant), ep_cfg, c.slots, ray_address=e.ray_address,
                   slots_per_node=e.slots_per_node)
  try:
    return evaluation.evaluate(tasks, policy_factory, pool, repeats=c.repeats, on_result=on_result, skip=skip)
  finally:
    pool.close()


def require_sandbox(who: str) -> None:
  try:
    check_available()
  except SandboxUnavailable as e:
    sys.exit(f"{who}: {e}")
