"""Data-path figures from the data modules' own code (CPU suite only: Pillow, Grain).

- read: packed ArrayRecord shards -> host batches (`pipeline.measure_read_throughput`),
  in tokens per CPU-second of this process (= per core);
- render+pack: synthetic episodes -> rendered Samples -> Segments (patchified) ->
  windowed best-fit-decreasing bins -> fixed-shape rows, in samples/s per core;
- fill: token fill of the packer on the stage-4-like length distribution
  (`packing.measure_fill`).
"""
from __future__ import annotations

import glob
import os
import tempfile
import time
from typing import Any


def read_throughput(num_bins: int = 16, batch_size: int = 4, num_batches: int = 12,
                    seq_len: int = 32_768, patch_budget: int = 98_304) -> dict[str, Any]:
  from mage_jax.data import pipeline   # the bare GPU image runs this module: each path imports only what it needs
  with tempfile.TemporaryDirectory() as d:
    pipeline.write_stage4_like_shards(d, num_bins=num_bins, seq_len=seq_len,
                                      patch_budget=patch_budget)
    r = pipeline.measure_read_throughput(d, batch_size=batch_size, num_batches=num_batches)
  return dict(r, seq_len=seq_len, batch_size=batch_size)


def render_pack_throughput(episodes: int = 12, seq_len: int = 8_192, patch_budget: int = 24_576,
                           buffer_size: int = 64, width: int = 640, height: int = 400,
                           ) -> dict[str, Any]:
  """Samples/s of render + patchify + pack + assemble over synthetic episodes.

  Episode generation (drawing screenshots, writing PNGs) is setup and not timed;
  reading the JSONL and decoding the screenshots is (it is part of rendering).
  """
  from mage_jax.data import packing, render, synth   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.data import trajectory as tr   # the bare GPU image runs this module: each path imports only what it needs
  with tempfile.TemporaryDirectory() as d:
    synth.generate(d, seed=0, episodes=episodes, grounding=max(2, episodes // 4),
                   width=width, height=height)
    renderer = render.Renderer(render.RenderConfig(context_len=seq_len))
    paths = sorted(glob.glob(os.path.join(d, "*.jsonl")))
    start_cpu, start = time.process_time(), time.perf_counter()
    report = render.RenderReport()
    stats = packing.PackStats(seq_len, patch_budget)
    segments, skipped = [], 0
    for sample in render.render_episodes(tr.read_all(paths, image_check="none"), renderer, report):
      try:
        segments.append(packing.to_segment(sample, seq_len=seq_len, patch_budget=patch_budget))
      except packing.SkipSample:
        skipped += 1
    rows = 0
    for b in packing.pack_segments(segments, seq_len, patch_budget, buffer_size, stats):
      packing.assemble_bin(b.segments, seq_len, patch_budget)
      rows += 1
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
  samples = len(segments)
  return dict(samples=samples, skipped=skipped + sum(report.skipped.values()), bins=rows,
              tokens=stats.tokens, wall_s=wall, cpu_s=cpu,
              samples_per_s=samples / wall, samples_per_cpu_s=samples / max(cpu, 1e-9),
              token_fill=stats.tokens / max(rows * seq_len, 1), seq_len=seq_len)


def fill(num_samples: int = 20_000) -> dict[str, Any]:
  from mage_jax.data import packing   # the bare GPU image runs this module: each path imports only what it needs
  return packing.measure_fill(num_samples=num_samples)
