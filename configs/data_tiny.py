"""Tiny data-only config for launch.pack / launch.inspect on a synthetic set.

  python -m launch.synth --out=workdirs/synth --seed=0
  python -m launch.pack --config=configs/data_tiny.py:workdirs/synth

The arg is a folder written by launch.synth; its gui/terminal/hybrid/grounding
JSONL files become four sources, packed to <folder>/packed.
"""
from __future__ import annotations

import os

import ml_collections

from mage_jax.data.config import default_data_config, sources_config

KINDS = {"gui": 0.4, "terminal": 0.2, "hybrid": 0.3, "grounding": 0.1}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  folder = arg or "workdirs/synth"
  c = ml_collections.ConfigDict()
  c.data = default_data_config()
  c.data.sources = sources_config(
      {k: (os.path.join(folder, f"{k}.jsonl"), w, 1 if k == "grounding" else 4)
       for k, w in KINDS.items()})
  c.data.packed_dir = os.path.join(folder, "packed")
  c.data.seq_len = 4096
  c.data.patch_budget = 12_288  # 3 screenshots of 640x384 per sample = 2,880 patches
  c.data.pack_buffer = 64
  c.data.pack_workers = 2
  c.data.records_per_shard = 16
  c.data.batch_size = 4
  c.data.read_threads = 1
  c.data.read_prefetch = 4
  c.data.render.context_len = 4096
  return c
