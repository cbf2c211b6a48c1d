"""What the SFT loop (train/loop.py) and the RL loop (rl/loop.py) build before their first step.

  errors      ConfigError: a bad config, reported by the launchers as a one-line usage error
  checks      sections present, every numeric field in range (NUMERIC_FIELDS), workdir
              writable, init.from_dir / vision_dir usable
  mesh        config.mesh -> Mesh, the batch split over its data-parallel shards
  model       config -> MageVL / Qwen3 factory, optimizer, abstract state, shardings: a Trainer
  init        init.from_dir (stage workdir / HF dir) or fresh params
  compile     the persistent XLA compilation cache

Neither loop imports the other; both import this module.
"""
from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from typing import Any, Callable, Mapping

import jax
import ml_collections
import numpy as np

from mage_jax import sharding
from mage_jax.data import pipeline
from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import MageVLConfig, Qwen3Config
from mage_jax.models.config import build_model_config
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from mage_jax.train import checkpoint as ckpt_lib
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import state as state_lib
from mage_jax.train import step as step_lib
from mage_jax.weights import hf

SUMMARY = "summary.json"


class ConfigError(ValueError):
  pass


# --- checks --------------------------------------------------------------------------------------


def check_config(config: ml_collections.ConfigDict, sections: tuple[str, ...],
                 more_fields: Mapping[str, Rule] | None = None) -> None:
  """What a config alone must satisfy (no files read): its sections, the step and optimizer
  fields (unknown ones named), every numeric field in range (NUMERIC_FIELDS and the caller's
  `more_fields`: launch.rl passes its own section's, rl/config_fields.py)."""
  for section in sections:
    if section not in config:
      raise ConfigError(f"config has no `{section}` section")
  try:
    step_lib.StepConfig(**config.step.to_dict())
  except TypeError as e:  # an unknown field: "__init__() got an unexpected keyword argument 'x'"
    raise ConfigError(f"config.step: {str(e).split(') ', 1)[-1]}") from None
  except ValueError as e:
    raise ConfigError(f"config.{e}") from None
  try:
    opt_lib.OptimizerConfig.from_config(config.optimizer, total_steps=1)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  check_numbers(config, more_fields)


Rule = tuple[str, Callable[[Any], bool]]


def _is_int(v: Any) -> bool:
  return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


POSITIVE: Rule = ("a finite number > 0", lambda v: _is_real(v) and v > 0)
NON_NEGATIVE: Rule = ("a finite number >= 0", lambda v: _is_real(v) and v >= 0)
FINITE: Rule = ("a finite number", _is_real)
FRACTION: Rule = ("a number in [0, 1]", lambda v: _is_real(v) and 0 <= v <= 1)
DECAY: Rule = ("a number in [0, 1)", lambda v: _is_real(v) and 0 <= v < 1)
COUNT: Rule = ("an integer >= 1", lambda v: _is_int(v) and v >= 1)
NON_NEGATIVE_INT: Rule = ("an integer >= 0", lambda v: _is_int(v) and v >= 0)
STEPS: Rule = ("-1 (from train.num_epochs) or an integer >= 1",
               lambda v: _is_int(v) and (v == -1 or v >= 1))
PATCH_SLOTS: Rule = ("an integer >= 0 and a multiple of 4 (one merged token = 2x2 patches)",
                     lambda v: _is_int(v) and v >= 0 and v % 4 == 0)

