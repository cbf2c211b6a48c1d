"""The SFT trainer: `train(config, workdir)` in named sections.

  validate    bad input fails here, before any compile
  mesh        devices -> Mesh (data × fsdp × tensor)
  data        synth (tiny) -> pack if missing -> Grain iterator (+ resume state)
  model       config -> MageVL / Qwen3 factory, abstract state, shardings
  shard       param shardings from the logical rules; optimizer-state shardings follow
  init        resume from <workdir>/checkpoints, else init.from_dir (stage workdir / HF), else fresh
  step        the jitted, donated train step
  checkpoint  periodic async saves, SIGTERM save-and-exit, final params export
  loop        steps, metrics, profiler, evaluation, summary.json
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
import zlib
from typing import Any

import jax
import ml_collections
import numpy as np

from configs import models as model_presets
from mage_jax import sharding
from mage_jax.train import checkpoint as ckpt_lib
from mage_jax.train import flops as flops_lib
from mage_jax.train import metrics as metrics_lib
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import state as state_lib
from mage_jax.train import step as step_lib

SUMMARY = "summary.json"


class ConfigError(ValueError):
  pass


# --- validate ------------------------------------------------------------------------------------


def validate(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Cheap checks of everything a run needs; raises ConfigError naming the field."""
  for section in ("model", "mesh", "data", "optimizer", "step", "train", "init", "checkpoint", "log"):
    if section not in config:
      raise ConfigError(f"config has no `{section}` section")
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, ".write_probe")
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    raise ConfigError(f"--workdir={workdir!r} is not writable: {e}") from None
  init = config.init.from_dir
  if init and init_kind(init) is None:
    raise ConfigError(
        f"config.init.from_dir={init!r}: not a completed stage workdir (final_params.meta.json) "
        "nor an HF directory (config.json + *.safetensors)")
  if config.init.get("vision_dir") and init_kind(config.init.vision_dir) != "hf":
    raise ConfigError(f"config.init.vision_dir={config.init.vision_dir!r} is not an HF directory")
  step_lib.StepConfig(**config.step.to_dict())
  opt_lib.OptimizerConfig.from_config(config.optimizer, total_steps=1)
  if config.data.batch_size % max(config.step.grad_accum_steps, 1):
    raise ConfigError(f"config.data.batch_size={config.data.batch_size} is not divisible by "
                      f"config.step.grad_accum_steps={config.step.grad_accum_steps}")
  if not list(config.data.sources.keys()):
    raise ConfigError("config.data.sources is empty")
  model_presets.build_model_config(config.model)


def init_kind(path: str) -> str | None:
  if not os.path.isdir(path):
    return None
  if ckpt_lib.has_final_params(path):
    return "stage"
  files = os.listdir(path)
  if "config.json" in files and any(f.endswith(".safetensors") for f in files):
    return "hf"
  return None


# --- data ----------------------------------------------------------------------------------------


def synth_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  synth = config.get("synth")
  return os.path.abspath((synth.out if synth is not None and synth.out else "")
                         or os.path.join(workdir, "synth"))


def prepare(config: ml_collections.ConfigDict, workdir: str) -> ml_collections.ConfigDict:
  """Resolve data paths, generate synthetic data (tiny) and pack if missing.

  Returns the resolved `data` section; raises ConfigError for a missing data
  path or an empty dataset.
  """
  from mage_jax.data import records
  data = ml_collections.ConfigDict(config.data.to_dict())
  synth = config.get("synth")
  root = synth_dir(config, workdir)
  if synth is not None and synth.enabled and not os.path.exists(os.path.join(root, "manifest.json")):
    from mage_jax.data import synth as synth_lib
    print(f"generating synthetic data in {root}", flush=True)
    synth_lib.generate(root, seed=synth.seed, episodes=synth.episodes, grounding=synth.grounding,
                       width=synth.width, height=synth.height)
  base = root if synth is not None and synth.enabled else os.getcwd()
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
    if not records.shard_paths(d) or _count_bins(records.shard_paths(d)) == 0:
      raise ConfigError(f"data source {name!r}: no bins in {d} (empty dataset)")
  return data


def heldout_dir(data: ml_collections.ConfigDict) -> str:
  """Where prepare() packs held-out episodes: beside the training shards."""
  return os.path.normpath(data.packed_dir) + "_heldout"


