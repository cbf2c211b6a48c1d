"""The learning proof's base (stage 0): the generated corpus on the proof family's value pools, the
agent prompt's system turns as preambles, the family's texts in the vocabulary; then
train/pretrain.py builds (or reuses from its cache) the base.

  python -m launch.pretrain --config=configs/pretrain.py --workdir=workdirs/proof_base
"""
from __future__ import annotations

from typing import Any, Callable

import ml_collections

from mage_jax.actions import schema
from mage_jax.agent.tasks import proof_family as pf
from mage_jax.data import copy_corpus, prompts
from mage_jax.train import pretrain


def proof_pools() -> copy_corpus.Pools:
  return copy_corpus.Pools(words={s: pf.words(s) for s in copy_corpus.SPLITS},
                           file_names={s: pf.file_names(s) for s in copy_corpus.SPLITS})


def system_turns() -> list[str]:
  """The system turn of every phrasing and tool set an episode prompt can start with."""
  return [prompts.system_turn(p, schema.toolset_schemas(t)) for p in prompts.SYSTEM_PROMPTS
          for t in sorted(schema.TOOLSETS)]


def family_texts() -> list[str]:
  """Every instruction and reference think / Action / command text of both splits."""
  out = []
  for split in pf.SPLITS:
    for task in pf.instances(split):
      out.append(task.instruction)
      for call in task.reference:
        out += [call.get("think", ""), call.get("action", ""), schema.tool_call_json(
            call["name"], {k: v for k, v in call["arguments"].items() if not str(v).startswith("@")})]
  return out


def run(config: ml_collections.ConfigDict, workdir: str, log: Callable[[str], None] = print) -> dict[str, Any]:
  preambles = system_turns()
  return pretrain.run(config, workdir, proof_pools(), extra_texts=family_texts(), preambles=preambles,
                      log=log)
