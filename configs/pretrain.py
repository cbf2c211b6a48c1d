"""Stage 0 of the learning proof: the tiny pretrained base (mage_jax/train/pretrain.py), the
text tower of the `mage_vl_proof` student on a generated copy / recall / instruction corpus over
the proof family's value pools, through a length curriculum until the copy probe passes.

  python -m launch.pretrain --config=configs/pretrain.py --workdir=workdirs/proof_base
  python -m launch.pretrain --config=configs/pretrain.py:tiny --workdir=/tmp/base_tiny   # seconds

A finished build is cached under `cache_dir`/<hash of config and code>/ and reused by every proof
seed (the SFT stage's init.from_dir reads its hf/).
"""
from __future__ import annotations

import ml_collections

from configs import models


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  tiny = arg == "tiny"
  if arg not in (None, "", "tiny"):
    raise ValueError(f"configs/pretrain.py arg {arg!r}: expected nothing or 'tiny'")
  c = ml_collections.ConfigDict()
  c.base_seed = 0                   # the base's own seed: every proof seed reuses one base
  c.tokenizer = ""                  # "": the packaged Qwen3 tokenizer
  c.cache_dir = "workdirs/cache/proof_base"
  c.accept_failed = False           # reuse a cached build whose probe never passed
  # the text tower of the SFT student the base initialises (configs/proof.py: mage_vl_proof; the
  # smoke's mage_vl_tiny)
  c.model = models.get_config("mage_vl_tiny" if tiny else "mage_vl_proof").text
  from configs import proof         # (configs/proof.py builds its base stage from this file)
  c.family = proof.pool_fields()   # the proof family's value pools and split
  c.corpus = ml_collections.ConfigDict(dict(
      kinds=["repeat", "recall", "instruct"],
      preamble_share=0.25,          # filler documents that are an agent system turn
      novel_share=0.5,              # instructions whose values are random piece strings, not pool values
      # instructions followed by a screenshot's image-pad run or screen text before the response, as
      # an agent's first user turn is (data/copy_corpus.py); none in rows too short for one
      block_share=0.5,
      block_max=250,                # tokens; at most half of what a row has beyond one document
      vocab_samples=400 if tiny else 4_000))
  c.curriculum = ml_collections.ConfigDict(dict(
      lengths=[128, 256] if tiny else [128, 256, 512, 1024],
      tokens_per_step=1_024 if tiny else 4_096,
      probe_every=2 if tiny else 50,
      probe_rows=4 if tiny else 32,
      advance_nll=0.5,              # move to the next length at this probe figure
      pass_nll=0.1,                 # the base is done at this figure at the last length
      stage_max_steps=3 if tiny else 1_500,
      max_steps=6 if tiny else 4_000))
  c.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=3e-3, warmup_steps=2 if tiny else 20, end_lr_ratio=1.0, weight_decay=0.0,
      b2=0.98, clip_norm=1.0))
  c.loss_chunk_size = 4_096
  c.log_every = 1 if tiny else 10
  return c