def run_pack(data: ml_collections.ConfigDict, out_dir: str, workers: int = 1,
             heldout_dir: str = "", heldout_episodes: int = 0) -> None:
  """Render and pack the JSONL sources into `out_dir` (mage_jax.data.pack_job).

  Safe in the trainer's process, which already runs JAX threads: workers == 1
  renders here without forking, and more workers use a spawn-context pool."""
  from mage_jax.data import pack_job
  m = pack_job.pack(data, out_dir, workers, heldout_dir=heldout_dir,
                    heldout_episodes=heldout_episodes)
  held = sum(s["heldout"]["episodes"] for s in m["sources"].values())
  print(f"packed {m['samples']} samples into {m['bins']} bins ({m['skipped_total']} skipped; "
        f"token fill {m['token_fill']:.2f})" + (f"; {held} episodes held out" if held else ""),
        flush=True)


def _shards(d: str) -> list[str]:
  from mage_jax.data import records
  try:
    return records.shard_paths(d) if os.path.isdir(d) else []
  except (FileNotFoundError, ValueError):
    return []


def _count_bins(paths: list[str]) -> int:
  import grain
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
  from mage_jax.data import pipeline
  return pipeline.make_iterator(data)


def to_device(batch: dict[str, np.ndarray], mesh: Any, data: ml_collections.ConfigDict):
  from mage_jax.data import pipeline
  return pipeline.to_global(batch, mesh, tuple(data.data_axes))


def params_from_hf(path: str, vision_dir: str, fresh_params: Any, model_cfg: Any, mesh: Any) -> Any:
  """Params of `model_cfg` with the LM (and head) from an HF dir; the ViT from
  `vision_dir` when given, else kept fresh. A Qwen3 LM with a tied head gives
  Mage-VL's untied head its embedding transposed."""
  from mage_jax.models.config import MageVLConfig
  from mage_jax.weights import hf
  src_cfg, (_, src_state) = hf.load_hf(path, mesh=mesh, return_state=True)
  import flax.nnx as nnx
  src = nnx.to_pure_dict(src_state)
  ours = nnx.to_pure_dict(fresh_params)
  if not isinstance(model_cfg, MageVLConfig):
    ours = src
  elif isinstance(src_cfg, MageVLConfig):
    ours = src if not vision_dir else {**src, "visual": ours["visual"]}
  else:  # Qwen3ForCausalLM: model/..., lm_head/... (absent when tied)
    ours["language_model"] = src["model"]
    if "lm_head" in ours:
      ours["lm_head"] = src.get("lm_head") or {"kernel": src["model"]["embed_tokens"]["embedding"].T}
  if vision_dir:
    _, (_, vstate) = hf.load_hf(vision_dir, mesh=mesh, return_state=True)
    ours["visual"] = nnx.to_pure_dict(vstate)["visual"]
  params = jax.tree_util.tree_map(lambda x: x, fresh_params)
  try:
    nnx.replace_by_pure_dict(params, ours)
  except (KeyError, ValueError) as e:
    raise ConfigError(f"config.init.from_dir={path!r} does not fit the configured model: {e}") from None
  expected = state_lib.param_shapes(fresh_params)
  got = state_lib.param_shapes(params)
  bad = [k for k in expected if expected[k][0] != got.get(k, (None,))[0]]
  if bad:
    raise ConfigError(f"config.init.from_dir={path!r}: shapes differ from the model for {bad[:5]}")
  return params


# --- model ---------------------------------------------------------------------------------------


def model_factory(model_cfg: Any):
  from mage_jax.models.config import MageVLConfig, Qwen3Config
  if isinstance(model_cfg, MageVLConfig):
    from mage_jax.models.mage_vl import MageVL
    return lambda rngs: MageVL(model_cfg, rngs=rngs)
  if isinstance(model_cfg, Qwen3Config):
    from mage_jax.models.qwen3 import Qwen3ForCausalLM
    return lambda rngs: Qwen3ForCausalLM(model_cfg, rngs=rngs)
  raise ConfigError(f"model arch {type(model_cfg).__name__} cannot be trained with the SFT loop")