# Every numeric field whose bad value would crash a run late or quietly train something else.
# A field absent from a config (the RL config has no eval section) is not checked; `*` is
# every key of a mapping.
NUMERIC_FIELDS: dict[str, Rule] = {
    "optimizer.learning_rate": POSITIVE, "optimizer.warmup_steps": NON_NEGATIVE_INT,
    "optimizer.end_lr_ratio": FRACTION, "optimizer.b1": DECAY, "optimizer.b2": DECAY,
    "optimizer.eps": POSITIVE, "optimizer.weight_decay": NON_NEGATIVE,
    "optimizer.clip_norm": FINITE,  # <= 0 turns clipping off
    "optimizer.lr_multipliers.*": NON_NEGATIVE,
    "step.grad_accum_steps": COUNT, "step.loss_chunk_size": COUNT,
    "step.z_loss_weight": NON_NEGATIVE,
    "data.batch_size": COUNT, "data.seq_len": COUNT, "data.patch_budget": PATCH_SLOTS,
    "data.sources.*.weight": POSITIVE, "data.records_per_shard": COUNT, "data.pack_buffer": COUNT,
    "data.pack_workers": NON_NEGATIVE_INT, "data.worker_count": NON_NEGATIVE_INT,
    "data.worker_buffer_size": COUNT, "data.read_threads": COUNT, "data.read_prefetch": COUNT,
    "data.render.context_len": COUNT, "data.render.full_responses": NON_NEGATIVE_INT,
    "data.render.visual_turns": NON_NEGATIVE_INT, "data.render.min_pixels": COUNT,
    "data.render.max_pixels": COUNT,
    "train.num_epochs": POSITIVE, "train.total_steps": STEPS, "train.paper_bins": NON_NEGATIVE_INT,
    "train.max_nonfinite_steps": COUNT,
    "checkpoint.every_steps": COUNT, "checkpoint.keep": COUNT,
    "log.every_steps": COUNT, "log.peak_tflops_per_device": NON_NEGATIVE,
    "eval.every_steps": NON_NEGATIVE_INT, "eval.num_batches": COUNT,
    "eval.click_samples": NON_NEGATIVE_INT, "eval.max_new_tokens": COUNT,
    "prep.heldout_episodes": NON_NEGATIVE_INT,
    "synth.episodes": NON_NEGATIVE_INT, "synth.grounding": NON_NEGATIVE_INT,
    "synth.width": COUNT, "synth.height": COUNT,
    "episode.full_responses": NON_NEGATIVE_INT, "episode.visual_turns": NON_NEGATIVE_INT,
    "episode.context_len": COUNT, "episode.score_settle": NON_NEGATIVE,
    "env.width": COUNT, "env.height": COUNT, "env.command_timeout": POSITIVE,
    "env.max_output": COUNT, "env.home_mb": COUNT, "env.memory_mb": COUNT, "env.nproc": COUNT,
}


def _values(config: Any, path: list[str], prefix: str):
  """(dotted name, value) of every field of `config` that `path` (with `*`) names."""
  if not path:
    yield prefix, config
    return
  head, rest = path[0], path[1:]
  if not hasattr(config, "keys"):
    return
  for key in (list(config.keys()) if head == "*" else [head] if head in config else []):
    yield from _values(config[key], rest, f"{prefix}.{key}" if prefix else key)


def check_numbers(config: ml_collections.ConfigDict, more_fields: Mapping[str, Rule] | None = None) -> None:
  """Every field of NUMERIC_FIELDS (and `more_fields`) in range, and the numbers that must agree."""
  for pattern, (want, ok) in {**NUMERIC_FIELDS, **(more_fields or {})}.items():
    for name, value in _values(config, pattern.split("."), ""):
      if not ok(value):
        raise ConfigError(f"config.{name}={value!r}: must be {want}")
  if config.data.batch_size % config.step.grad_accum_steps:
    raise ConfigError(f"config.data.batch_size={config.data.batch_size} is not divisible by "
                      f"config.step.grad_accum_steps={config.step.grad_accum_steps}")
  render = config.data.get("render")
  if render is not None and render.min_pixels > render.max_pixels:
    raise ConfigError(f"config.data.render.min_pixels={render.min_pixels} exceeds "
                      f"config.data.render.max_pixels={render.max_pixels}")


def check_workdir(workdir: str) -> None:
  # A probe file of this process's own (unique name, removed on close): the processes of a
  # multi-host job check one shared workdir at once, and with one fixed name one removed the
  # probe under another (tests/test_multihost.py failed so once, session 42).
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=workdir, prefix=".write_probe.") as f:
      f.write("ok")
  except OSError as e:
    raise ConfigError(f"--workdir={workdir!r} is not writable: {e}") from None


def init_kind(path: str) -> str | None:
  """'stage' (a completed stage workdir), 'hf' (config.json + safetensors) or None."""
  if not os.path.isdir(path):
    return None
  if ckpt_lib.has_final_params(path):
    return "stage"
  files = os.listdir(path)
  if "config.json" in files and any(f.endswith(".safetensors") for f in files):
    return "hf"
  return None


def check_init(config: ml_collections.ConfigDict) -> None:
  init = config.init.from_dir
  if init and init_kind(init) is None:
    raise ConfigError(
        f"config.init.from_dir={init!r}: not a completed stage workdir (final_params.meta.json) "
        "nor an HF directory (config.json + *.safetensors)")
  if config.init.get("vision_dir") and init_kind(config.init.vision_dir) != "hf":
    raise ConfigError(f"config.init.vision_dir={config.init.vision_dir!r} is not an HF directory")
  path = config.model.get("compact_vocab", "")
  if path:
    if not os.path.isfile(path):
      raise ConfigError(f"config.model.compact_vocab={path!r}: no such file (a vocab.json of launch.pretrain)")


