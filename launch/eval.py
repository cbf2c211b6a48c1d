"""Evaluate a policy on a task suite; prints a table and writes JSON + episodes.

    python -m launch.eval --config=configs/eval.py:scripted --workdir=workdirs/eval_scripted

Writes <workdir>/results.json (summary rows + per-episode counters),
<workdir>/episodes.jsonl (trajectory format, screenshots under <workdir>/shots)
<workdir>/steps.jsonl (per-step token ids / log-probs, the response text), <workdir>/tasks.json
(each task's checker spec) and, unless --config.report=False, the episode viewer
<workdir>/report/index.html (launch.report).

`--config.harness=configs/harness.py:<arg>` (or a .json) evaluates the policy under a teacher
harness variant (mage_jax/harness): its prompt, tools, scaffold and terminal replace
config.episode's and env.max_output; its id goes into every result and trajectory.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/eval.py:scripted", "Eval config.")
_WORKDIR = flags.DEFINE_string("workdir", "workdirs/eval", "Output directory.")


def make_policy_factory(p):
  from mage_jax.agent import policies
  if p.kind == "scripted":
    return lambda task: policies.ScriptedPolicy(p.which)
  if p.kind == "noisy_teacher":  # harness/teacher.py: scripted, with a documented noise model
    from mage_jax.harness.teacher import NoisyScriptedTeacher
    return lambda task: NoisyScriptedTeacher(p_extra=p.p_extra, p_invalid=p.p_invalid, seed=p.seed)
  if p.kind == "openai":
    return lambda task: policies.OpenAIChatPolicy(p.base_url, p.model, api_key=p.api_key,
                                                  max_tokens=p.max_tokens, temperature=p.temperature,
                                                  top_p=p.top_p)
  if p.kind == "checkpoint":
    if not p.checkpoint:
      raise ValueError("policy.kind=checkpoint needs --config.policy.checkpoint=<HF dir>")
    shared = policies.CheckpointPolicy(p.checkpoint, max_new_tokens=p.max_tokens, greedy=p.greedy,
                                       temperature=p.temperature, top_p=p.top_p)
    return lambda task: shared
  raise ValueError(f"unknown policy.kind {p.kind!r}; expected scripted | noisy_teacher | openai | checkpoint")


def load_tasks(c):
  from mage_jax.agent.tasks.builtin import builtin_packages
  from mage_jax.agent.tasks.package import load_suite
  tasks = builtin_packages() if c.suite == "builtin" else load_suite(c.suite)
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


def main(argv):
  del argv
  from mage_jax.agent import evaluation
  c = _CONFIG.value
  require_sandbox("launch.eval")
  variant = load_harness(c)
  if variant is not None:
    print(f"harness {variant.name} id={variant.variant_id}")
  tasks = gated_tasks(c, env_factory_for(c, variant))
  results = run_suite(c, _WORKDIR.value, tasks, variant, make_policy_factory(c.policy),
                      on_result=lambda r: print(f"{r.task_id}: {r.status} score={r.score:.2f} "
                                                f"steps={r.steps} {r.wall_time:.1f}s", flush=True))
  rows = evaluation.summarize(results)
  print(evaluation.format_table(rows))
  paths = evaluation.write_results(_WORKDIR.value, results, rows, c.to_dict())
  paths["tasks"] = write_task_specs(_WORKDIR.value, tasks)
  print("wrote", ", ".join(paths.values()))
  if c.report:
    from mage_jax.report.build import build_report
    print("report:", build_report(_WORKDIR.value)["index"])


def write_task_specs(workdir: str, tasks) -> str:
  """<workdir>/tasks.json: each task's instruction and checker spec (what the report shows as
  "what it checked"), so a report needs no access to the suite the run used."""
  path = os.path.join(workdir, "tasks.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump({t.id: {"kind": t.kind, "instruction": t.instruction, "checker": t.checker} for t in tasks},
              f, indent=1, ensure_ascii=False)
  return path


if __name__ == "__main__":
  app.run(main)
