"""Evaluation of a policy on a task suite (mage_jax/agent; docs/agent.md).

  python -m launch.eval --config=configs/eval.py:scripted --workdir=workdirs/eval_scripted
  python -m launch.eval --config=configs/eval.py:openai --config.policy.base_url=http://host:8000/v1 \
      --config.policy.model=mage --workdir=workdirs/eval_vllm
  python -m launch.eval --config=configs/eval.py:checkpoint --config.policy.checkpoint=/ckpt/export \
      --workdir=workdirs/eval_ckpt

Arg: the policy kind (scripted | openai | checkpoint), optionally ",tiny" for a
3-task smoke run (e.g. `scripted,tiny`).
"""
from __future__ import annotations

import ml_collections

from configs import common


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = (arg or "scripted").split(",")
  kind, tiny = parts[0], "tiny" in parts[1:]
  c = ml_collections.ConfigDict()
  c.suite = "builtin"            # "builtin" or a directory of task packages
  c.tasks = "term_hello_file,gui_click_red,hyb_code_on_screen" if tiny else ""  # comma list; "" = all
  c.kinds = ""                   # comma list of terminal,gui,hybrid; "" = all
  c.repeats = 1
  c.slots = 2                    # concurrent environment slots
  c.report = True                # write <workdir>/report/ (the episode viewer, launch.report) at the end
  c.check_gates = False          # run the package gates before evaluating (rejects failing packages)
  # OSWorld's protocol (docs/osworld_import.md): runs > 0 repeats the suite `runs` times with a 50-step
  # budget and prints/writes the per-domain table (mean of the runs) beside the usual one
  c.osworld = ml_collections.ConfigDict(dict(runs=0, max_steps=50))
  c.harness = ""                 # a teacher harness variant: configs/harness.py:<arg> or a .json ("" = none)
  c.episode = ml_collections.ConfigDict(dict(max_steps=50, full_responses=4, visual_turns=3,
                                             context_len=32_768,
                                             score_settle=0.3,   # s between the last action and the checker
                                             toolset="hybrid"))  # hybrid (computer_use + bash) | gui
  c.env = ml_collections.ConfigDict(dict(width=1280, height=800, command_timeout=30.0, max_output=16_000,
                                         home_mb=256, memory_mb=4096, nproc=256,
                                         **common.env_fleet_fields()))
  c.policy = ml_collections.ConfigDict(dict(
      kind=kind, which="reference",     # scripted: reference | reference:<channel> | near_miss
      base_url="http://127.0.0.1:8000/v1", model="mage",  # openai
      **common.endpoint_fields(),       # api_key_env, server, retries, concurrency, prices
      tool_protocol="text",             # openai: text (<tool_call> in the reply) | native (tools=)
      checkpoint="",                                              # checkpoint: an HF directory
      max_tokens=1024, temperature=0.0, top_p=1.0, greedy=True,
      p_extra=0.5, p_invalid=0.1, seed=0,                         # noisy_teacher (harness/teacher.py)
      # sensitive_teacher (harness/teacher.py, a stand-in): per-call slip rate, the harness features
      # that cut it ({feature: share cut}), extra tools it is drawn to ({tool: p per call}), and
      # the chance a distractor's output makes the next call slip
      p_slip=0.25, helps={}, distractors={}, derail=0.5))
  return c