def compact_vocab(config: ml_collections.ConfigDict):
  """The CompactVocab of config.model.compact_vocab, or None (a plain vocabulary)."""
  path = config.model.get("compact_vocab", "")
  if not path:
    return None
  try:
    return CompactVocab.load(path)
  except (ValueError, KeyError, OSError) as e:
    raise ConfigError(f"config.model.compact_vocab={path!r}: {e}") from None


# --- mesh ----------------------------------------------------------------------------------------


def make_mesh(config: ml_collections.ConfigDict) -> Any:
  """The mesh of config.mesh; config.data.batch_size must split over its data-parallel shards."""
  try:
    mesh = sharding.make_mesh(config.mesh)
  except ValueError as e:
    raise ConfigError(f"config.mesh: {e}") from None
  shards = int(np.prod([mesh.shape[a] for a in sharding.batch_axes(mesh)]))
  if config.data.batch_size % shards:
    raise ConfigError(f"config.data.batch_size={config.data.batch_size} is not divisible by the "
                      f"{shards} data-parallel shards of mesh {dict(mesh.shape)}")
  return mesh


def to_device(batch: dict[str, np.ndarray], mesh: Any, data: ml_collections.ConfigDict):
  return pipeline.to_global(batch, mesh)


# --- model ---------------------------------------------------------------------------------------


def model_factory(model_cfg: Any):
  if isinstance(model_cfg, MageVLConfig):
    return lambda rngs: MageVL(model_cfg, rngs=rngs)
  if isinstance(model_cfg, Qwen3Config):
    return lambda rngs: Qwen3ForCausalLM(model_cfg, rngs=rngs)
  raise ConfigError(f"model arch {type(model_cfg).__name__} cannot be trained")


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
  # A compact vocabulary (config.model.compact_vocab): the model trains on its rows, batches are
  # mapped to them (`device_batch`) and the final params are expanded to `full_cfg`.
  vocab: Any = None
  full_cfg: Any = None

  def device_batch(self, batch: dict[str, np.ndarray], *, strict: bool = True) -> Any:
    """The batch on the mesh, on the compact rows when there is a vocabulary. strict: a trained
    target outside it is an error (SFT data the model could never predict); RL's sampled tokens
    pass strict=False and reach the rest row (rl/objective.py token_logprobs)."""
    if self.vocab is not None:
      batch = self.vocab.compact_batch(batch, strict=strict)
    return to_device(batch, self.mesh, self.data)

  def served_params(self, params: Any) -> tuple[Any, Any]:
    """(params, model config) an engine serves: the full vocabulary (expanded when compact)."""
    if self.vocab is None:
      return params, self.model_cfg
    return final_params(self, params)[0], self.full_cfg


def build_trainer(config: ml_collections.ConfigDict, workdir: str, mesh: Any, total_steps: int,
                  data: ml_collections.ConfigDict, optimizer_steps: int | None = None) -> Trainer:
  """Model, optimizer, abstract state with its shardings, checkpoint meta. The LR schedule spans
  `optimizer_steps` (default `total_steps`: one optimizer step per step of the run)."""
  full_cfg = build_model_config(config.model)
  vocab = compact_vocab(config)
  try:
    model_cfg = vocab.compact_model_config(full_cfg) if vocab is not None else full_cfg
  except ValueError as e:
    raise ConfigError(f"config.model.compact_vocab: {e}") from None
  factory = model_factory(model_cfg)
  ocfg = opt_lib.OptimizerConfig.from_config(config.optimizer, total_steps=optimizer_steps or total_steps)
  import flax.nnx as nnx   # keeps this module free of Flax at import time (start-up cost)
  abstract_params = state_lib.split_model(nnx.eval_shape(lambda: factory(nnx.Rngs(0))))[1]
  tx = opt_lib.make_optimizer(ocfg, abstract_params)
  graphdef, rest, abstract = state_lib.abstract_state(factory, tx)
  param_sh = sharding.param_shardings(abstract.params, mesh)
  shardings = state_lib.state_shardings(tx, abstract, param_sh, mesh)
  abstract = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
  meta = ckpt_lib.make_meta(model_cfg, abstract.params, {"config_name": config.get("name", "")})
  return Trainer(config, workdir, mesh, model_cfg, graphdef, rest, tx, shardings, abstract,
                 total_steps, data, meta, vocab=vocab, full_cfg=full_cfg)


