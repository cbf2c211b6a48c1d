"""The RL objective (DESIGN.md "RL objective"): group-relative advantages and
the clipped surrogate with a truncated importance weight, as additive sums.

Per policy token (loss_mask 1):
  rho = exp(logp_new - logp_old)
  w   = stop_gradient(min(exp(logp_old - logp_rollout), C))
  l   = w * max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high))
and the loss is the token mean of l - c * e * H over policy tokens, where H is the entropy of the
policy's next-token distribution at the token's context, c is rl.entropy_coeff (verl's sign:
c > 0 keeps entropy up, c < 0 sharpens the policy toward its mode; 0, the default, leaves GRPO's
loss as it is and H a metric) and e the batch's entropy_weight (1 by default; the RL batch sets
0 on the calls the harness could not parse, so the term never sharpens a broken call), times 0
where H exceeds the gate g (rl.entropy_gate_nats; 0 = no gate): a position where the policy has no
mode is not sharpened onto whatever leads it (docs/rl.md). logp_old is the
learner's log-prob under the parameters before the update, logp_rollout the
inference engine's log-prob of the sampled token; w corrects the engine/learner
mismatch.

When the update is one optimizer step over the batch (the RL loop's default; also
with gradient accumulation, whose micro-batches all see the same parameters),
logp_old *is* the update's own forward: `RLObjective(logp_old_in_update=True)`
takes it as stop_gradient(logp_new) and saves the separate forward pass. A
caller that takes several optimizer steps per batch (rl.epochs_per_update > 1)
fills batch["logp_old"] once before the first (`make_logp_fn`) and keeps the
default, so the clip bounds how far the steps move the batch's tokens.

Everything is returned as *sums* (RLSums) so gradient accumulation adds
micro-batches and divides once, exactly like train.loss.LossSums; the train
step takes the RL objective through its pluggable `objective` argument.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from mage_jax.train import loss as loss_lib
from mage_jax.train.state import merge_model
from mage_jax.train.step import head_bias, model_hidden, split_micro


def group_advantages(rewards: jax.Array, eps: float = 1e-6) -> jax.Array:
  """rewards [G, N] (G task groups x N episodes) -> advantages [G, N].

  A = (r - mean_g) / (std_g + eps) with the population std (ddof=0). A group
  whose rewards are all equal carries no signal: its advantages are exactly 0
  (also with eps = 0). Flatness is decided by exact equality of the rewards,
  not by std > 0: for values not exact in fp32 (2/3, 0.7) the fp32 mean can be
  one rounding step off, leaving a ~1e-8 std that would turn into A ~ +-1.
  """
  rewards = jnp.asarray(rewards, jnp.float32)
  varied = jnp.any(rewards != rewards[..., :1], axis=-1, keepdims=True)
  mean = rewards.mean(axis=-1, keepdims=True)
  centered = rewards - mean
  std = jnp.sqrt(jnp.mean(jnp.square(centered), axis=-1, keepdims=True))
  # std > 0 as well: differences so small that their squares underflow would divide by 0.
  return jnp.where(varied & (std > 0), centered / (std + eps), 0.0)


def tis_weight(logp_old: jax.Array, logp_rollout: jax.Array, cap: float) -> jax.Array:
  """Truncated importance weight stop_gradient(min(exp(logp_old - logp_rollout), cap))."""
  return jax.lax.stop_gradient(jnp.minimum(jnp.exp(logp_old - logp_rollout), cap))


class RLLossConfig(NamedTuple):
  clip_eps_low: float = 0.2
  clip_eps_high: float = 0.28
  tis_cap: float = 2.0
  entropy_coeff: float = 0.0
  # the term acts only on tokens whose (stop-gradient) entropy is <= this many nats; 0 = every token.
  # Why: at a position with no mode (5.88 nats, top probability 0.046) c < 0 drove one call's
  # think onto a newline loop (probability 1.000 after 16 updates; docs/results.md, session 42).
  entropy_gate: float = 0.0


class RLSums(NamedTuple):
  """Additive RL statistics of one (micro-)batch (fp32 scalars)."""
  loss: jax.Array         # sum over policy tokens of w * max(-A*rho, -A*clip(rho)) - c * e * H
  denominator: jax.Array  # policy tokens (the token-mean normaliser)
  tokens: jax.Array       # policy tokens
  clipped: jax.Array      # policy tokens whose gradient the clip zeroes
  truncated: jax.Array    # policy tokens whose importance weight hit the cap
  ratio_sum: jax.Array    # sum of rho
  kl_sum: jax.Array       # sum of (rho - 1) - log rho (k3 estimate of KL(old || new))
  gap_sum: jax.Array      # sum of |logp_old - logp_rollout| (learner vs engine on the sampled tokens)
  entropy_sum: jax.Array  # sum of H, the entropy of the next-token distribution (nats)
  above_gate: jax.Array   # policy tokens whose H is above cfg.entropy_gate (0 without a gate)


def grpo_sums(logp_new: jax.Array, logp_old: jax.Array, logp_rollout: jax.Array,
              advantages: jax.Array, mask: jax.Array, cfg: RLLossConfig,
              entropy: jax.Array | None = None, entropy_weight: jax.Array | None = None
              ) -> RLSums:
  """RLSums of [B, T] fp32 inputs; mask = 1 on policy-generated tokens. entropy [B, T] (the
  policy's next-token entropy, differentiable) is needed when cfg.entropy_coeff is not 0;
  entropy_weight [B, T] (None: 1) scales the entropy term per token, not the entropy metric.

  Tokens with mask 0 contribute nothing to any sum or gradient, even when their
  log-probs are garbage (inf/NaN): they are replaced before any arithmetic, so
  no 0 * inf reaches the forward or the backward.
  """
  live = mask > 0
  m = live.astype(jnp.float32)
  zero = jnp.zeros_like(m)
  new = jnp.where(live, logp_new.astype(jnp.float32), zero)
  old = jnp.where(live, logp_old.astype(jnp.float32), zero)
  rollout = jnp.where(live, logp_rollout.astype(jnp.float32), zero)
  adv = jnp.where(live, advantages.astype(jnp.float32), zero)
  if entropy is None and cfg.entropy_coeff:
    raise ValueError(f"entropy_coeff={cfg.entropy_coeff} needs the per-token entropy")
  ent = zero if entropy is None else jnp.where(live, entropy.astype(jnp.float32), zero)
  ent_w = m if entropy_weight is None else jnp.where(live, entropy_weight.astype(jnp.float32), zero)
  above = (jax.lax.stop_gradient(ent) > cfg.entropy_gate) if cfg.entropy_gate > 0 else (zero > 0)
  ent_w = jnp.where(above, zero, ent_w)

  log_ratio = new - jax.lax.stop_gradient(old)
  rho = jnp.exp(log_ratio)
  unclipped = -adv * rho
  clipped = -adv * jnp.clip(rho, 1.0 - cfg.clip_eps_low, 1.0 + cfg.clip_eps_high)
  surrogate = jnp.maximum(unclipped, clipped)
  w = tis_weight(old, rollout, cfg.tis_cap)

  rho_sg = jax.lax.stop_gradient(rho)
  log_ratio_sg = jax.lax.stop_gradient(log_ratio)
  tokens = m.sum()
  return RLSums(
      loss=(m * (w * surrogate - cfg.entropy_coeff * ent_w * ent)).sum(),
      denominator=tokens,
      tokens=tokens,
      clipped=(m * (clipped > unclipped)).sum(),
      truncated=(m * (jnp.exp(old - rollout) > cfg.tis_cap)).sum(),
      ratio_sum=(m * rho_sg).sum(),
      kl_sum=(m * ((rho_sg - 1.0) - log_ratio_sg)).sum(),
      gap_sum=(m * jnp.abs(old - rollout)).sum(),
      entropy_sum=(m * jax.lax.stop_gradient(ent)).sum(),
      above_gate=(m * above).sum())


def rl_finalize(sums: RLSums) -> dict[str, jax.Array]:
  """Means from sums; a batch without policy tokens gives loss 0, not NaN."""
  den = jnp.maximum(sums.denominator, 1.0)
  n = jnp.maximum(sums.tokens, 1.0)
  return {
      "loss": sums.loss / den,
      "clip_frac": sums.clipped / n,
      "tis_trunc_frac": sums.truncated / n,
      "mean_ratio": sums.ratio_sum / n,
      "approx_kl": sums.kl_sum / n,
      # Mean |learner - engine| log-prob of the sampled tokens: ~0 for samples of the current
      # version (bf16 export rounding), larger with policy lag; a learner reading other tokens
      # or weights than the engine sampled from shows here first.
      "rollout_logp_gap": sums.gap_sum / n,
      "entropy": sums.entropy_sum / n,
      # the share of policy tokens the entropy term leaves alone for having no mode (rl.entropy_gate_nats)
      "entropy_above_gate_frac": sums.above_gate / n,
      "policy_tokens": sums.tokens,
  }


def token_logprobs(model: Any, batch: dict[str, jax.Array], chunk_size: int) -> jax.Array:
  """[B, T] fp32 log p(targets) under `model` on the policy tokens (0 where loss_mask is 0); on a
  compact vocabulary, the log-prob of the full-vocabulary id each target row stands for."""
  return logprobs_and_entropy(model, batch, chunk_size)[0]


def logprobs_and_entropy(model: Any, batch: dict[str, jax.Array], chunk_size: int,
                         with_entropy: bool = False) -> tuple[jax.Array, jax.Array | None]:
  """token_logprobs, and with_entropy: [B, T] fp32 entropy of the next-token distribution at each
  policy token (the full vocabulary's, also on a compact one; 0 where loss_mask is 0).

  The chunked LM head of the SFT loss (train.loss.token_stats), so [B, T, V]
  logits never exist for long rows; logp = -nll. A batch with `patches` (GUI /
  hybrid samples, rl.batch) runs Mage-VL's forward with the screenshots, like
  the SFT step (train.step.model_hidden).
  """
  hidden = model_hidden(model, batch)
  bias = head_bias(model)
  stats = loss_lib.token_stats(hidden, model.lm_head_kernel(), batch["targets"],
                               chunk_size=chunk_size, mask=batch["loss_mask"], bias=bias,
                               with_entropy=with_entropy)
  if bias is None:
    return -stats.nll, stats.entropy
  # A compact vocabulary (models/compact_vocab.py): the rest row holds the mass of all
  # rest_ids ids it stands for (its bias is log rest_ids), so one sampled id of them has
  # log-prob log p(rest row) - log rest_ids: the full model's log-prob, which the engine
  # (serving the expanded params) reports and the importance weight compares against.
  live = batch["loss_mask"] > 0
  return jnp.where(live, -stats.nll - bias[batch["targets"]], 0.0), stats.entropy


@dataclasses.dataclass(frozen=True)
class RLObjective:
  """The objective train.step plugs in: sums(model, batch) -> RLSums, finalize(sums) -> metrics.

  The batch carries the RL fields of mage_jax.rl.batch. logp_old_in_update=False:
  batch["logp_old"] filled by the learner (make_logp_fn) before the update; True:
  logp_old = stop_gradient of this forward (valid only for one optimizer step per batch).
  """
  cfg: RLLossConfig
  chunk_size: int
  logp_old_in_update: bool = False

  def sums(self, model: Any, batch: dict[str, jax.Array]) -> RLSums:
    # The entropy is always computed: a metric at c = 0 (one more pass over the head's
    # logits, small beside the forward), the loss's second term otherwise.
    logp_new, entropy = logprobs_and_entropy(model, batch, self.chunk_size, with_entropy=True)
    logp_old = (jax.lax.stop_gradient(logp_new) if self.logp_old_in_update
                else batch["logp_old"])
    if not self.cfg.entropy_coeff:
      entropy = jax.lax.stop_gradient(entropy)
    return grpo_sums(logp_new, logp_old, batch["logp_rollout"], batch["advantages"],
                     batch["loss_mask"], self.cfg, entropy, batch.get("entropy_weight"))

  def finalize(self, sums: RLSums) -> dict[str, jax.Array]:
    return rl_finalize(sums)


def rl_objective(cfg: RLLossConfig, chunk_size: int, *, logp_old_in_update: bool = False
                 ) -> RLObjective:
  """The RL objective for `train.step.jit_train_step(..., objective=rl_objective(cfg, chunk))`.

  logp_old_in_update=True when each batch gets exactly one optimizer step (the RL loop):
  logp_old is the update's own forward, no separate pass. False (several steps per batch):
  the caller fills batch["logp_old"] once per batch with make_logp_fn.
  """
  return RLObjective(cfg=cfg, chunk_size=chunk_size, logp_old_in_update=logp_old_in_update)


def make_logp_fn(graphdef: Any, rest: Any, chunk_size: int, micro_batches: int = 1
                 ) -> Callable[[Any, dict[str, jax.Array]], jax.Array]:
  """The learner's jitted (params, batch) -> logp [B, T]: batch["logp_old"] for a caller
  taking several optimizer steps per batch, and the weight-sync probe's reference.

  micro_batches > 1 computes it one micro-batch at a time, in train.step's split (rows j,
  j+n, ...), so it holds what one micro-batch of the update holds; a micro-batch without a
  trained token (an RL update's padding) is not computed and gives zeros."""
  def one(model, mb):
    return jax.lax.cond(jnp.any(mb["loss_mask"] > 0), lambda m: token_logprobs(model, m, chunk_size),
                        lambda m: jnp.zeros(m["loss_mask"].shape, jnp.float32), mb)

  def logp(params, batch):
    model = merge_model(graphdef, params, rest)
    if micro_batches == 1:
      return token_logprobs(model, batch, chunk_size)
    per_micro = jax.lax.map(lambda mb: one(model, mb), split_micro(batch, micro_batches))
    return per_micro.swapaxes(0, 1).reshape(batch["loss_mask"].shape)   # split_micro undone

  return jax.jit(logp)
