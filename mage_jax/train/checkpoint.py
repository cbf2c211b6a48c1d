"""Orbax checkpoints of the train state, the data iterator and a meta record.

Layout under <workdir>:
  checkpoints/<step>/{state,meta}     Orbax CheckpointManager (async, keep-N)
  checkpoints/data_state/<step>/process_<i>.json   each process's iterator state
  final_params/                       params only, written when a run completes
  final_params.meta.json

The state is saved as a flat {"params/...": array} dict (so nnx/optax pytree
node types never reach the checkpoint format) and restored into the abstract
train state with its shardings. `meta` records the model config and every
parameter's shape: restoring into a different model fails with a message
naming the mismatching fields/params before any array is read.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from mage_jax.train.optimizer import path_str

log = logging.getLogger(__name__)


class CheckpointMismatch(ValueError):
  pass


def flatten(tree: Any) -> tuple[dict[str, Any], Any]:
  leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
  flat = {}
  for path, leaf in leaves:
    key = path_str(path).replace(".", "_")
    if key in flat:
      raise ValueError(f"duplicate checkpoint key {key}")
    flat[key] = leaf
  return flat, treedef


def unflatten(flat: dict[str, Any], like: Any) -> Any:
  keys = list(flatten(like)[0])
  treedef = jax.tree_util.tree_structure(like)
  return jax.tree_util.tree_unflatten(treedef, [flat[k] for k in keys])


def _abstract_flat(abstract_with_sharding: Any) -> dict[str, Any]:
  flat, _ = flatten(abstract_with_sharding)
  return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=getattr(v, "sharding", None))
          for k, v in flat.items()}


def compare_meta(saved: dict, expected: dict, where: str) -> None:
  """Raise CheckpointMismatch naming what differs (model config fields, param shapes)."""
  problems = []
  s_model, e_model = saved.get("model", {}), expected.get("model", {})
  for k in sorted(set(s_model) | set(e_model)):
    if k in ("param_dtype", "compute_dtype", "attention_backend", "remat_policy"):
      continue  # runtime knobs may change between runs
    if s_model.get(k) != e_model.get(k):
      problems.append(f"model.{k}: checkpoint {s_model.get(k)!r} vs config {e_model.get(k)!r}")
  s_shapes, e_shapes = saved.get("param_shapes", {}), expected.get("param_shapes", {})
  for k in sorted(set(s_shapes) | set(e_shapes)):
    a, b = s_shapes.get(k), e_shapes.get(k)
    if a is None or b is None or list(a[0]) != list(b[0]):
      problems.append(f"param {k}: checkpoint shape {a and a[0]} vs model shape {b and b[0]}")
  if problems:
    shown = "\n  ".join(problems[:20])
    more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
    raise CheckpointMismatch(f"checkpoint {where} does not match this model/config:\n  {shown}{more}")


def _flat_model_meta(model_cfg: Any) -> dict:
  import dataclasses
  d = dataclasses.asdict(model_cfg) if dataclasses.is_dataclass(model_cfg) else dict(model_cfg)
  out = {}

  def walk(prefix, v):
    if isinstance(v, dict):
      for k, x in v.items():
        walk(f"{prefix}{k}.", x)
    else:
      out[prefix[:-1]] = v
  walk("", d)
  return out


def make_meta(model_cfg: Any, params: Any, extra: dict | None = None) -> dict:
  from mage_jax.train.state import param_shapes
  return {"model": _flat_model_meta(model_cfg),
          "param_shapes": {k: [list(s), d] for k, (s, d) in param_shapes(params).items()},
          **(extra or {})}


class Checkpointer:
  """Keep-N async checkpoints of (train state, data state, meta) with fallback restore."""

  def __init__(self, workdir: str, *, keep: int = 3, async_save: bool = True):
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.data_dir = os.path.join(self.directory, "data_state")
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=True, enable_async_checkpointing=async_save,
        step_name_format=None)
    self.manager = ocp.CheckpointManager(self.directory, options=options,
                                         item_names=("state", "meta"))

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state: Any, data_state: dict | None, meta: dict,
           force: bool = False) -> bool:
    # Data state first (synchronously, tiny): a checkpoint is only usable with it.
    if data_state is not None:
      d = os.path.join(self.data_dir, str(step))
      os.makedirs(d, exist_ok=True)
      tmp = os.path.join(d, f".process_{jax.process_index()}.json.tmp")
      with open(tmp, "w") as f:
        json.dump(data_state, f)
      os.replace(tmp, os.path.join(d, f"process_{jax.process_index()}.json"))
    flat, _ = flatten(state)
    saved = self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(flat), meta=ocp.args.JsonSave(meta)), force=force)
    self._prune_data_states()
    return saved

  def _prune_data_states(self) -> None:
    if jax.process_index() != 0 or not os.path.isdir(self.data_dir):
      return
    keep = set(self.all_steps())
    pending = max(keep) if keep else -1
    for name in os.listdir(self.data_dir):
      if name.isdigit() and int(name) not in keep and int(name) < pending:
        shutil.rmtree(os.path.join(self.data_dir, name), ignore_errors=True)

  def restore(self, abstract_state: Any, expected_meta: dict
              ) -> tuple[Any, dict | None, int] | None:
    """The newest readable checkpoint as (state, data_state, step), or None.

    A model/config mismatch raises; an unreadable checkpoint logs a warning and
    falls back to the previous one.
    """
    steps = self.all_steps()
    for step in reversed(steps):
      where = os.path.join(self.directory, str(step))
      try:
        meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
      except Exception as e:  # noqa: BLE001 - any read failure means: try the previous one
        log.warning("checkpoint %s: meta unreadable (%s); falling back to an older one", where, e)
        print(f"WARNING: checkpoint {where} is unreadable ({type(e).__name__}: {e}); "
              "falling back to the previous checkpoint", flush=True)
        continue
      compare_meta(meta, expected_meta, where)
      try:
        flat = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(_abstract_flat(abstract_state))))["state"]
        data_state = self._read_data_state(step)
      except Exception as e:  # noqa: BLE001
        print(f"WARNING: checkpoint {where} is unreadable ({type(e).__name__}: {e}); "
              "falling back to the previous checkpoint", flush=True)
        continue
      return unflatten(flat, abstract_state), data_state, step
    return None

  def _read_data_state(self, step: int) -> dict | None:
    path = os.path.join(self.data_dir, str(step), f"process_{jax.process_index()}.json")
    if not os.path.exists(path):
      if os.path.isdir(self.data_dir):
        raise FileNotFoundError(f"data iterator state {path} is missing")
      return None
    with open(path) as f:
      return json.load(f)

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()


# --- params-only export between stages ---------------------------------------------------------


def final_params_dir(workdir: str) -> str:
  return os.path.abspath(os.path.join(workdir, "final_params"))


def save_final_params(workdir: str, params: Any, meta: dict) -> str:
  path = final_params_dir(workdir)
  if os.path.exists(path):
    shutil.rmtree(path)
  flat, _ = flatten(params)
  ckptr = ocp.StandardCheckpointer()
  ckptr.save(path, flat)
  ckptr.wait_until_finished()
  if jax.process_index() == 0:
    with open(path + ".meta.json", "w") as f:
      json.dump(meta, f, indent=1)
  return path


def has_final_params(workdir: str) -> bool:
  return os.path.exists(final_params_dir(workdir) + ".meta.json")


def load_final_params(workdir: str, abstract_params: Any, expected_meta: dict) -> Any:
  path = final_params_dir(workdir)
  if not has_final_params(workdir):
    raise FileNotFoundError(
        f"init.from_dir={workdir!r}: no final params ({path}); is that stage complete?")
  with open(path + ".meta.json") as f:
    compare_meta(json.load(f), expected_meta, path)
  flat = ocp.StandardCheckpointer().restore(path, _abstract_flat(abstract_params))
  return unflatten(flat, abstract_params)


def host_scalar(x: Any) -> float:
  return float(np.asarray(x))
