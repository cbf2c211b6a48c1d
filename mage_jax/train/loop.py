"""The SFT trainer: `train(config, workdir)` in named sections.

  validate    bad input fails here, before any compile
  data        synth (tiny) -> pack if missing -> Grain iterator (+ resume state)
  build       mesh, model, shardings, optimizer over the data's steps (train/run_setup.py)
  init        resume from <workdir>/checkpoints, else init.from_dir (stage workdir / HF), else fresh
  step        the jitted, donated train step
  checkpoint  periodic async saves, SIGTERM save-and-exit, final params export
  loop        steps, metrics, profiler, evaluation, summary.json
"""
from __future__ import annotations

import json
import os
import time
from typing import Any
import zlib

import jax
import ml_collections
import numpy as np

from mage_jax.data import pack_job
from mage_jax.data import pipeline
from mage_jax.data import records
from mage_jax.data import synth as synth_lib
from mage_jax.models.config import build_model_config
from mage_jax.train import checkpoint as ckpt_lib
from mage_jax.train import evaluation
from mage_jax.train import flops as flops_lib
from mage_jax.train import guards
from mage_jax.train import lifecycle
from mage_jax.train import metrics as metrics_lib
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import run_setup as setup
from mage_jax.train import step as step_lib
from mage_jax.train.run_setup import SUMMARY, ConfigError, Trainer, initial_state, to_device  # noqa: F401  (re-exported)


# --- validate ------------------------------------------------------------------------------------


