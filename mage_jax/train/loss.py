"""Chunked next-token cross-entropy over packed bins.

At 32,768 tokens × 151,936 vocab, fp32 logits are ~20 GB per row, so the LM
head and the softmax run over chunks of the sequence under `lax.map` with a
`jax.checkpoint`ed body: the forward keeps only per-token scalars and the
backward recomputes each chunk's logits, so [T, V] never exists either way.
When the whole row fits in one chunk (T <= chunk_size, e.g. short CPU
benchmarks) the [B, T, V] logits exist anyway, so there is no map, no masked
reordering and no checkpoint: backward reuses the forward's logits instead of
recomputing them (the recompute was ~11% of the small benchmark step).

The loss is returned as *sums* (weighted loss, weight denominator, token
count, ...) so gradient accumulation can add micro-batches and divide once;
`finalize` turns the sums into means.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mage_jax.models.layers import matmul_2d


class TokenStats(NamedTuple):
  """Per-token quantities [B, T] from the chunked head (all fp32)."""
  nll: jax.Array       # -log p(target)
  lse: jax.Array       # log-sum-exp of the logits (for z-loss)
  correct: jax.Array   # 1.0 where the target logit is the max (argmax == target; ties count)
  # Entropy of the next-token distribution (nats), only when token_stats(with_entropy=True); a
  # compact vocabulary's is the full vocabulary's (the rest row's ids each hold an equal share).
  entropy: jax.Array | None = None


def token_stats(hidden: jax.Array, kernel: jax.Array, targets: jax.Array,
                *, chunk_size: int = 1024, mask: jax.Array | None = None,
                bias: jax.Array | None = None, with_entropy: bool = False) -> TokenStats:
  """Per-token NLL / logsumexp / correctness (and entropy) without materialising [B, T, V].

  hidden [B, T, D] (any float dtype), kernel [D, V], targets int32 [B, T]; `bias` [V] (fp32, a
  compact vocabulary's rest-row term: models/compact_vocab.py) is added to the logits.
  The matmul runs in hidden's dtype with fp32 accumulation; softmax in fp32.

  With `mask` [B, T], only masked tokens are computed (others read 0): with
  one chunk (T <= chunk_size) everything is computed in one go; otherwise each
  row's masked tokens are moved to the front (a stable, row-local sort, so the
  batch sharding is untouched) and chunks holding no masked token skip the
  vocab matmul via `lax.cond`. SFT trains a minority of tokens (prompts are
  masked), so most chunks are skipped.
  """
  b, t, d = hidden.shape
  chunk = max(1, min(chunk_size, t))
  n_chunks = -(-t // chunk)
  pad = n_chunks * chunk - t
  if n_chunks == 1:  # one chunk: nothing to skip or bound; keep logits for backward
    stats = _chunk_stats(hidden, kernel.astype(hidden.dtype), targets, bias, with_entropy)
    if mask is not None:  # same contract as the chunked path: unmasked tokens read 0
      stats = tuple(jnp.where(mask > 0, x, 0.0) for x in stats)
    return TokenStats(*stats)
  live = jnp.ones((b, t), bool) if mask is None else mask > 0
  order = None
  if mask is not None:
    order = jnp.argsort(~live, axis=1, stable=True)            # masked tokens first
    hidden = jnp.take_along_axis(hidden, order[..., None], axis=1)
    targets = jnp.take_along_axis(targets, order, axis=1)
    live = jnp.take_along_axis(live, order, axis=1)
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    live = jnp.pad(live, ((0, 0), (0, pad)))
  # [n_chunks, B, chunk, ...]: the batch axis stays where its sharding is.
  h_chunks = hidden.reshape(b, n_chunks, chunk, d).swapaxes(0, 1)
  t_chunks = targets.reshape(b, n_chunks, chunk).swapaxes(0, 1)
  l_chunks = live.reshape(b, n_chunks, chunk).swapaxes(0, 1)
  w = kernel.astype(hidden.dtype)

  def compute(h, tgt):
    return _chunk_stats(h, w, tgt, bias, with_entropy)

  def skip(h, tgt):
    z = jnp.zeros(tgt.shape, jnp.float32)
    return (z,) * (4 if with_entropy else 3)

  @jax.checkpoint
  def one_chunk(args):
    h, tgt, lv = args
    if mask is None:
      return compute(h, tgt)
    return jax.lax.cond(jnp.any(lv), compute, skip, h, tgt)

  per_chunk = jax.lax.map(one_chunk, (h_chunks, t_chunks, l_chunks))

  def unchunk(x):
    x = x.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :t]
    if order is None:
      return x
    inverse = jnp.argsort(order, axis=1)
    return jnp.where(mask > 0, jnp.take_along_axis(x, inverse, axis=1), 0.0)

  return TokenStats(*(unchunk(x) for x in per_chunk))


def _chunk_stats(h: jax.Array, w: jax.Array, tgt: jax.Array, bias: jax.Array | None = None,
                 with_entropy: bool = False):
  """(nll, lse, correct[, entropy]) [B, C] of one chunk's logits h [B, C, D] @ w [D, V] (+ bias),
  fp32 softmax."""
  logits = matmul_2d(h, w, preferred_element_type=jnp.float32)
  if bias is not None:
    logits = logits + bias
  # One max pass serves both the stable logsumexp and the accuracy ("target logit is
  # the max" == argmax == target, except that exact ties count as correct). A separate
  # argmax or "best other logit" pass cost 0.05-0.3 s of the small bench's 2.7 s step.
  top = jax.lax.stop_gradient(jnp.max(logits, axis=-1))
  shifted = logits - top[..., None]
  log_sum = jnp.log(jnp.sum(jnp.exp(shifted), axis=-1))
  lse = top + log_sum
  tgt_logit = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0]
  correct = (tgt_logit >= top).astype(jnp.float32)
  if not with_entropy:
    return lse - tgt_logit, lse, jax.lax.stop_gradient(correct)
  # H = -sum_i p_i (log p_i - bias_i), from the shifted logits (lse - logit cancels in fp32 for a
  # sharp distribution): for a compact row standing for n ids (bias log n) the full vocabulary's
  # n terms -(p/n) log(p/n) add up to -p (log p - log n), so this is the full model's entropy.
  logp = shifted - log_sum[..., None]
  if bias is not None:
    entropy = -jnp.sum(jnp.exp(logp) * (logp - bias), axis=-1)
  else:
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
  return lse - tgt_logit, lse, jax.lax.stop_gradient(correct), entropy


def token_weights(loss_mask: jax.Array, segment_ids: jax.Array,
                  per_sequence: bool) -> tuple[jax.Array, jax.Array]:
  """Weights [B, T] and their denominator (a scalar sum).

  Token mean: weight = mask, denominator = number of trained tokens.
  Per-sequence mean: every packed segment with trained tokens counts once;
  its tokens get mask / n_trained(segment) and the denominator is the number
  of such segments. Both are sums, so micro-batches add up exactly.
  """
  mask = loss_mask.astype(jnp.float32)
  if not per_sequence:
    return mask, mask.sum()
  # Count trained tokens per (row, segment id) with a one-hot over segment ids.
  max_seg = segment_ids.shape[-1] + 1
  onehot = jax.nn.one_hot(segment_ids, max_seg, dtype=jnp.float32)  # [B, T, S]
  per_seg = jnp.einsum("bt,bts->bs", mask, onehot)                    # [B, S]
  per_seg = per_seg.at[:, 0].set(0.0)                                 # padding segment
  n_tok = jnp.take_along_axis(per_seg, segment_ids, axis=-1)          # [B, T]
  weights = jnp.where(n_tok > 0, mask / jnp.maximum(n_tok, 1.0), 0.0)
  return weights, (per_seg > 0).sum().astype(jnp.float32)


class LossSums(NamedTuple):
  """Additive loss statistics of one (micro-)batch."""
  loss: jax.Array         # sum of weight * (nll + z_loss_weight * lse^2)
  nll: jax.Array          # sum of weight * nll
  z: jax.Array            # sum of weight * lse^2
  denominator: jax.Array  # sum of weights' normaliser (tokens or segments)
  tokens: jax.Array       # trained tokens
  correct: jax.Array      # trained tokens predicted right (argmax)


def loss_sums(hidden: jax.Array, kernel: jax.Array, targets: jax.Array,
              loss_mask: jax.Array, segment_ids: jax.Array, *,
              chunk_size: int = 1024, z_loss_weight: float = 0.0,
              per_sequence: bool = False, bias: jax.Array | None = None) -> LossSums:
  stats = token_stats(hidden, kernel, targets, chunk_size=chunk_size, mask=loss_mask, bias=bias)
  weights, denominator = token_weights(loss_mask, segment_ids, per_sequence)
  mask = loss_mask.astype(jnp.float32)
  nll = (weights * stats.nll).sum()
  z = (weights * jnp.square(stats.lse)).sum()
  return LossSums(loss=nll + z_loss_weight * z, nll=nll, z=z, denominator=denominator,
                  tokens=mask.sum(), correct=(mask * stats.correct).sum())


def finalize(sums: LossSums) -> dict[str, jax.Array]:
  """Means from sums; a batch with nothing trained gives loss 0, not NaN."""
  den = jnp.maximum(sums.denominator, 1.0)
  return {
      "loss": sums.loss / den,
      "nll": sums.nll / den,
      "z_loss": sums.z / den,
      "accuracy": sums.correct / jnp.maximum(sums.tokens, 1.0),
      "trained_tokens": sums.tokens,
  }


def cross_entropy(hidden: jax.Array, kernel: jax.Array, targets: jax.Array,
                  loss_mask: jax.Array, segment_ids: jax.Array, *,
                  chunk_size: int = 1024, z_loss_weight: float = 0.0,
                  per_sequence: bool = False) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Mean loss and metrics for a single batch (no accumulation)."""
  sums = loss_sums(hidden, kernel, targets, loss_mask, segment_ids, chunk_size=chunk_size,
                   z_loss_weight=z_loss_weight, per_sequence=per_sequence)
  metrics = finalize(sums)
  return metrics["loss"], metrics
