"""What the SFT loop (train/loop.py) and the RL loop (rl/loop.py) build before their first step.

  errors      ConfigError: a bad config, reported by the launchers as a one-line usage error
  checks      sections present, workdir writable, init.from_dir / vision_dir usable
  mesh        config.mesh -> Mesh, the batch split over its data-parallel shards
  model       config -> MageVL / Qwen3 factory, optimizer, abstract state, shardings: a Trainer
  init        init.from_dir (stage workdir / HF dir) or fresh params
  compile     the persistent XLA compilation cache

Neither loop imports the other; both import this module.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import ml_collections
import numpy as np

from configs import models as model_presets
from mage_jax import sharding
from mage_jax.train import checkpoint as ckpt_lib
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import state as state_lib

SUMMARY = "summary.json"


class ConfigError(ValueError):
  pass


# --- checks --------------------------------------------------------------------------------------


def check_sections(config: ml_collections.ConfigDict, sections: tuple[str, ...]) -> None:
  for section in sections:
    if section not in config:
      raise ConfigError(f"config has no `{section}` section")


def check_workdir(workdir: str) -> None:
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, ".write_probe")
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
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


# --- mesh ----------------------------------------------------------------------------------------


def make_mesh(config: ml_collections.ConfigDict) -> Any:
  """The mesh of config.mesh; config.data.batch_size must split over its data-parallel shards."""
  try:
    mesh = sharding.make_mesh(config.mesh)
  except ValueError as e:
    raise ConfigError(f"config.mesh: {e}") from None
  shards = int(np.prod([mesh.shape[a] for a in config.data.data_axes if a in mesh.axis_names]))
  if config.data.batch_size % shards:
    raise ConfigError(f"config.data.batch_size={config.data.batch_size} is not divisible by the "
                      f"{shards} data-parallel shards of mesh {dict(mesh.shape)}")
  return mesh


def to_device(batch: dict[str, np.ndarray], mesh: Any, data: ml_collections.ConfigDict):
  from mage_jax.data import pipeline
  return pipeline.to_global(batch, mesh, tuple(data.data_axes))


# --- model ---------------------------------------------------------------------------------------


def model_factory(model_cfg: Any):
  from mage_jax.models.config import MageVLConfig, Qwen3Config
  if isinstance(model_cfg, MageVLConfig):
    from mage_jax.models.mage_vl import MageVL
    return lambda rngs: MageVL(model_cfg, rngs=rngs)
  if isinstance(model_cfg, Qwen3Config):
    from mage_jax.models.qwen3 import Qwen3ForCausalLM
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


def build_trainer(config: ml_collections.ConfigDict, workdir: str, mesh: Any, total_steps: int,
                  data: ml_collections.ConfigDict) -> Trainer:
  """Model, optimizer over `total_steps`, abstract state with its shardings, checkpoint meta."""
  model_cfg = model_presets.build_model_config(config.model)
  factory = model_factory(model_cfg)
  ocfg = opt_lib.OptimizerConfig.from_config(config.optimizer, total_steps=total_steps)
  import flax.nnx as nnx
  abstract_params = state_lib.split_model(nnx.eval_shape(lambda: factory(nnx.Rngs(0))))[1]
  tx = opt_lib.make_optimizer(ocfg, abstract_params)
  graphdef, rest, abstract = state_lib.abstract_state(factory, tx)
  param_sh = sharding.param_shardings(abstract.params, mesh)
  shardings = state_lib.state_shardings(tx, abstract, param_sh, mesh)
  abstract = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
  meta = ckpt_lib.make_meta(model_cfg, abstract.params, {"config_name": config.get("name", "")})
  return Trainer(config, workdir, mesh, model_cfg, graphdef, rest, tx, shardings, abstract,
                 total_steps, data, meta)


# --- init ----------------------------------------------------------------------------------------


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


def initial_state(t: Trainer) -> state_lib.TrainState:
  """Fresh state, with params from init.from_dir when given."""
  factory = model_factory(t.model_cfg)
  src = t.config.init.from_dir
  with jax.set_mesh(t.mesh):
    state, _ = state_lib.init_state(factory, t.tx, t.config.seed, t.shardings)
    if not src:
      return state
    if init_kind(src) == "stage":
      params = ckpt_lib.load_final_params(src, t.abstract.params, t.meta)
    else:
      params = params_from_hf(src, t.config.init.get("vision_dir", ""), state.params,
                              t.model_cfg, t.mesh)
    params = jax.device_put(params, t.shardings.params)
    return jax.jit(lambda p, s: state_lib._fresh(p, t.tx, s.rng),
                   out_shardings=t.shardings)(params, state)


# --- compile -------------------------------------------------------------------------------------


def enable_compile_cache(path: str) -> None:
  """Persistent compilation cache in `path` (first call wins: JAX reads the
  setting when it first compiles)."""
  if path and not jax.config.jax_compilation_cache_dir:
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.abspath(path))