def validate(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Cheap checks of everything a run needs; raises ConfigError naming the field."""
  setup.check_config(config, ("model", "mesh", "data", "optimizer", "step", "train", "init",
                              "checkpoint", "log"))
  setup.check_workdir(workdir)
  setup.check_init(config)
  if not list(config.data.sources.keys()):
    raise ConfigError("config.data.sources is empty")
  build_model_config(config.model)


# --- data ----------------------------------------------------------------------------------------


def synth_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  synth = config.get("synth")
  return os.path.abspath((synth.out if synth is not None and synth.out else "")
                         or os.path.join(workdir, "synth"))


def data_root(config: ml_collections.ConfigDict, workdir: str) -> str:
  """What relative paths in the config (data sources, eval.click_jsonl) are relative to:
  the synthetic data when it is generated, else the working directory."""
  synth = config.get("synth")
  return synth_dir(config, workdir) if synth is not None and synth.enabled else os.getcwd()


def prepare(config: ml_collections.ConfigDict, workdir: str) -> ml_collections.ConfigDict:
  """Resolve data paths, generate synthetic data (tiny) and pack if missing.

  Returns the resolved `data` section; raises ConfigError for a missing data
  path or an empty dataset.
  """
  data = ml_collections.ConfigDict(config.data.to_dict())
  synth = config.get("synth")
  root = synth_dir(config, workdir)
  if synth is not None and synth.enabled and not os.path.exists(os.path.join(root, "manifest.json")):
    print(f"generating synthetic data in {root}", flush=True)
    synth_lib.generate(root, seed=synth.seed, episodes=synth.episodes, grounding=synth.grounding,
                       width=synth.width, height=synth.height)
  base = data_root(config, workdir)
  for name in data.sources.keys():
    paths = [p for p in str(data.sources[name].paths).split(",") if p]
    data.sources[name].paths = ",".join(p if os.path.isabs(p) else os.path.join(base, p) for p in paths)
  data.packed_dir = os.path.abspath(data.packed_dir or os.path.join(workdir, "packed"))
  missing_shards = [n for n in data.sources.keys()
                    if not _shards(data.sources[n].get("packed_dir", "") or
                                   os.path.join(data.packed_dir, n))]
  if missing_shards:
    if not config.get("prep") or not config.prep.pack_if_missing:
      raise ConfigError(
          f"no packed shards for sources {missing_shards} under config.data.packed_dir="
          f"{data.packed_dir!r}; run `python -m launch.pack --config=<this config> "
          f"--out={data.packed_dir}` first (or set config.prep.pack_if_missing=True)")
    for name in data.sources.keys():
      for p in str(data.sources[name].paths).split(","):
        if p and not os.path.exists(p):
          raise ConfigError(f"config.data.sources.{name}.paths: {p!r} does not exist")
    print(f"packing {sorted(data.sources.keys())} into {data.packed_dir}", flush=True)
    held = config.prep.get("heldout_episodes", 0)
    run_pack(data, data.packed_dir, heldout_dir=heldout_dir(data) if held else "",
             heldout_episodes=held)
  data.heldout_dir = heldout_dir(data) if os.path.isdir(heldout_dir(data)) else ""
  for name in data.sources.keys():
    d = data.sources[name].get("packed_dir", "") or os.path.join(data.packed_dir, name)
    try:
      shards = records.shard_paths(d)
    except FileNotFoundError:
      shards = []
    if not shards or _count_bins(shards) == 0:
      raise ConfigError(f"data source {name!r}: no bins in {d} (empty dataset"
                        f"{_source_skips(data.packed_dir, name)})")
  return data


def _source_skips(packed_dir: str, name: str) -> str:
  """'; 0 samples packed, skipped: read: missing image 600' from the pack
  manifest, so an empty source says why ('' when the manifest has nothing on it)."""
  try:
    with open(os.path.join(packed_dir, "manifest.json")) as f:
      src = json.load(f)["sources"][name]
  except (OSError, KeyError, ValueError):
    return ""
  skips = ", ".join(f"{stage}: {reason.replace('_', ' ')} {n}" for stage, counts in src.get("skipped", {}).items()
                    for reason, n in counts.items())
  return f"; {src.get('samples', 0)} samples packed" + (f", skipped: {skips}" if skips else "")


def heldout_dir(data: ml_collections.ConfigDict) -> str:
  """Where prepare() packs held-out episodes: beside the training shards."""
  return os.path.normpath(data.packed_dir) + "_heldout"


def run_pack(data: ml_collections.ConfigDict, out_dir: str, workers: int = 1,
             heldout_dir: str = "", heldout_episodes: int = 0) -> None:
  """Render and pack the JSONL sources into `out_dir` (mage_jax.data.pack_job).

  Safe in the trainer's process, which already runs JAX threads: workers == 1
  renders here without forking, and more workers use a spawn-context pool."""
  m = pack_job.pack(data, out_dir, workers, heldout_dir=heldout_dir,
                    heldout_episodes=heldout_episodes)
  held = sum(s["heldout"]["episodes"] for s in m["sources"].values())
  print(f"packed {m['samples']} samples into {m['bins']} bins ({pack_job.describe_skipped(m) or '0 skipped'}; "
        f"token fill {m['token_fill']:.2f})" + (f"; {held} episodes held out" if held else ""),
        flush=True)


def _shards(d: str) -> list[str]:
  try:
    return records.shard_paths(d) if os.path.isdir(d) else []
  except (FileNotFoundError, ValueError):
    return []


def _count_bins(paths: list[str]) -> int:
  import grain   # Grain only when a pipeline is built (start-up cost)
  return len(grain.sources.ArrayRecordDataSource(paths)) if paths else 0


def count_total_steps(config: ml_collections.ConfigDict, data: ml_collections.ConfigDict) -> int:
  """train.total_steps, or num_epochs passes over every packed bin."""
  if config.train.total_steps > 0:
    return int(config.train.total_steps)
  bins = sum(_count_bins(_shards(data.sources[n].get("packed_dir", "") or
                                 os.path.join(data.packed_dir, n))) for n in data.sources.keys())
  steps = int(np.ceil(config.train.num_epochs * bins / data.batch_size))
  if steps < 1:
    raise ConfigError(f"dataset of {bins} bins gives no step at batch_size {data.batch_size}")
  return steps


def make_iterator(data: ml_collections.ConfigDict):
  return pipeline.make_iterator(data)


# --- build ---------------------------------------------------------------------------------------


def build(config: ml_collections.ConfigDict, workdir: str, *, prepare_data: bool = True) -> Trainer:
  validate(config, workdir)
  mesh = setup.make_mesh(config)
  data = prepare(config, workdir) if prepare_data else config.data
  return setup.build_trainer(config, workdir, mesh, count_total_steps(config, data), data)


# --- loop ----------------------------------------------------------------------------------------


def fingerprints(batch: dict[str, np.ndarray]) -> list[int]:
  """crc32 per bin of its tokens (identifies which bins a step trained on)."""
  return [zlib.crc32(np.ascontiguousarray(row).tobytes()) for row in batch["tokens"]]


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Train (or resume) one SFT stage; returns the summary (also <workdir>/summary.json)."""
  wall0 = time.perf_counter()
  setup.enable_compile_cache(config.get("compile_cache_dir", ""))
  t = build(config, workdir)
  done = lifecycle.finished_summary(workdir)
  if done is not None and ckpt_lib.has_final_params(workdir):
    print(f"{workdir}: already complete ({done.get('steps')} steps); nothing to do", flush=True)
    return done
  metrics_lib.write_manifest(workdir, config, t.mesh, {"total_steps": t.total_steps})

  # checkpoint: resume or init
  run = lifecycle.Run(config, workdir, t)
  iterator = make_iterator(t.data)
  state, data_state, start = run.resume_or_init()
  if data_state is not None:
    iterator.set_state(data_state)

  # step
  scfg = step_lib.StepConfig(**config.step.to_dict())
  first = next(iterator)
  train_step = step_lib.jit_train_step(t.graphdef, t.rest, t.tx, scfg, t.mesh, t.shardings, first)
  schedule = opt_lib.schedule(opt_lib.OptimizerConfig.from_config(config.optimizer, t.total_steps))

  peak, peak_src = metrics_lib.device_peak_tflops(config.log.peak_tflops_per_device)
  logger = metrics_lib.Logger.from_config(workdir, config, t.total_steps, peak)
  print(f"{config.get('name', '')}: {t.total_steps} steps, batch {t.data.batch_size} x "
        f"{t.data.seq_len} tokens, mesh {dict(t.mesh.shape)}, peak {peak:.3f} TFLOP/s/device "
        f"({peak_src})", flush=True)
  run.logger = logger
  profiler = metrics_lib.Profiler(config.log.profile_steps, os.path.join(workdir, "profile"))
  diverged = run.diverged
  eval_every = config.eval.get("every_steps", 0) if config.get("eval") is not None else 0

  last: dict[str, float] = {}
  batch = first
  pending = None  # (step, metrics on device, flops, extra): read one step late to keep dispatch async
  step = start
  with run.guarded():
    while step < t.total_steps:
      profiler.before_step(step)
      flops = flops_lib.batch_flops(t.model_cfg, batch, loss_chunk_size=scfg.loss_chunk_size)
      extra = {"lr": float(schedule(step))}
      if config.log.batch_fingerprints:
        extra["bins"] = fingerprints(batch)
      with jax.set_mesh(t.mesh):
        state, metrics = train_step(state, t.device_batch(batch))
      step += 1
      if pending is not None:
        last = _record(logger, pending, scfg, diverged) or last
      pending = (step, metrics, flops, extra)
      profiler.after_step(step - 1, metrics)
      stopping = run.save_if_due(step, state, iterator.get_state,
                                 before_save=lambda: jax.block_until_ready(metrics))
      if eval_every and step % eval_every == 0 and step < t.total_steps and not stopping:
        results = evaluation.run_all(t, state.params, config, data_root(config, workdir))
        logger.scalars(step, {f"eval/{k}": v for k, v in results.items()})
      if stopping:   # on the last step a SIGTERM falls through to the final save below
        last = _record(logger, pending, scfg, diverged) or last
        return run.stopped(step)
      if step < t.total_steps:
        batch = next(iterator)
    if pending is not None:
      last = _record(logger, pending, scfg, diverged) or last

  # checkpoint: final state + params for the next stage
  run.finish(step, state, iterator.get_state(), setup.final_params(t, state.params))

  eval_results = {}
  if config.get("eval") is not None:
    eval_results = evaluation.run_all(t, state.params, config, data_root(config, workdir))
    logger.scalars(step, {f"eval/{k}": v for k, v in eval_results.items()})
  logger.close()
  rows = metrics_lib.read_metrics(workdir)
  losses = [r["loss"] for r in rows if "loss" in r and "step" in r]
  stage_flops = flops_lib.stage_flops(t.model_cfg, bins=t.total_steps * t.data.batch_size,
                                      epochs=1, seq_len=t.data.seq_len)
  per_step = _last_per_step(rows)
  summary = {
      "name": config.get("name", ""), "steps": step, "total_steps": t.total_steps,
      "tokens": float(sum(r.get("trained_tokens", 0.0) for r in per_step)),
      # FLOPs of the batches really trained (a resumed run counts each step once).
      "flops": {k: float(sum(r.get(f"flops_{k}", 0.0) for r in per_step))
                for k in ("6nd", "total", "model")},
      "first_loss": losses[0] if losses else None,
      "final_loss": float(last.get("loss", losses[-1] if losses else float("nan"))),
      "flops_6nd_run": stage_flops["flops_6nd"],
      "mfu_6n": last.get("mfu_6n"), "mfu_total": last.get("mfu_total"),
      "mfu_model": last.get("mfu_model"),
      "tokens_per_s": last.get("tokens_per_s"),
      "nonfinite_steps": int(np.asarray(state.nonfinite_steps)),
      "wall_s": time.perf_counter() - wall0, "eval": eval_results,
      "init_from": config.init.from_dir,   # the params it started from ('' fresh)
  }
  return run.write_summary(summary)


def _record(logger: metrics_lib.Logger, pending: tuple, scfg: step_lib.StepConfig,
            diverged: guards.NonFiniteGuard) -> dict | None:
  step, metrics, flops, extra = pending
  host = jax.device_get(metrics)
  if int(host["nonfinite"]) and scfg.nonfinite == "stop":
    raise FloatingPointError(
        f"step {step}: non-finite loss or gradient (loss={float(host['loss'])}, "
        f"grad_norm={float(host['grad_norm'])}); set config.step.nonfinite='skip' to skip such updates")
  logged = logger.step(step, host, flops, extra)
  diverged.update(step, host)
  return logged


def _last_per_step(rows: list[dict]) -> list[dict]:
  """Per-step rows, keeping the latest occurrence of each step (a resumed run re-logs some)."""
  by_step = {}
  for r in rows:
    if "loss" in r and "trained_tokens" in r:
      by_step[r["step"]] = r
  return [by_step[k] for k in sorted(by_step)]
