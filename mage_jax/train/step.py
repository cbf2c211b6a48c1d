"""The SFT train step: a pure function of (state, batch), jitted with explicit
shardings and a donated state.

Gradient accumulation scans over micro-batches and adds *sums* (weighted
loss, denominator, gradients of the summed loss) and divides once at the end,
so the result is the big-batch token mean no matter how trained tokens are
spread over micro-batches. Micro-batch j takes rows j, j+n, j+2n, ... so each
micro-batch stays spread over every data-parallel device; one without a trained
token is skipped (its sums are zero).

The objective is pluggable: anything with `sums(model, batch)` (a NamedTuple
of additive fp32 scalars with `.loss` and `.denominator`) and
`finalize(sums) -> metrics` (with "loss"). The SFT cross-entropy is the
default; RL passes `mage_jax.rl.objective.rl_objective(...)`. Optimizer,
clipping, the nonfinite guard, donation and shardings are the same for both.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from mage_jax.train import loss as loss_lib
from mage_jax.train.optimizer import global_norm
from mage_jax.sharding import batch_sharding
from mage_jax.train.state import TrainState, merge_model, replicated

NONFINITE_MODES = ("skip", "stop")
BATCH_KEYS = ("tokens", "targets", "loss_mask", "segment_ids", "positions",
              "patches", "patch_image_ids", "patch_positions", "source_ids")


@dataclasses.dataclass(frozen=True)
class StepConfig:
  grad_accum_steps: int = 1
  loss_chunk_size: int = 1024
  z_loss_weight: float = 0.0
  per_sequence_loss: bool = False
  nonfinite: str = "skip"   # "skip": params unchanged, counted (gated_update); "stop": the loop raises

  def __post_init__(self):
    if self.nonfinite not in NONFINITE_MODES:
      raise ValueError(f"step.nonfinite={self.nonfinite!r} is not one of {NONFINITE_MODES}")
    if self.grad_accum_steps < 1:
      raise ValueError(f"step.grad_accum_steps={self.grad_accum_steps} must be >= 1")


def head_bias(model: Any) -> jax.Array | None:
  """The LM head's logit bias (a compact vocabulary's rest term, models/compact_vocab.py); a model
  without `lm_head_bias` (a plain vocabulary, e.g. a user's own decoder) has none."""
  return model.lm_head_bias() if hasattr(model, "lm_head_bias") else None


def model_hidden(model: Any, batch: dict[str, jax.Array]) -> jax.Array:
  """Run the LM (text-only) or Mage-VL (with patches) forward to hidden states."""
  if hasattr(model, "visual") and "patches" in batch:
    return model(batch["tokens"], batch["positions"], batch["segment_ids"], batch["patches"],
                 batch["patch_image_ids"], batch["patch_positions"])
  return model(batch["tokens"], batch["positions"], batch["segment_ids"])


class Objective(Protocol):
  """What the train step minimises: additive sums per micro-batch, then metrics."""

  def sums(self, model: Any, batch: dict[str, jax.Array]) -> NamedTuple: ...

  def finalize(self, sums: Any) -> dict[str, jax.Array]: ...


@dataclasses.dataclass(frozen=True)
class SFTObjective:
  """Chunked next-token cross-entropy over the trained tokens (the default objective)."""
  cfg: StepConfig

  def sums(self, model: Any, batch: dict[str, jax.Array]) -> loss_lib.LossSums:
    hidden = model_hidden(model, batch)
    return loss_lib.loss_sums(
        hidden, model.lm_head_kernel(), batch["targets"], batch["loss_mask"],
        batch["segment_ids"], chunk_size=self.cfg.loss_chunk_size,
        z_loss_weight=self.cfg.z_loss_weight, per_sequence=self.cfg.per_sequence_loss,
        bias=head_bias(model))

  def finalize(self, sums: loss_lib.LossSums) -> dict[str, jax.Array]:
    metrics = loss_lib.finalize(sums)
    metrics["segments"] = sums.denominator if self.cfg.per_sequence_loss else sums.tokens
    return metrics


def split_micro(batch: dict[str, jax.Array], n: int) -> dict[str, jax.Array]:
  """[B, ...] -> [n, B/n, ...] with micro j = rows j, j+n, j+2n, ..."""
  def one(x):
    b = x.shape[0]
    if b % n:
      raise ValueError(f"batch size {b} is not divisible by grad_accum_steps={n}")
    return x.reshape(b // n, n, *x.shape[1:]).swapaxes(0, 1)
  return jax.tree_util.tree_map(one, batch)


def grads_and_sums(graphdef: Any, cfg: StepConfig, params: Any, rest: Any,
                   batch: dict[str, jax.Array], objective: Objective | None = None
                   ) -> tuple[Any, NamedTuple]:
  """Gradient of the *summed* weighted loss and the loss sums, over all micro-batches."""
  objective = objective or SFTObjective(cfg)

  def one(mb):
    def f(p):
      s = objective.sums(merge_model(graphdef, p, rest), mb)
      return s.loss, s
    (_, s), g = jax.value_and_grad(f, has_aux=True)(params)
    return g, s

  if cfg.grad_accum_steps == 1:
    return one(batch)
  micro = split_micro(batch, cfg.grad_accum_steps)

  zeros_g = jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
  sums_like = jax.eval_shape(lambda p, b: objective.sums(merge_model(graphdef, p, rest), b),
                             params, jax.tree_util.tree_map(lambda x: x[0], micro))
  zeros_s = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), sums_like)

  def body(carry, mb):
    g_acc, s_acc = carry
    # A micro-batch without a trained token adds exactly zero to every sum and gradient, so it
    # is not computed: an RL update's batch is a power-of-two count of micro-batches whose
    # packed bins fill the first ones (rl.batch.pack_rl_update) and the rest are padding.
    skip = lambda _: (jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, p.dtype), params), zeros_s)
    g, s = jax.lax.cond(jnp.any(mb["loss_mask"] > 0), one, skip, mb)
    return (jax.tree_util.tree_map(jnp.add, g_acc, g),
            jax.tree_util.tree_map(jnp.add, s_acc, s)), None

  (grads, sums), _ = jax.lax.scan(body, (zeros_g, zeros_s), micro)
  return grads, sums


