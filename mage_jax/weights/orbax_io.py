"""HF directory <-> Orbax checkpoint of the model parameters.

Layout of an Orbax model checkpoint written here:

    <dir>/config.json      the HF config.json of the model (architecture + sizes)
    <dir>/mage_jax.json    {"param_dtype": ...} (how the params are stored)
    <dir>/params/          Orbax StandardCheckpointer: nested dict of the nnx
                           param state, path elements as string keys

Restores go straight into the target shardings (one device without a mesh),
so neither direction materialises a second host copy of the model.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any, Iterator

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from mage_jax.weights import hf
from mage_jax.weights.names import ModelConfig

PARAMS_DIR = "params"
META_FILE = "mage_jax.json"
# Orbax logs a failed read of each array at ERROR through absl, with TensorStore's whole spec:
# thousands of lines for one damaged checkpoint. The caller reports the failure in one line.
_NOISY_LOGGERS = ("absl", "orbax", "orbax.checkpoint", "jax")


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
  """Orbax/absl/JAX logging off (up to CRITICAL) for a read that may fail."""
  loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
  levels = [lg.level for lg in loggers]
  for lg in loggers:
    lg.setLevel(logging.CRITICAL)
  try:
    yield
  finally:
    for lg, level in zip(loggers, levels):
      lg.setLevel(level)


def one_line(e: BaseException, limit: int = 200) -> str:
  """`Type: first line of the message`, cut to `limit` characters (TensorStore errors embed
  their whole multi-line spec)."""
  text = (str(e).strip().splitlines() or [""])[0]
  text = text if len(text) <= limit else text[:limit] + "..."
  return f"{type(e).__name__}: {text}"


def _nested_str(flat: dict[str, Any]) -> dict:
  out: dict = {}
  for path, value in flat.items():
    node = out
    parts = path.split("/")
    for k in parts[:-1]:
      node = node.setdefault(k, {})
    node[parts[-1]] = value
  return out


def _flat_str(tree: dict, prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in tree.items():
    p = f"{prefix}/{k}" if prefix else str(k)
    out.update(_flat_str(v, p) if isinstance(v, dict) else {p: v})
  return out


def save_orbax(model_or_state: Any, cfg: ModelConfig, path: str) -> None:
  """Write params + config to an Orbax checkpoint dir (overwrites)."""
  path = os.path.abspath(path)
  flat = {p: leaf for p, (_, leaf) in hf.flat_params(hf.params_of(model_or_state)).items()}
  dtypes = {np.dtype(x.dtype).name for x in flat.values()}
  os.makedirs(path, exist_ok=True)
  with ocp.StandardCheckpointer() as ckptr:
    ckptr.save(os.path.join(path, PARAMS_DIR), _nested_str(flat), force=True)
    ckptr.wait_until_finished()
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(cfg.to_hf(), f, indent=2)
  with open(os.path.join(path, META_FILE), "w") as f:
    json.dump({"param_dtype": dtypes.pop() if len(dtypes) == 1 else "float32"}, f)


def load_orbax(path: str, *, mesh: jax.sharding.Mesh | None = None,
               param_dtype: str | None = None, return_state: bool = False, **runtime):
  """Orbax checkpoint dir -> (config, model) or (config, (graphdef, state))."""
  path = os.path.abspath(path)
  params_dir = os.path.join(path, PARAMS_DIR)
  if not os.path.isdir(params_dir):
    raise FileNotFoundError(f"{path}: no {PARAMS_DIR}/ (not an Orbax model checkpoint "
                            f"written by mage_jax.weights.orbax_io)")
  meta_file = os.path.join(path, META_FILE)
  stored = json.load(open(meta_file))["param_dtype"] if os.path.exists(meta_file) else "float32"
  cfg = hf.read_config(path, param_dtype=param_dtype or stored, **runtime)
  graphdef, abstract_state = nnx.split(hf.abstract_model(cfg))
  flat = hf.flat_params(abstract_state)
  specs = hf.names_lib.tensor_specs(cfg)
  hf.check_table(specs, flat, cfg)
  shardings = hf.target_shardings(abstract_state, mesh)
  target = _nested_str({p: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings[p])
                        for p, (_, leaf) in flat.items()})
  with ocp.StandardCheckpointer() as ckptr:
    try:
      with quiet_orbax():
        meta = ckptr.metadata(params_dir)
      tree = getattr(meta, "item_metadata", meta)
      stored_paths = set(_flat_str(dict(tree.tree if hasattr(tree, "tree") else tree)))
    except Exception as e:  # noqa: BLE001 - any failure to read means: damaged or not Orbax
      raise ValueError(f"{params_dir}: unreadable Orbax metadata ({one_line(e)})") from None
    if stored_paths != set(_flat_str(target)):
      raise hf.CheckpointMismatchError(
          f"{params_dir}: params do not match {hf.architecture(cfg)} from its config.json: "
          f"missing {sorted(set(_flat_str(target)) - stored_paths)}, "
          f"unexpected {sorted(stored_paths - set(_flat_str(target)))}")
    try:
      with quiet_orbax():
        restored = _flat_str(ckptr.restore(params_dir, target))
    except Exception as e:  # noqa: BLE001
      raise ValueError(f"{params_dir}: unreadable Orbax array data ({one_line(e)})") from None
  pure: dict = {}
  for p, (path_tuple, _) in flat.items():
    node = pure
    for k in path_tuple[:-1]:
      node = node.setdefault(k, {})
    node[path_tuple[-1]] = restored[p]
  nnx.replace_by_pure_dict(abstract_state, pure)
  if return_state:
    return cfg, (graphdef, abstract_state)
  return cfg, nnx.merge(graphdef, abstract_state)


def hf_to_orbax(src: str, dst: str, *, mesh=None, param_dtype: str = "float32",
                progress: bool = False) -> ModelConfig:
  cfg, state = hf.load_hf(src, mesh=mesh, param_dtype=param_dtype, return_state=True,
                          progress=progress)
  save_orbax(state, cfg, dst)
  return cfg


def orbax_to_hf(src: str, dst: str, *, mesh=None, dtype: str = "bfloat16",
                max_shard_bytes: int = hf.DEFAULT_MAX_SHARD_BYTES, progress: bool = False,
                tokenizer_dir: str | None = None, template_dir: str | None = None) -> ModelConfig:
  cfg, state = load_orbax(src, mesh=mesh, return_state=True)
  hf.save_hf(state, cfg, dst, dtype=dtype, max_shard_bytes=max_shard_bytes, progress=progress,
             tokenizer_dir=tokenizer_dir, template_dir=template_dir)
  return cfg
