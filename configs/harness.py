"""Teacher harness variants (mage_jax/harness/variant.py): one config each.

  python -m launch.eval --config=configs/eval.py:scripted,tiny --config.harness=configs/harness.py:beta2 \
      --workdir=workdirs/eval_beta2
  python -m launch.evolve --config=configs/evolve.py:scripted --workdir=workdirs/evolve

Arg: base | beta1 | beta2 | redundant | tiny. `base` is the student's own harness (the fixed
computer_use + bash schema, DESIGN.md's system prompt); beta1 adds a terminal note on the domain
libraries; beta2 is beta1 with the accessibility-tree dump (the paper's AX-augmented harness);
`redundant` offers both overlapping extra tools (xdotool, ax_tree), the evolution's starting
point; `tiny` is `redundant` with a 6-step budget.
"""
from __future__ import annotations

import ml_collections

from mage_jax.data import prompts

LIB_NOTE = (" The shell has Python with python-pptx, openpyxl, pandas, pypdf and pillow: prefer a short "
             "script over many GUI steps when a file can be edited directly.")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = arg or "base"
  if arg not in ("base", "beta1", "beta2", "redundant", "tiny"):
    raise ValueError(f"configs/harness.py: unknown arg {arg!r}; expected base|beta1|beta2|redundant|tiny")
  c = ml_collections.ConfigDict()
  c.name = arg
  c.toolset = "hybrid"                 # schema.TOOLSETS
  c.extra_tools = []                   # harness/extra_tools.py: xdotool, ax_tree
  c.system_prompt = prompts.SYSTEM_PROMPTS[0]
  c.tool_descriptions = {}             # tool name -> description (overrides the schema's)
  c.max_steps = 50                     # scaffold: step budget
  c.full_responses = 4                 #   context window: responses kept in full
  c.visual_turns = 3                   #   observations that keep their screenshot
  c.context_len = 32_768
  c.max_output = 16_000                #   terminal output cap (characters)
  c.libraries = {}                     # terminal env: {name: host site-packages tree}, bound read-only
  c.cli_tools = {}                     #   {name: host directory of executables}
  if arg in ("beta1", "beta2"):
    c.system_prompt = prompts.SYSTEM_PROMPTS[0] + LIB_NOTE
  if arg == "beta2":
    c.extra_tools = ["ax_tree"]
  if arg in ("redundant", "tiny"):
    c.extra_tools = ["xdotool", "ax_tree"]
  if arg == "tiny":
    c.max_steps = 6
  return c