@dataclasses.dataclass
class Trainer:
  """Everything built before the first step (inspectable from notebooks/tests)."""
  config: ml_collections.ConfigDict
  workdir: str
  mesh: Any
  model_cfg: Any
  graphdef: Any
  rest: Any
  tx: Any
  shardings: state_lib.TrainState
  abstract: state_lib.TrainState
  total_steps: int
  data: ml_collections.ConfigDict
  meta: dict
  jitted: dict = dataclasses.field(default_factory=dict)  # compiled helpers reused across calls (eval)


def build(config: ml_collections.ConfigDict, workdir: str, *, prepare_data: bool = True) -> Trainer:
  validate(config, workdir)
  # mesh
  try:
    mesh = sharding.make_mesh(config.mesh)
  except ValueError as e:
    raise ConfigError(f"config.mesh: {e}") from None
  shards = int(np.prod([mesh.shape[a] for a in config.data.data_axes if a in mesh.axis_names]))
  if config.data.batch_size % shards:
    raise ConfigError(f"config.data.batch_size={config.data.batch_size} is not divisible by the "
                      f"{shards} data-parallel shards of mesh {dict(mesh.shape)}")
  # data
  data = prepare(config, workdir) if prepare_data else config.data
  total_steps = count_total_steps(config, data)
  # model
  model_cfg = model_presets.build_model_config(config.model)
  factory = model_factory(model_cfg)
  ocfg = opt_lib.OptimizerConfig.from_config(config.optimizer, total_steps=total_steps)
  import flax.nnx as nnx
  abstract_params = state_lib.split_model(nnx.eval_shape(lambda: factory(nnx.Rngs(0))))[1]
  tx = opt_lib.make_optimizer(ocfg, abstract_params)
  graphdef, rest, abstract = state_lib.abstract_state(factory, tx)
  # shard
  param_sh = sharding.param_shardings(abstract.params, mesh)
  shardings = state_lib.state_shardings(tx, abstract, param_sh, mesh)
  abstract = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
  meta = ckpt_lib.make_meta(model_cfg, abstract.params, {"config_name": config.get("name", "")})
  return Trainer(config, workdir, mesh, model_cfg, graphdef, rest, tx, shardings, abstract,
                 total_steps, data, meta)


# --- init ----------------------------------------------------------------------------------------


def initial_state(t: Trainer) -> state_lib.TrainState:
  """Fresh state, with params from init.from_dir when given."""
  factory = model_factory(t.model_cfg)
  src = t.config.init.from_dir
  with jax.set_mesh(t.mesh):
    state, _ = state_lib.init_state(factory, t.tx, t.config.seed, t.shardings)
    if not src:
      return state
    kind = init_kind(src)
    if kind == "stage":
      params = ckpt_lib.load_final_params(src, t.abstract.params, t.meta)
    else:
      params = params_from_hf(src, t.config.init.get("vision_dir", ""), state.params,
                                        t.model_cfg, t.mesh)
    params = jax.device_put(params, t.shardings.params)
    return jax.jit(lambda p, s: state_lib._fresh(p, t.tx, s.rng),
                   out_shardings=t.shardings)(params, state)


# --- loop ----------------------------------------------------------------------------------------


class StopSignal:
  def __init__(self):
    self.requested = False
    self._old = None

  def install(self) -> None:
    def handler(signum, frame):  # noqa: ARG001
      print(f"signal {signum}: saving a checkpoint and exiting after this step", flush=True)
      self.requested = True
    try:
      self._old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. notebooks): no handler
      self._old = None

  def uninstall(self) -> None:
    if self._old is not None:
      signal.signal(signal.SIGTERM, self._old)


def fingerprints(batch: dict[str, np.ndarray]) -> list[int]:
  """crc32 per bin of its tokens (identifies which bins a step trained on)."""
  return [zlib.crc32(np.ascontiguousarray(row).tobytes()) for row in batch["tokens"]]