# --- init ----------------------------------------------------------------------------------------


def params_from_hf(path: str, vision_dir: str, fresh_params: Any, model_cfg: Any, mesh: Any,
                   vocab: Any = None) -> Any:
  """Params of `model_cfg` with the LM (and head) from an HF dir; the ViT from
  `vision_dir` when given, else kept fresh. A Qwen3 LM with a tied head gives
  Mage-VL's untied head its embedding transposed. With a compact `vocab` the HF
  (full-vocabulary) rows are compacted (exact for a checkpoint it expanded)."""
  src_cfg, (_, src_state) = hf.load_hf(path, mesh=mesh, return_state=True)
  import flax.nnx as nnx   # keeps this module free of Flax at import time (start-up cost)
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
  if vocab is not None:
    ours = vocab.compact_params(jax.tree_util.tree_map(np.asarray, ours))
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


def initial_state(t: Trainer) -> state_lib.TrainState:
  """Fresh state, with params from init.from_dir when given."""
  factory = model_factory(t.model_cfg)
  src = t.config.init.from_dir
  with jax.set_mesh(t.mesh):
    state, _ = state_lib.init_state(factory, t.tx, t.config.seed, t.shardings)
    if not src:
      return state
    if init_kind(src) == "stage" and t.vocab is not None:
      params = compacted_stage_params(t, src)   # a stage's final params are full-vocabulary
    elif init_kind(src) == "stage":
      params = ckpt_lib.load_final_params(src, t.abstract.params, t.meta)
    else:
      params = params_from_hf(src, t.config.init.get("vision_dir", ""), state.params,
                              t.model_cfg, t.mesh, t.vocab)
    params = jax.device_put(params, t.shardings.params)
    return jax.jit(lambda p, s: state_lib._fresh(p, t.tx, s.rng),
                   out_shardings=t.shardings)(params, state)


def compacted_stage_params(t: Trainer, src: str) -> Any:
  """A completed stage's final (full-vocabulary) params as the compact model's: the kept rows, and
  the rest row of the others (exact for params a compact stage expanded: its rows were all equal)."""
  import flax.nnx as nnx   # keeps this module free of Flax at import time (start-up cost)
  full = state_lib.split_model(nnx.eval_shape(lambda: model_factory(t.full_cfg)(nnx.Rngs(0))))[1]
  meta = ckpt_lib.make_meta(t.full_cfg, full, {"config_name": t.config.get("name", "")})
  full = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                                full, sharding.param_shardings(full, t.mesh))
  try:
    loaded = ckpt_lib.load_final_params(src, full, meta)
  except ValueError as e:   # a stage of another model: one line naming the field
    raise ConfigError(f"config.init.from_dir={src!r} does not fit the configured model: {e}") from None
  pure = t.vocab.compact_params(jax.tree_util.tree_map(np.asarray, nnx.to_pure_dict(loaded)))
  params = state_lib.split_model(nnx.eval_shape(lambda: model_factory(t.model_cfg)(nnx.Rngs(0))))[1]
  nnx.replace_by_pure_dict(params, pure)
  return params


def final_params(t: Trainer, params: Any) -> tuple[Any, dict]:
  """(params, meta) a stage hands on: expanded to the full vocabulary when it trained a compact one."""
  if t.vocab is None:
    return params, t.meta
  import flax.nnx as nnx   # keeps this module free of Flax at import time (start-up cost)
  pure = t.vocab.expand_params(jax.tree_util.tree_map(np.asarray, nnx.to_pure_dict(jax.device_get(params))))
  full = state_lib.split_model(nnx.eval_shape(lambda: model_factory(t.full_cfg)(nnx.Rngs(0))))[1]
  nnx.replace_by_pure_dict(full, pure)
  return full, ckpt_lib.make_meta(t.full_cfg, full, {"config_name": t.config.get("name", "")})


# --- compile -------------------------------------------------------------------------------------


def enable_compile_cache(path: str) -> None:
  """Persistent compilation cache in `path` (first call wins: JAX reads the
  setting when it first compiles)."""
  if path and not jax.config.jax_compilation_cache_dir:
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.abspath(path))
