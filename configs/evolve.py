"""Teacher harness evolution (launch.evolve) and teacher trajectory collection (launch.collect).

  python -m launch.evolve --config=configs/evolve.py:scripted --workdir=workdirs/evolve
  python -m launch.evolve --config=configs/evolve.py:openai --config.policy.base_url=http://host:8000/v1 \
      --config.author.base_url=http://host:8001/v1 --workdir=workdirs/evolve_llm
  python -m launch.collect --config=configs/evolve.py:scripted,collect \
      --config.harness=workdirs/evolve/selected.json --workdir=workdirs/collect

Arg: the teacher (scripted = harness/teacher.py's NoisyScriptedTeacher | openai), then optional
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
  if teacher not in ("scripted", "openai"):
    raise ValueError(f"configs/evolve.py: unknown teacher {teacher!r}; expected scripted | openai")
  c = eval_config.get_config(("noisy_teacher" if teacher == "scripted" else "openai")
                             + (",tiny" if tiny else ""))
  c.report = False
  c.repeats = 2
  if tiny:
    c.tasks = "term_hello_file,term_multiply,gui_click_red"
  # the seed variant of evolution / the harness of collection
  c.harness = "" if collect else "configs/harness.py:" + ("tiny" if tiny else "redundant")
  c.evolve = ml_collections.ConfigDict(dict(
      # lexicographic <metric>:max|min[:tolerance], ... (evolve/search.py); the tolerance treats
      # success rates within one episode of the best (1 of 42 = 0.024) as equal
      score="success_rate:max:0.03,mean_steps:min",
      generations=2 if tiny else 4,
      max_children=8,
      # the rule-based proposer's space: tools it may add, libraries {name: host tree}, prompts, caps
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
