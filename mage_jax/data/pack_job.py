"""Render trajectory JSONL and pack it into ArrayRecord shards of fixed-shape bins.

    from mage_jax.data import pack_job
    manifest = pack_job.pack(config.data, out_dir, workers=4)

Each source (data.sources.<name>.paths, JSONL, comma-separated) is read,
rendered (one task per episode; in a spawn-context process pool when
workers > 1, in this process when workers == 1), packed with windowed
best-fit-decreasing under the token and patch budgets, and written to
<out_dir>/<name>/shard-*.array_record. <out_dir>/manifest.json holds counts of
episodes, samples and bins, token and patch fill, skipped items by reason
(reading, rendering, packing) and per-source counts. An episode id is packed once
across all sources; a repeat is a `duplicate_id` read skip naming both places. Optionally the last N
episodes of each source are held out whole into a separate folder.

The pool uses `spawn`, never `fork`: a caller such as the trainer already runs
JAX threads, and forking a threaded process can deadlock. `launch.pack` is the
command-line shell around `pack()`.
"""
from __future__ import annotations

import collections
import json
import multiprocessing
import os
import time
from typing import Any

import tqdm

from mage_jax.data import packing, records, render, trajectory
from mage_jax.data.config import source_names

_worker: dict[str, Any] = {}


def _init_worker(render_cfg: dict, seq_len: int, patch_budget: int) -> None:
  _worker["renderer"] = render.Renderer(render.RenderConfig.from_config(render_cfg))
  _worker["budgets"] = (seq_len, patch_budget)


def render_and_segment(job: tuple[trajectory.Episode, int, str]
                       ) -> tuple[list[packing.Segment], dict, collections.Counter]:
  """One episode -> its packable segments, render report, and pack skips by reason."""
  ep, source_id, source_name = job
  report = render.RenderReport()
  skips: collections.Counter[str] = collections.Counter()
  seq_len, patch_budget = _worker["budgets"]
  segments = []
  for s in _worker["renderer"].render_episode(ep, report):
    s.meta.update(source_id=source_id, data_source=source_name)
    try:
      segments.append(packing.to_segment(s, seq_len=seq_len, patch_budget=patch_budget))
    except packing.SkipSample as e:
      skips[str(e)] += 1
  return segments, report.to_dict(), skips


class _InProcess:
  """The Pool interface pack() uses, rendering in this process (workers == 1)."""

  def __init__(self, render_cfg: dict, seq_len: int, patch_budget: int):
    _init_worker(render_cfg, seq_len, patch_budget)

  def imap(self, fn, jobs, chunksize: int = 1):  # noqa: ARG002
    return map(fn, jobs)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    _worker.clear()


def _pack_episodes(pool, episodes: list, sid: int, name: str, directory: str, data,
                   stats: packing.PackStats, report: render.RenderReport, desc: str) -> list[str]:
  """Render (through `pool`) and pack `episodes` of one source into `directory`; returns shard paths."""
  bar = tqdm.tqdm(total=len(episodes), desc=desc, unit="ep")

  def segments():
    for segs, rep, skips in pool.imap(render_and_segment,
                                      [(ep, sid, name) for ep in episodes], chunksize=1):
      report.merge(_report_from_dict(rep))
      stats.skipped.update(skips)
      bar.update(1)
      yield from segs

  bins = packing.pack_segments(segments(), data.seq_len, data.patch_budget, data.pack_buffer, stats)
  shards = records.write_bins(bins, directory, data.seq_len, data.patch_budget,
                              data.records_per_shard)
  bar.close()
  return shards


