"""Config -> suite run: the pieces launch.eval, launch.collect and launch.evolve share.

`config` is configs/eval.py's ConfigDict (configs/evolve.py extends it): its suite and task
filter, policy, env, episode and optional harness variant.
"""
from __future__ import annotations

import os
import sys


def make_policy_factory(p):
  from mage_jax.agent import policies
  if p.kind == "scripted":
    return lambda task: policies.ScriptedPolicy(p.which)
  if p.kind == "noisy_teacher":  # harness/teacher.py: scripted, with a documented noise model
    from mage_jax.harness.teacher import NoisyScriptedTeacher
    return lambda task: NoisyScriptedTeacher(p_extra=p.p_extra, p_invalid=p.p_invalid, seed=p.seed)
  if p.kind == "sensitive_teacher":  # harness/teacher.py: a stand-in whose slips the harness changes
    from mage_jax.harness.teacher import HarnessSensitiveTeacher
    HarnessSensitiveTeacher(p.p_slip, dict(p.helps), dict(p.distractors), p.derail, p.seed)  # bad config: fail now
    return lambda task: HarnessSensitiveTeacher(p.p_slip, dict(p.helps), dict(p.distractors), p.derail, p.seed)
  if p.kind == "openai":
    from mage_jax.llm.client import from_config
    shared = from_config(p)  # one client: its concurrency limit spans the episodes running at once
    return lambda task: policies.OpenAIChatPolicy(p.base_url, p.model, max_tokens=p.max_tokens,
                                                  temperature=p.temperature, top_p=p.top_p,
                                                  tool_protocol=p.get("tool_protocol", "text"), client=shared)
  if p.kind == "checkpoint":
    if not p.checkpoint:
      raise ValueError("policy.kind=checkpoint needs --config.policy.checkpoint=<HF dir>")
    shared = policies.CheckpointPolicy(p.checkpoint, max_new_tokens=p.max_tokens, greedy=p.greedy,
                                       temperature=p.temperature, top_p=p.top_p)
    return lambda task: shared
  raise ValueError(f"unknown policy.kind {p.kind!r}; expected scripted | noisy_teacher | sensitive_teacher | openai | checkpoint")


def load_tasks(c):
  from mage_jax.agent.tasks.builtin import builtin_packages
  from mage_jax.agent.tasks.package import load_suite
  from mage_jax.agent.tasks.realapps.suite import realapp_packages
  tasks = (builtin_packages() if c.suite == "builtin" else realapp_packages() if c.suite == "realapps"
           else load_suite(c.suite))
  if c.tasks:
    wanted = c.tasks.split(",")
    missing = set(wanted) - {t.id for t in tasks}
    if missing:
      raise ValueError(f"config.tasks: unknown task ids {sorted(missing)}")
    tasks = [t for t in tasks if t.id in wanted]
  if c.kinds:
    tasks = [t for t in tasks if t.kind in c.kinds.split(",")]
  return tasks


def load_harness(c):
  """config.harness ("" = none) -> a HarnessVariant or None."""
  if not c.get("harness"):
    return None
  from mage_jax.harness import load_variant
  return load_variant(c.harness)


def env_factory_for(c, variant):
  from mage_jax.agent.env import EnvConfig
  from mage_jax.agent.sandbox import SandboxConfig
  from mage_jax.harness.env import env_factory
  e = c.env
  env_cfg = EnvConfig(width=e.width, height=e.height, command_timeout=e.command_timeout, max_output=e.max_output,
                      sandbox=SandboxConfig(home_mb=e.home_mb, memory_mb=e.memory_mb, nproc=e.nproc))
  return env_factory(variant, env_cfg)


def gated_tasks(c, env_factory):
  """config's task suite; with check_gates, only the packages whose gates pass."""
  from mage_jax.agent.tasks.gates import check_package
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
  from mage_jax.agent import evaluation
  from mage_jax.agent.episode import EpisodeConfig
  from mage_jax.agent.slots import make_pool
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
  from mage_jax.agent.sandbox import SandboxUnavailable, check_available
  try:
    check_available()
  except SandboxUnavailable as e:
    sys.exit(f"{who}: {e}")
