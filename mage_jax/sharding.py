"""Device mesh from config and the ONE logical-axis rules table.

Mesh axes: `data` (pure data parallel), `fsdp` (data parallel with parameters
and optimizer state sharded), `tensor` (Megatron-style model parallel), and
optionally `sequence`. Parameters carry logical axes as nnx metadata
`axes=(...)`; activations are constrained with `shard_activation(x, axes)`.

    mesh = make_mesh(cfg.mesh)                  # cfg: data/fsdp/tensor[/sequence], one may be -1
    shardings = param_shardings(nnx.state(abstract_model), mesh)
    print(format_memory_report(memory_report(nnx.state(abstract_model), abstract_mesh(data=3, fsdp=8))))

Errors: a logical axis missing from the table, two dims of one array mapped to
the same mesh axis (collision), or a parameter dim not divisible by its mesh
axes each raise ValueError naming the parameter and its axes.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "sequence", "tensor")
MeshAxes = str | tuple[str, ...] | None

# logical axis -> mesh axis / axes (None = replicated).
LOGICAL_AXIS_RULES: tuple[tuple[str, MeshAxes], ...] = (
    # --- parameters: language model ---
    ("embed", "fsdp"),          # model width D (Qwen3 hidden, merger output)
    ("vocab", "tensor"),        # embedding rows / LM head columns
    ("mlp", "tensor"),          # SwiGLU intermediate
    ("q_heads", "tensor"),      # flattened query heads x head_dim (q_proj out, o_proj in)
    ("kv_heads", "tensor"),     # flattened kv heads x head_dim (k/v_proj out)
    ("head_dim", None),
    ("norm", None),             # every norm scale/bias
    # --- parameters: vision tower ---
    ("vit_embed", "fsdp"),      # ViT width 1024
    ("vit_mlp", "tensor"),      # ViT MLP 4096 and merger hidden
    ("vit_qkv", "tensor"),      # fused qkv output 3*1024
    ("vit_heads", "tensor"),    # attention heads (proj input)
    ("patch", None),            # patch row 3*16*16
    # --- activations ---
    ("act_batch", ("data", "fsdp")),
    ("act_seq", "sequence"),
    ("act_embed", None),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_head_dim", None),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
    ("act_patch", None),
)


def _rules_dict(rules) -> dict[str, MeshAxes]:
  return dict(rules)


def logical_to_spec(axes: Sequence[str | None], rules=LOGICAL_AXIS_RULES, *,
                    mesh_axis_names: Sequence[str] | None = None,
                    name: str = "<array>") -> PartitionSpec:
  """Map logical axes to a PartitionSpec; mesh axes not in `mesh_axis_names` are dropped."""
  table = _rules_dict(rules)
  used: dict[str, str] = {}
  spec = []
  for logical in axes:
    if logical is None:
      spec.append(None)
      continue
    if logical not in table:
      raise ValueError(f"{name}: logical axis {logical!r} (of {tuple(axes)}) is not in the rules table")
    target = table[logical]
    targets = () if target is None else (target,) if isinstance(target, str) else tuple(target)
    if mesh_axis_names is not None:
      targets = tuple(t for t in targets if t in mesh_axis_names)
    for t in targets:
      if t in used:
        raise ValueError(f"{name}: logical axes {tuple(axes)} map mesh axis {t!r} twice "
                         f"(from {used[t]!r} and {logical!r})")
      used[t] = logical
    spec.append(None if not targets else targets[0] if len(targets) == 1 else targets)
  return PartitionSpec(*spec)


def batch_axes(mesh: Mesh | AbstractMesh, rules=LOGICAL_AXIS_RULES) -> tuple[str, ...]:
  """Mesh axes the batch dimension is split over: the rules table's `act_batch`, those in `mesh`."""
  spec = logical_to_spec(("act_batch",), rules, mesh_axis_names=mesh.axis_names, name="batch")[0]
  return () if spec is None else (spec,) if isinstance(spec, str) else tuple(spec)


def batch_sharding(mesh: Mesh, ndim: int = 1, rules=LOGICAL_AXIS_RULES) -> NamedSharding:
  """The one sharding of host batches (the data pipeline's global arrays, the train step's
  inputs): dim 0 over `batch_axes`, the rest replicated."""
  axes = batch_axes(mesh, rules)
  return NamedSharding(mesh, PartitionSpec(axes if axes else None, *([None] * (ndim - 1))))


