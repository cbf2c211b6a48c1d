"""Teacher harness evolution (launch.evolve) and teacher trajectory collection (launch.collect).

  python -m launch.evolve --config=configs/evolve.py:scripted --workdir=workdirs/evolve
  python -m launch.evolve --config=configs/evolve.py:openai --config.policy.base_url=http://host:8000/v1 \
      --config.author.base_url=http://host:8001/v1 --workdir=workdirs/evolve_llm
  python -m launch.collect --config=configs/evolve.py:scripted,collect \
      --config.harness=workdirs/evolve/selected.json --workdir=workdirs/collect

Arg: the teacher (scripted = harness/teacher.py's HarnessSensitiveTeacher, a stand-in whose
profile below says what helps it and what distracts it; noisy = the earlier NoisyScriptedTeacher;
openai = an LLM teacher, the real thing), then optional
",tiny" (3 tasks, 2 generations, 6-step budget) and ",collect" (launch.collect's defaults: the
student's harness unless --config.harness says otherwise, and synthesis off). Everything of
configs/eval.py applies (suite, tasks, slots, env, policy, episode).
"""
from __future__ import annotations

import ml_collections

from configs import common
from configs import eval as eval_config
from configs import harness as harness_config
from mage_jax.data import prompts


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = (arg or "scripted").split(",")
  teacher, tiny, collect = parts[0], "tiny" in parts[1:], "collect" in parts[1:]
  if teacher not in ("scripted", "noisy", "openai"):
    raise ValueError(f"configs/evolve.py: unknown teacher {teacher!r}; expected scripted | noisy | openai")
  kind = {"scripted": "sensitive_teacher", "noisy": "noisy_teacher", "openai": "openai"}[teacher]
  c = eval_config.get_config(kind + (",tiny" if tiny else ""))
  if teacher == "scripted":
    # the stand-in's profile (harness/teacher.py): the library note in the prompt and the widget
    # dump cut its slips; xdotool draws it into wasted, misleading calls. A search on it can only
    # rediscover this profile: it checks the search, not what helps a real teacher (use openai)
    c.policy.helps = {"prompt:prefer a short script": 0.5, "tool:ax_tree": 0.4}
    c.policy.distractors = {"xdotool": 0.4}
  c.report = False
  c.repeats = 2
  if tiny:
    c.tasks = "term_hello_file,term_multiply,gui_click_red"
  # the seed variant of evolution / the harness of collection
  c.harness = "" if collect else "configs/harness.py:" + ("tiny" if tiny else "redundant")
  c.evolve = ml_collections.ConfigDict(dict(
      # lexicographic <metric>:max|min[:tolerance], ... (evolve/search.py); the tolerance treats
      # success rates within one episode of the best (1 of 42 = 0.024) as equal
      score="success_rate:max:0.03,dollars_per_task:min,mean_steps:min",
      heldout_share=0.0 if tiny else 0.3,  # tasks (by a hash of the id) kept out of the search
      finalists=3,                         # top variants (+ the seed) compared on the held-out tasks
      generations=2 if tiny else 4,
      max_children=8,
      # the rule-based proposer's space: tools it may add, terminal libraries {name: host tree, e.g.
      # a `pip install --target` tree of python-pptx}, prompts, caps
      extra_tools=["xdotool", "ax_tree"], libraries={},
      system_prompts=[prompts.SYSTEM_PROMPTS[0] + harness_config.LIB_NOTE], max_output=[4000]))
  c.author = ml_collections.ConfigDict(dict(     # the LLM authoring node (forge/llm.py); "" = off
      base_url="", model="author", max_tokens=512, temperature=0.0, **common.endpoint_fields()))
  # launch.collect
  c.collect = ml_collections.ConfigDict(dict(progress=True))
  c.synthesis = ml_collections.ConfigDict(dict(  # data/synthesis.py; base_url "" = no synthesis pass
      base_url="", model="teacher", max_tokens=1024, temperature=0.0, coord_tolerance=5,
      judge=False, on_reject="drop_episode", workers=4, **common.endpoint_fields()))
  return c
