"""Train state pytree and its sharded creation.

The nnx model is split once into (graphdef, params, rest): graphdef is static
(closed over by the jitted step), `params` (nnx.Param leaves) is trained and
`rest` holds any other variables (none in our models today). The train state
is the pytree (step, params, opt_state, rng, nonfinite_steps) that the step
donates and the checkpoint saves.
"""
from __future__ import annotations

from typing import Any, Callable

from flax import nnx
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import optax

from mage_jax.train.optimizer import path_str


@flax.struct.dataclass
class TrainState:
  step: jax.Array             # int32 scalar: updates applied so far (skipped ones included)
  params: Any                 # nnx.State of nnx.Param leaves, fp32 master weights
  opt_state: Any              # optax state
  rng: jax.Array              # uint32 [2] raw key, advanced every step
  nonfinite_steps: jax.Array  # int32 scalar: updates skipped by the NaN/Inf guard


def split_model(model: nnx.Module) -> tuple[Any, Any, Any]:
  """(graphdef, params, rest) with params = all nnx.Param variables."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  return graphdef, params, rest


def merge_model(graphdef: Any, params: Any, rest: Any) -> nnx.Module:
  return nnx.merge(graphdef, params, rest)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def state_shardings(tx: optax.GradientTransformation, abstract: TrainState,
                    param_shardings: Any, mesh: Mesh) -> TrainState:
  """Shardings for every state leaf: optimizer leaves whose path ends with a
  param's path (Adam mu/nu, inside any masking/multi_transform wrapper) and
  have its shape follow that param; counts and other scalars are replicated.
  Frozen groups hold MaskedNode (no leaves), so they need nothing."""
  del tx
  rep = replicated(mesh)
  params = {path_str(p): (leaf.shape, sh) for (p, leaf), sh in zip(
      jax.tree_util.tree_flatten_with_path(abstract.params)[0],
      jax.tree_util.tree_leaves(param_shardings))}

  def for_leaf(path, leaf):
    name = path_str(path)
    for pname, (shape, sh) in params.items():
      if (name == pname or name.endswith("/" + pname)) and tuple(leaf.shape) == tuple(shape):
        return sh
    return rep

  opt_sh = jax.tree_util.tree_map_with_path(for_leaf, abstract.opt_state)
  return TrainState(step=rep, params=param_shardings, opt_state=opt_sh, rng=rep,
                    nonfinite_steps=rep)


def abstract_state(model_factory: Callable[[nnx.Rngs], nnx.Module],
                   tx: optax.GradientTransformation) -> tuple[Any, Any, TrainState]:
  """(graphdef, rest, abstract TrainState) without allocating anything."""
  model = nnx.eval_shape(lambda: model_factory(nnx.Rngs(0)))
  graphdef, params, rest = split_model(model)
  abstract = jax.eval_shape(lambda p: _fresh(p, tx, jnp.zeros((2,), jnp.uint32)), params)
  return graphdef, rest, abstract


def _fresh(params: Any, tx: optax.GradientTransformation, rng: jax.Array) -> TrainState:
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                    rng=rng, nonfinite_steps=jnp.zeros((), jnp.int32))


def init_state(model_factory: Callable[[nnx.Rngs], nnx.Module], tx: optax.GradientTransformation,
               seed: int, shardings: TrainState, params: Any | None = None) -> tuple[TrainState, Any]:
  """A fresh, sharded train state; the model is initialised inside jit so each
  device only materialises its shard. With `params` given (e.g. loaded from
  HF or a previous stage), those are placed with the state's shardings instead.
  Returns (state, rest)."""
  key = jax.random.PRNGKey(seed)

  if params is None:
    def make(k):
      model = model_factory(nnx.Rngs(params=k))
      _, p, r = split_model(model)
      return _fresh(p, tx, jax.random.fold_in(k, 1)), r
    state, rest = jax.jit(make, out_shardings=(shardings, None))(key)
    return state, rest

  params = jax.device_put(params, shardings.params)
  state = jax.jit(lambda p, k: _fresh(p, tx, jax.random.fold_in(k, 1)),
                  out_shardings=shardings)(params, key)
  rest = split_model(nnx.eval_shape(lambda: model_factory(nnx.Rngs(0))))[2]
  return state, rest


def param_shapes(params: Any) -> dict[str, tuple[tuple[int, ...], str]]:
  """{'path': (shape, dtype)} for comparing a checkpoint against the model."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    out[path_str(path)] = (tuple(int(d) for d in leaf.shape), str(leaf.dtype))
  return out


def flat_paths(params: Any) -> dict[str, Any]:
  """{'language_model/embed_tokens/embedding': leaf, ...} (nnx's trailing '/value' dropped)."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    name = path_str(path)
    out[name[:-len("/value")] if name.endswith("/value") else name] = leaf
  return out


def count_params(params: Any, prefix: str | None = None) -> int:
  total = 0
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    name = path_str(path)
    if prefix is None or name == prefix or name.startswith(prefix + "/"):
      total += int(jnp.size(leaf)) if not hasattr(leaf, "size") else int(leaf.size)
  return total
