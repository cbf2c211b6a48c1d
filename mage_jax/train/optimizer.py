"""AdamW with warmup + cosine, global-norm clipping, per-module LR and freezing.

Parameters are grouped by their state path ("visual/encoder/layers/0/...").
`freeze` prefixes get a zero update and no Adam moments; `lr_multipliers`
prefixes ({"visual": 0.1}) scale the schedule for that group. The longest
matching prefix wins. Frozen gradients are zeroed *before* clipping so a
frozen tower does not eat the clipping budget of the trained ones.

Master params stay in their param dtype (fp32); the model casts to its
compute dtype inside the forward.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import optax

FROZEN = "frozen"


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  learning_rate: float = 1e-5
  warmup_steps: int = 100
  total_steps: int = 1000
  end_lr_ratio: float = 0.1     # cosine decays to learning_rate * end_lr_ratio
  b1: float = 0.9
  b2: float = 0.95
  eps: float = 1e-8
  weight_decay: float = 0.1
  clip_norm: float = 1.0        # <= 0 disables clipping
  lr_multipliers: Mapping[str, float] = dataclasses.field(default_factory=dict)
  freeze: Sequence[str] = ()

  @classmethod
  def from_config(cls, cfg: Any, total_steps: int) -> "OptimizerConfig":
    """From an ml_collections `optimizer` section (unknown fields error)."""
    d = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
    d["total_steps"] = total_steps
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - fields
    if unknown:
      raise ValueError(f"config.optimizer has unknown fields {sorted(unknown)}; known: {sorted(fields)}")
    d["lr_multipliers"] = dict(d.get("lr_multipliers") or {})
    d["freeze"] = tuple(d.get("freeze") or ())
    return cls(**d)


def path_str(path: tuple) -> str:
  """'a/b/0/kernel' from a jax key path (dict keys, attributes, indices)."""
  parts = []
  for k in path:
    for attr in ("key", "name", "idx"):
      if hasattr(k, attr):
        parts.append(str(getattr(k, attr)))
        break
    else:
      parts.append(str(k))
  return "/".join(parts)


def _matches(path: str, prefix: str) -> bool:
  prefix = prefix.strip("/")
  return path == prefix or path.startswith(prefix + "/")


def label_for(path: str, cfg: OptimizerConfig) -> str:
  """FROZEN, or 'lr=<multiplier>' from the longest matching prefix."""
  best, label = -1, "lr=1.0"
  for prefix in cfg.freeze:
    if _matches(path, prefix) and len(prefix) > best:
      best, label = len(prefix), FROZEN
  for prefix, mult in cfg.lr_multipliers.items():
    if _matches(path, prefix) and len(prefix) > best:
      best, label = len(prefix), f"lr={float(mult)!r}"
  return label


def labels_fn(cfg: OptimizerConfig) -> Callable[[Any], Any]:
  return lambda tree: jax.tree_util.tree_map_with_path(
      lambda p, _: label_for(path_str(p), cfg), tree)


def schedule(cfg: OptimizerConfig, multiplier: float = 1.0) -> optax.Schedule:
  peak = cfg.learning_rate * multiplier
  warmup = min(cfg.warmup_steps, max(cfg.total_steps - 1, 0))
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=peak, warmup_steps=warmup,
      decay_steps=max(cfg.total_steps, warmup + 1), end_value=peak * cfg.end_lr_ratio)


def _decay_mask(tree: Any) -> Any:
  # No weight decay on norms scales and biases (1-D params).
  return jax.tree_util.tree_map(lambda x: jnp.ndim(x) >= 2, tree)


def make_optimizer(cfg: OptimizerConfig, params: Any) -> optax.GradientTransformation:
  """The full transformation; `params` (abstract is fine) fixes the groups. A `freeze` or
  `lr_multipliers` prefix that names no parameter is an error: a typo would otherwise train
  what the run meant to freeze."""
  paths = [path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
  for field, prefixes in (("freeze", cfg.freeze), ("lr_multipliers", tuple(cfg.lr_multipliers))):
    for prefix in prefixes:
      if not any(_matches(path, prefix) for path in paths):
        near = sorted({"/".join(path.split("/")[:2]) for path in paths})
        raise ValueError(f"optimizer.{field} prefix {prefix!r} names no parameter; "
                         f"top-level paths: {near[:12]}")
  labels = jax.tree_util.tree_leaves(labels_fn(cfg)(params))
  groups = sorted(set(labels))
  zero_frozen = optax.multi_transform(
      {g: (optax.set_to_zero() if g == FROZEN else optax.identity()) for g in groups},
      labels_fn(cfg))
  adam = {}
  for g in groups:
    if g == FROZEN:
      adam[g] = optax.set_to_zero()
    else:
      mult = float(g.split("=", 1)[1])
      adam[g] = optax.adamw(schedule(cfg, mult), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                            weight_decay=cfg.weight_decay, mask=_decay_mask)
  chain = [zero_frozen]
  if cfg.clip_norm > 0:
    chain.append(optax.clip_by_global_norm(cfg.clip_norm))
  chain.append(optax.multi_transform(adam, labels_fn(cfg)))
  return optax.chain(*chain)


def frozen_mask(cfg: OptimizerConfig, tree: Any) -> Any:
  """True on frozen leaves (for norms that should ignore them)."""
  return jax.tree_util.tree_map(lambda l: l == FROZEN, labels_fn(cfg)(tree))


def global_norm(tree: Any) -> jax.Array:
  leaves = [x for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "dtype")]
  if not leaves:
    return jnp.zeros((), jnp.float32)
  return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))