def pack(data, out_dir: str, workers: int = 0, heldout_dir: str = "",
         heldout_episodes: int = 0) -> dict[str, Any]:
  """Renders and packs every source of `data` (workers: render processes,
  0 = all cores, 1 = this process); returns (and writes) the manifest.

  With `heldout_episodes` > 0, the last that many episodes of each source (in
  file order) are held out whole — no step of them is trained — and packed
  into <heldout_dir>/<source>/ for the held-out loss; a source with no more
  episodes than that keeps them all for training (manifest: heldout.episodes 0)."""
  if heldout_episodes and not heldout_dir:
    raise ValueError("heldout_episodes > 0 needs a heldout_dir")
  start = time.perf_counter()
  os.makedirs(out_dir, exist_ok=True)
  names = source_names(data)
  if not names:
    raise ValueError("config.data.sources is empty: nothing to pack")
  render_cfg = data.render.to_dict()
  workers = workers or os.cpu_count() or 1
  manifest: dict[str, Any] = dict(seq_len=data.seq_len, patch_budget=data.patch_budget,
                                  pack_buffer=data.pack_buffer, sources={})
  totals = packing.PackStats(data.seq_len, data.patch_budget)
  skipped: dict[str, collections.Counter] = {k: collections.Counter() for k in ("read", "render", "pack")}
  skipped_items: list[str] = []
  episodes_total = rendered_total = 0
  initargs = (render_cfg, data.seq_len, data.patch_budget)
  if workers == 1:
    pool = _InProcess(*initargs)
  else:
    # spawn, not fork: the caller may already run JAX threads (fork could deadlock).
    pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_init_worker,
                                                     initargs=initargs)
  first_seen: dict[str, str] = {}  # episode id -> file:line, shared so an id is packed once
  with pool:
    for sid, name in enumerate(names):
      paths = [p for p in str(data.sources[name].paths).split(",") if p]
      read_report = trajectory.ReadReport(first_seen=first_seen)
      episodes = list(trajectory.read_all(paths, report=read_report))
      skipped["read"].update(read_report.skipped)
      skipped_items += [str(s) for s in read_report.skipped_items]
      held = episodes[-heldout_episodes:] if 0 < heldout_episodes < len(episodes) else []
      episodes = episodes[:len(episodes) - len(held)]
      stats = packing.PackStats(data.seq_len, data.patch_budget)
      source_render = render.RenderReport()
      shards = _pack_episodes(pool, episodes, sid, name, os.path.join(out_dir, name), data, stats,
                              source_render, f"render+pack {name}")
      heldout = dict(episodes=len(held))
      if held:
        h_stats = packing.PackStats(data.seq_len, data.patch_budget)
        h_render = render.RenderReport()
        _pack_episodes(pool, held, sid, name, os.path.join(heldout_dir, name), data, h_stats,
                       h_render, f"held-out {name}")
        heldout.update(samples=h_stats.samples, bins=h_stats.bins,
                       skipped=dict(render=dict(h_render.skipped), pack=dict(h_stats.skipped)))
      skipped["render"].update(source_render.skipped)
      skipped["pack"].update(stats.skipped)
      skipped_items += source_render.skipped_items
      for k in ("bins", "samples", "tokens", "patches"):
        setattr(totals, k, getattr(totals, k) + getattr(stats, k))
      episodes_total += len(episodes)
      rendered_total += source_render.samples
      manifest["sources"][name] = dict(
          source_id=sid, weight=data.sources[name].weight, paths=paths, episodes=len(episodes),
          rendered_samples=source_render.samples, shards=[os.path.relpath(p, out_dir) for p in shards],
          **{k: v for k, v in stats.as_dict().items() if k != "skipped"},
          skipped=dict(read=dict(read_report.skipped), render=dict(source_render.skipped),
                       pack=dict(stats.skipped)), heldout=heldout)
  t = totals.as_dict()
  elapsed = time.perf_counter() - start
  manifest.update(episodes=episodes_total, rendered_samples=rendered_total, samples=t["samples"],
                  bins=t["bins"], tokens=t["tokens"], patches=t["patches"],
                  token_fill=t["token_fill"], patch_fill=t["patch_fill"],
                  skipped={k: dict(v) for k, v in skipped.items()},
                  skipped_total=sum(sum(v.values()) for v in skipped.values()),
                  skipped_items=skipped_items, seconds=elapsed,
                  samples_per_s=t["samples"] / max(elapsed, 1e-9), workers=workers)
  with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=2)
  return manifest


def describe_skipped(m: dict[str, Any]) -> str:
  """The manifest's skips as one console phrase: "8 skipped: 8 over the 1,024-token row", most
  frequent reason first ("" when nothing was skipped). Reading skips are malformed input lines,
  rendering skips steps whose prompt exceeds render.context_len, packing skips samples that fit
  no bin."""
  row, budget = f"{m['seq_len']:,}-token row", f"{m['patch_budget']:,}-patch budget"
  words = {"longer than seq_len": f"over the {row}", "more patches than patch_budget": f"over the {budget}",
           render.TOO_LONG: "over render.context_len"}
  reasons: collections.Counter = collections.Counter()
  for stage, counts in m["skipped"].items():
    for reason, n in counts.items():
      reasons[words.get(reason, f"{stage}: {reason.replace('_', ' ')}")] += n
  total = sum(reasons.values())
  if not total:
    return ""
  return f"{total} skipped: " + ", ".join(f"{n} {why}" for why, n in reasons.most_common())


def _report_from_dict(d: dict) -> render.RenderReport:
  r = render.RenderReport()
  for k, v in d.items():
    setattr(r, k, collections.Counter(v) if k == "skipped" else v)
  return r