def make_mesh(cfg: Mapping[str, int] | Any, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Mesh with axes data, fsdp, tensor (+ sequence if cfg has it); one size may be -1 to fill."""
  devices = list(jax.devices() if devices is None else devices)
  get = (lambda k, d: cfg.get(k, d)) if hasattr(cfg, "get") else (lambda k, d: getattr(cfg, k, d))
  names = [a for a in MESH_AXES if a != "sequence" or get("sequence", None) is not None]
  sizes = [int(get(a, 1)) for a in names]
  if sizes.count(-1) > 1:
    raise ValueError(f"mesh config {dict(zip(names, sizes))}: at most one axis may be -1")
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(f"mesh config {dict(zip(names, sizes))}: {len(devices)} devices not divisible by {known}")
    sizes[sizes.index(-1)] = len(devices) // known
  if math.prod(sizes) != len(devices):
    raise ValueError(f"mesh config {dict(zip(names, sizes))} needs {math.prod(sizes)} devices, "
                     f"have {len(devices)}")
  return jax.make_mesh(tuple(sizes), tuple(names), axis_types=(AxisType.Auto,) * len(names),
                       devices=devices)


def abstract_mesh(data: int = 1, fsdp: int = 1, tensor: int = 1,
                  sequence: int | None = None) -> AbstractMesh:
  """A device-less mesh for eval_shape / memory planning (e.g. data=3 x fsdp=8 = 24 GPUs)."""
  names = ("data", "fsdp") + (("sequence",) if sequence is not None else ()) + ("tensor",)
  sizes = (data, fsdp) + ((sequence,) if sequence is not None else ()) + (tensor,)
  return AbstractMesh(sizes, names, axis_types=(AxisType.Auto,) * len(names))


def _is_variable(x) -> bool:
  return isinstance(x, nnx.Variable)


def _path_str(path) -> str:
  return "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)


def _variable_spec(path, var: nnx.Variable, mesh, rules) -> PartitionSpec:
  name = _path_str(path)
  axes = var.get_metadata().get("axes")
  shape = var.shape if hasattr(var, "shape") else np.shape(var[...])
  if axes is None:
    raise ValueError(f"{name}: parameter has no logical 'axes' metadata")
  if len(axes) != len(shape):
    raise ValueError(f"{name}: axes {axes} do not match shape {shape}")
  spec = logical_to_spec(axes, rules, mesh_axis_names=mesh.axis_names, name=name)
  for dim, entry in zip(shape, spec):
    entries = () if entry is None else (entry,) if isinstance(entry, str) else entry
    n = math.prod(mesh.shape[e] for e in entries)
    if dim % n:
      raise ValueError(f"{name}: dim {dim} of shape {shape} (axes {axes}) not divisible by "
                       f"mesh axes {entries} of size {n}")
  return spec


def param_specs(state: nnx.State, mesh: Mesh | AbstractMesh, rules=LOGICAL_AXIS_RULES):
  """State-shaped pytree of PartitionSpecs (Variables holding specs)."""
  return jax.tree_util.tree_map_with_path(
      lambda p, v: v.replace(_variable_spec(p, v, mesh, rules)), state, is_leaf=_is_variable)


def param_shardings(state: nnx.State, mesh: Mesh, rules=LOGICAL_AXIS_RULES):
  """State-shaped pytree of NamedShardings, usable as jit in/out_shardings for `state`."""
  return jax.tree_util.tree_map_with_path(
      lambda p, v: v.replace(NamedSharding(mesh, _variable_spec(p, v, mesh, rules))),
      state, is_leaf=_is_variable)


def shard_activation(x: jax.Array, axes: Sequence[str | None], rules=LOGICAL_AXIS_RULES) -> jax.Array:
  """with_sharding_constraint by logical axes under the current `jax.set_mesh` mesh.

  No-op without a mesh context. Mesh axes that do not divide a dim are dropped
  (e.g. batch 2 on fsdp=8) so small/eval batches still run.
  """
  spec = fitted_activation_spec(x.shape, axes, rules)
  return x if spec is None else jax.lax.with_sharding_constraint(x, spec)


def fitted_activation_spec(shape: Sequence[int], axes: Sequence[str | None],
                           rules=LOGICAL_AXIS_RULES) -> PartitionSpec | None:
  """The PartitionSpec of an activation under the current mesh (None without one).

  Mesh axes that do not divide a dim are dropped, so small/eval batches still run.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return None
  spec = logical_to_spec(axes, rules, mesh_axis_names=mesh.axis_names, name="activation")
  fitted = []
  for dim, entry in zip(shape, spec):
    entries = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    kept = []
    for e in entries:
      if dim % (math.prod(mesh.shape[k] for k in kept) * mesh.shape[e]) == 0:
        kept.append(e)
    fitted.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
  return PartitionSpec(*fitted)


def memory_report(state: nnx.State, mesh: Mesh | AbstractMesh, rules=LOGICAL_AXIS_RULES,
                  adam_dtype=np.float32) -> dict[str, float]:
  """Per-device bytes of parameters and Adam (mu, nu) state under the rules' sharding."""
  param_bytes = adam_bytes = 0
  total_params = 0
  for path, var in jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_variable)[0]:
    spec = _variable_spec(path, var, mesh, rules)
    shards = math.prod(
        mesh.shape[e] for entry in spec if entry is not None
        for e in ((entry,) if isinstance(entry, str) else entry))
    n = math.prod(var.shape)
    total_params += n
    param_bytes += n * np.dtype(var.dtype).itemsize / shards
    adam_bytes += 2 * n * np.dtype(adam_dtype).itemsize / shards
  return {"devices": math.prod(mesh.shape.values()), "params": total_params,
          "param_bytes_per_device": param_bytes, "adam_bytes_per_device": adam_bytes,
          "total_bytes_per_device": param_bytes + adam_bytes}


def format_memory_report(report: Mapping[str, float]) -> str:
  gib = 1024 ** 3
  return (f"{report['params'] / 1e9:.3f}B params on {report['devices']} devices: "
          f"params {report['param_bytes_per_device'] / gib:.3f} GiB, "
          f"Adam {report['adam_bytes_per_device'] / gib:.3f} GiB, "
          f"total {report['total_bytes_per_device'] / gib:.3f} GiB per device")
