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

`meta` also holds a checksum of every saved array (`array_checksums`), computed on the
devices from the global array before the save and checked after a restore: bytes that
changed on disk without breaking the format (a flipped block restores "fine") make the
checkpoint unreadable, so the restore falls back to the previous one with a one-line
warning. The checksum is of the global array, so it holds whatever process wrote which
shard and whatever sharding the restore uses.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from mage_jax.models.config import RUNTIME_FIELDS
from mage_jax.train.optimizer import path_str
from mage_jax.train.state import param_shapes
from mage_jax.weights.orbax_io import one_line, quiet_orbax

log = logging.getLogger(__name__)
CHECKSUMS = "array_checksums"


class CheckpointMismatch(ValueError):
  pass


class CheckpointCorrupt(ValueError):
  """An array read back differs from the one saved (its checksum does not match)."""


def _fmix32(h: jax.Array) -> jax.Array:
  """MurmurHash3's 32-bit finaliser: every input bit moves about half the output bits."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def _array_checksum(x: jax.Array) -> jax.Array:
  """uint32 sum over elements of fmix32(bits ^ fmix32(flat index)): the bits of each element
  (NaN payloads included) at its position. Integer sums wrap, so the result does not depend
  on how XLA splits the sum over shards or devices."""
  bits = x if jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_ else \
      jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{x.dtype.itemsize * 8}"))
  bits = bits.astype(jnp.uint32)
  index = jnp.zeros(x.shape, jnp.uint32)
  stride = 1
  for d in reversed(range(x.ndim)):
    index = index + jax.lax.broadcasted_iota(jnp.uint32, x.shape, d) * jnp.uint32(stride % 2**32)
    stride *= x.shape[d]
  return jnp.sum(_fmix32(bits ^ _fmix32(index + jnp.uint32(1))), dtype=jnp.uint32)


_checksums = jax.jit(lambda flat: {k: _array_checksum(v) for k, v in flat.items()})


def array_checksums(flat: dict[str, Any]) -> dict[str, list]:
  """{key: [checksum, dtype]} of a flat dict of (global, possibly multi-process) arrays;
  every process gets the same numbers. The dtype is the one the bits are of."""
  sums = _checksums(flat)
  return {k: [int(np.asarray(v.addressable_data(0) if hasattr(v, "addressable_data") else v)),
              np.dtype(flat[k].dtype).name] for k, v in sums.items()}


def stored_target(target: dict[str, Any], checksums: dict[str, list] | None) -> dict[str, Any]:
  """The restore target with each array in the dtype it was saved (and summed) in; a dtype
  change between runs (param_dtype is a runtime knob) is applied after the check."""
  if not checksums:
    return target
  return {k: jax.ShapeDtypeStruct(v.shape, checksums[k][1] if k in checksums else v.dtype,
                                  sharding=getattr(v, "sharding", None))
          for k, v in target.items()}


def verify_checksums(flat: dict[str, Any], expected: dict[str, list] | None,
                     target: dict[str, Any]) -> dict[str, Any]:
  """`flat` cast to `target`'s dtypes once every checksum matches; else CheckpointCorrupt
  naming the first array that differs. A checkpoint written before checksums were stored
  has none, and is not checked."""
  if expected:
    got = array_checksums(flat)
    bad = [k for k in sorted(expected) if got.get(k) != expected[k]]
    if bad:
      raise CheckpointCorrupt(f"{len(bad)} arrays differ from what was saved (checksum of "
                              f"{bad[0]}: {got.get(bad[0])} != {expected[bad[0]]})")
  return {k: v if v.dtype == target[k].dtype else v.astype(target[k].dtype)
          for k, v in flat.items()}


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
    if k in RUNTIME_FIELDS:
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
  return {"model": _flat_model_meta(model_cfg),
          "param_shapes": {k: [list(s), d] for k, (s, d) in param_shapes(params).items()},
          **(extra or {})}


def _fall_back(where: str, e: BaseException) -> None:
  print(f"WARNING: checkpoint {where} is unreadable ({one_line(e)}); "
        "falling back to the previous checkpoint", flush=True)


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
    meta = {**meta, CHECKSUMS: array_checksums(flat)}
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
        with quiet_orbax():
          meta = self.manager.restore(step, args=ocp.args.Composite(
              meta=ocp.args.JsonRestore()))["meta"]
      except Exception as e:  # noqa: BLE001 - any read failure means: try the previous one
        _fall_back(where, e)
        continue
      compare_meta(meta, expected_meta, where)
      target = _abstract_flat(abstract_state)
      try:
        with quiet_orbax():
          flat = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(
              stored_target(target, meta.get(CHECKSUMS)))))["state"]
        flat = verify_checksums(flat, meta.get(CHECKSUMS), target)
        data_state = self._read_data_state(step)
      except Exception as e:  # noqa: BLE001
        _fall_back(where, e)
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
  meta = {**meta, CHECKSUMS: array_checksums(flat)}
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
    meta = json.load(f)
  compare_meta(meta, expected_meta, path)
  target = _abstract_flat(abstract_params)
  try:
    with quiet_orbax():
      flat = ocp.StandardCheckpointer().restore(path, stored_target(target, meta.get(CHECKSUMS)))
  except Exception as e:  # noqa: BLE001 - no older copy to fall back to: one clear line
    raise CheckpointCorrupt(f"{path}: unreadable ({one_line(e)})") from None
  try:
    flat = verify_checksums(flat, meta.get(CHECKSUMS), target)
  except CheckpointCorrupt as e:
    raise CheckpointCorrupt(f"{path}: {e}") from None
  return unflatten(flat, abstract_params)


def host_scalar(x: Any) -> float:
  return float(np.asarray(x))