def enable_compile_cache(path: str) -> None:
  """Persistent compilation cache in `path` (first call wins: JAX reads the
  setting when it first compiles)."""
  if path and not jax.config.jax_compilation_cache_dir:
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.abspath(path))


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Train (or resume) one SFT stage; returns the summary (also <workdir>/summary.json)."""
  wall0 = time.perf_counter()
  enable_compile_cache(config.get("compile_cache_dir", ""))
  t = build(config, workdir)
  if os.path.exists(os.path.join(workdir, SUMMARY)) and ckpt_lib.has_final_params(workdir):
    with open(os.path.join(workdir, SUMMARY)) as f:
      summary = json.load(f)
    print(f"{workdir}: already complete ({summary.get('steps')} steps); nothing to do", flush=True)
    return summary
  metrics_lib.write_manifest(workdir, config, t.mesh, {"total_steps": t.total_steps})

  # checkpoint: resume or init
  ckpt = ckpt_lib.Checkpointer(workdir, keep=config.checkpoint.keep,
                               async_save=config.checkpoint.async_save)
  iterator = make_iterator(t.data)
  restored = ckpt.restore(t.abstract, t.meta)
  if restored is not None:
    state, data_state, start = restored
    if data_state is not None:
      iterator.set_state(data_state)
    print(f"resumed from {ckpt.directory}/{start}", flush=True)
  else:
    state = initial_state(t)
    start = 0
    if config.init.from_dir:
      print(f"initialised params from {config.init.from_dir}", flush=True)

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
  profiler = metrics_lib.Profiler(config.log.profile_steps, os.path.join(workdir, "profile"))
  stop = StopSignal()
  stop.install()
  eval_every = config.eval.get("every_steps", 0) if config.get("eval") is not None else 0

  last: dict[str, float] = {}
  batch = first
  pending = None  # (step, metrics on device, flops, extra): read one step late to keep dispatch async
  step = start
  try:
    while step < t.total_steps:
      profiler.before_step(step)
      flops = flops_lib.batch_flops(t.model_cfg, batch)
      extra = {"lr": float(schedule(step))}
      if config.log.batch_fingerprints:
        extra["bins"] = fingerprints(batch)
      with jax.set_mesh(t.mesh):
        state, metrics = train_step(state, to_device(batch, t.mesh, t.data))
      step += 1
      if pending is not None:
        last = _record(logger, pending, scfg) or last
      pending = (step, metrics, flops, extra)
      profiler.after_step(step - 1, metrics)
      save_now = (step % config.checkpoint.every_steps == 0 or stop.requested)
      if save_now and step < t.total_steps:
        jax.block_until_ready(metrics)
        ckpt.save(step, state, iterator.get_state(), t.meta, force=stop.requested)
      if (eval_every and step % eval_every == 0 and step < t.total_steps
          and not stop.requested):
        from mage_jax.train import evaluation
        results = evaluation.run_all(t, state.params, config, workdir)
        logger.scalars(step, {f"eval/{k}": v for k, v in results.items()})
      if stop.requested and step < t.total_steps:  # on the last step: the final save below
        last = _record(logger, pending, scfg) or last
        ckpt.close()
        logger.close()
        print(f"stopped at step {step} on SIGTERM; checkpoint saved", flush=True)
        return {"stopped": True, "steps": step}
      if step < t.total_steps:
        batch = next(iterator)
    if pending is not None:
      last = _record(logger, pending, scfg) or last
  finally:
    stop.uninstall()

  # checkpoint: final state + params for the next stage
  ckpt.save(step, state, iterator.get_state(), t.meta, force=True)
  ckpt.close()
  ckpt_lib.save_final_params(workdir, state.params, t.meta)

  eval_results = {}
  if config.get("eval") is not None:
    from mage_jax.train import evaluation
    eval_results = evaluation.run_all(t, state.params, config, workdir)
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
  }
  with open(os.path.join(workdir, SUMMARY), "w") as f:
    json.dump(summary, f, indent=1)
  return summary


def _record(logger: metrics_lib.Logger, pending: tuple, scfg: step_lib.StepConfig) -> dict | None:
  step, metrics, flops, extra = pending
  host = jax.device_get(metrics)
  if int(host["nonfinite"]) and scfg.nonfinite == "stop":
    raise FloatingPointError(
        f"step {step}: non-finite loss or gradient (loss={float(host['loss'])}, "
        f"grad_norm={float(host['grad_norm'])}); set config.step.nonfinite='skip' to skip such updates")
  return logger.step(step, host, flops, extra)


def _last_per_step(rows: list[dict]) -> list[dict]:
  """Per-step rows, keeping the latest occurrence of each step (a resumed run re-logs some)."""
  by_step = {}
  for r in rows:
    if "loss" in r and "trained_tokens" in r:
      by_step[r["step"]] = r
  return [by_step[k] for k in sorted(by_step)]