def gated_update(tx: optax.GradientTransformation, grads: Any, opt_state: Any, params: Any,
                 finite: jax.Array) -> tuple[Any, Any, jax.Array]:
  """(params, opt_state, update norm) after one optimizer step, or with the params unchanged
  bit for bit when `finite` is False.

  The gate is a scalar folded into the elementwise update (zero gradient in, zero update
  out), so XLA still fuses the update in place over the donated buffers. A lax.cond
  around tx.update (or a per-leaf where(finite, new, old) over the optimizer state)
  materialises a second copy of the new params/moments instead: on CPU it added 1.37x the
  parameter bytes of temporaries to the step, this form adds none (BENCHMARKS.md). The
  price: on a skipped step the optimizer sees a zero gradient, so Adam's moments decay by
  one step (mu *= b1, nu *= b2) and its count advances.
  """
  safe = jax.tree_util.tree_map(lambda g: jnp.where(finite, g, jnp.zeros_like(g)), grads)
  updates, new_opt = tx.update(safe, opt_state, params)
  new_params = jax.tree_util.tree_map(
      lambda p, u: (p + jnp.where(finite, u, jnp.zeros_like(u))).astype(p.dtype), params, updates)
  return new_params, new_opt, jnp.where(finite, global_norm(updates), 0.0)


def train_step(graphdef: Any, rest: Any, tx: optax.GradientTransformation, cfg: StepConfig,
               state: TrainState, batch: dict[str, jax.Array],
               objective: Objective | None = None) -> tuple[TrainState, dict]:
  objective = objective or SFTObjective(cfg)
  grads, sums = grads_and_sums(graphdef, cfg, state.params, rest, batch, objective)
  den = jnp.maximum(sums.denominator, 1.0)
  grads = jax.tree_util.tree_map(lambda g: (g / den).astype(jnp.float32), grads)
  metrics = objective.finalize(sums)

  grad_norm = global_norm(grads)
  finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
  new_params, new_opt, update_norm = gated_update(tx, grads, state.opt_state, state.params, finite)
  new_state = TrainState(
      step=state.step + 1,
      params=new_params,
      opt_state=new_opt,
      rng=jax.random.fold_in(state.rng, state.step),
      nonfinite_steps=state.nonfinite_steps + (~finite).astype(jnp.int32))
  metrics.update(
      grad_norm=grad_norm, param_norm=global_norm(new_state.params),
      update_norm=update_norm,
      nonfinite=(~finite).astype(jnp.int32), nonfinite_steps=new_state.nonfinite_steps)
  return new_state, metrics


def batch_shardings(mesh: Mesh, batch_like: dict[str, Any]) -> dict[str, Any]:
  return {k: batch_sharding(mesh, len(v.shape)) for k, v in batch_like.items()}


def jit_train_step(graphdef: Any, rest: Any, tx: optax.GradientTransformation, cfg: StepConfig,
                   mesh: Mesh, state_shardings: TrainState,
                   batch_like: dict[str, Any], objective: Objective | None = None
                   ) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
  """jit with explicit in/out shardings; the state argument is donated.
  `objective` defaults to the SFT cross-entropy (SFTObjective(cfg))."""
  fn = lambda state, batch: train_step(graphdef, rest, tx, cfg, state, batch, objective)
  return jax.jit(fn, in_shardings=(state_shardings, batch_shardings(mesh, batch_like)),
                 out_shardings=(state_shardings, replicated(mesh)), donate_argnums=(0,))


def eval_step(graphdef: Any, rest: Any, cfg: StepConfig, params: Any,
              batch: dict[str, jax.Array], num_sources: int) -> dict[str, jax.Array]:
  """Per-source summed NLL and trained-token counts (for held-out loss)."""
  model = merge_model(graphdef, params, rest)
  hidden = model_hidden(model, batch)
  stats = loss_lib.token_stats(hidden, model.lm_head_kernel(), batch["targets"], mask=batch["loss_mask"],
                               chunk_size=cfg.loss_chunk_size, bias=head_bias(model))
  mask = batch["loss_mask"].astype(jnp.float32)
  src = jnp.clip(batch["source_ids"], 0, num_sources - 1)
  onehot = jax.nn.one_hot(src, num_sources, dtype=jnp.float32) * mask[..., None]
  return {"nll_sum": jnp.einsum("bt,bts->s", stats.nll, onehot),
          "correct_sum": jnp.einsum("bt,bts->s", stats.correct, onehot),
          "tokens": onehot.sum((0, 1))}
