"""The learning proof's base (stage 0): the generated corpus on the proof family's value pools, the
agent prompt's system turns as preambles, the family's texts in the vocabulary; then
train/pretrain.py builds (or reuses from its cache) the base.

  python -m launch.pretrain --config=configs/pretrain.py --workdir=workdirs/proof_base
"""
from __future__ import annotations

import os
from typing import Any, Callable

import ml_collections

from mage_jax.actions import schema
from mage_jax.machine import terminal
from mage_jax.tasks import proof_family as pf
from mage_jax.tasks import proof_grounding as pg
from mage_jax.data import copy_corpus, prompts
from mage_jax.train import pretrain


def proof_pools(family: Any = None) -> copy_corpus.Pools:
  """The family's word and file-name pools, both splits (config.family; None: the defaults)."""
  pools = pf.value_pools(family)
  return copy_corpus.Pools(words=pools["words"], file_names=pools["file_names"])


def system_turns() -> list[str]:
  """The system turn of every phrasing and tool set an episode prompt can start with."""
  return [prompts.system_turn(p, schema.toolset_schemas(t)) for p in prompts.SYSTEM_PROMPTS
          for t in sorted(schema.TOOLSETS)]


def family_texts(family: Any = None) -> list[str]:
  """Every text an instance of either split can hold (proof_family.all_texts), and the harness's
  own texts around them in a rendered episode, and the vision stage's extra colours'
  click screens (tasks/proof_grounding.texts, the default extras) (tool-response framing, empty-output and
  omitted-screenshot markers: data/render.py, machine/terminal.py)."""
  harness = [prompts.SCREENSHOT_OMITTED, terminal.NO_OUTPUT, "<|im_start|>user\n<tool_response>\n",
             "\n</tool_response><|im_end|>\n"]
  return list(pf.all_texts(family)) + pg.texts() + harness


def run(config: ml_collections.ConfigDict, workdir: str, log: Callable[[str], None] = print) -> dict[str, Any]:
  family = config.get("family")
  return pretrain.run(config, workdir, proof_pools(family), extra_texts=family_texts(family),
                      preambles=system_turns(), log=log)


def stage(cfg: ml_collections.ConfigDict, stage_dir: str, previous: str, workdir: str) -> dict[str, Any]:
  """The proof curriculum's `base` step (configs/proof.py): build or reuse the base, and link its
  hf/ and vocab.json into the stage dir, where the SFT stage reads them."""
  del previous, workdir
  info = run(cfg, stage_dir)
  if info["dir"] != stage_dir:      # a cached build: link its outputs here
    for name in ("hf", "vocab.json", "base.json"):
      link = os.path.join(stage_dir, name)
      if os.path.lexists(link):
        os.remove(link)
      os.symlink(os.path.abspath(os.path.join(info["dir"], name)), link)
  if info["status"] != "passed" and not cfg.get("accept_failed", False):
    raise RuntimeError(f"the base's copy probe is {info['final_probe_nll']:.3f} nats at "
                       f"{info['final_length']} tokens after {info['steps']} steps (pass <= "
                       f"{cfg.curriculum.pass_nll}); see {info['dir']}/base.json. Raise "
                       "curriculum.max_steps, or set accept_failed=True to go on with it")
  return {"row": {"base": info["status"], "probe_nll": info["final_probe_nll"], "steps": info["steps"],
                  "cached": info["cached"]},
          "base": {k: v for k, v in info.items() if k != "curve"}, "wall_s": info["build_seconds"]}
