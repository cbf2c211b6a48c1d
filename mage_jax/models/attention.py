"""Segment-aware multi-head attention with GQA, behind explicit backends.

    attention(q, k, v, *, q_segment_ids, kv_segment_ids, causal, backend="xla",
              q_positions=None, kv_positions=None, scale=None, q_chunk=2048,
              causal_block=64, block_sizes=None) -> out [B, T, Hq, D]

q [B, T, Hq, D]; k, v [B, S, Hkv, D] with Hq a multiple of Hkv (query head h
uses kv head h // (Hq // Hkv), the HF `repeat_kv` order). Segment ids are
int32 [B, T] / [B, S]; 0 marks padding. A query attends to a key only when
both carry the same nonzero segment id and, if `causal`, kv_pos <= q_pos
(positions default to arange). Rows with no visible key (segment 0) output
zeros, never NaN. Logits and softmax are fp32; output has q's dtype.

Backends (chosen explicitly; nothing falls back silently):
- "xla": einsum + mask. Used on CPU and for decode with a KV cache.
  Packed self-attention (T == S and the *same* segment-id and position arrays
  passed for q and kv, as the decoder and the ViT do) runs in query blocks of
  `causal_block` slots (at most MAX_CAUSAL_BLOCKS blocks, unrolled):
  causal, block i attends only to keys [0, end of block i] (the upper triangle
  is never computed); relying on positions increasing with the slot inside each
  segment (our packed layout), checked (ValueError on concrete inputs, NaN rows
  under jit). With `max_segment_len` = L > 0 (a promise that every segment is
  one contiguous run of at most L slots; checked the same way) a block of
  queries [s, e) attends only to keys [s - L + 1, e) when causal and
  [s - L + 1, e + L - 1) when not: the cost follows the segments (about 2x the
  exact block-diagonal pairs), not the row, so a 32k row of 8k segments or a
  ViT row of 12 images stays affordable without the Pallas kernel. Other calls
  compute the full T×S logits. For T above `q_chunk` every query block/chunk is
  rematerialised so backward memory stays O(block*S).
- "pallas_gpu": our segment-aware flash kernel (`flash_attention.py`, Pallas
  → Triton): per query block it loops only over the key blocks that can share
  a segment with it (and only up to the diagonal when causal); backward
  likewise. Needs T == S and one segment-id array (packed self-attention),
  contiguous segments, causal by slot; `block_sizes` (flash.BlockSizes) sets
  its tiles. Not yet run on a GPU: see that module.
- "pallas_interpret": the same kernel with interpret=True (runs on CPU; tests).
There is no cuDNN backend: `jax.nn.dot_product_attention` takes no segment ids,
so it would attend across packed segments. The fallback when the Pallas kernel
fails (the GPU bench's preflight verdict) is "xla" with `max_segment_len`.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from mage_jax import sharding
from mage_jax.models import flash_attention as flash

BACKENDS = ("xla", "pallas_gpu", "pallas_interpret")
DEFAULT_Q_CHUNK = 2048
# XLA causal blocking: 64-query blocks (fastest of 32..256 for the small bench
# config's attention fwd+bwd on CPU); long rows use at most MAX_CAUSAL_BLOCKS blocks
# so the unrolled HLO stays small.
DEFAULT_CAUSAL_BLOCK = 64
MAX_CAUSAL_BLOCKS = 32


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, q_segment_ids: jax.Array,
              kv_segment_ids: jax.Array, causal: bool, backend: str = "xla",
              q_positions: jax.Array | None = None, kv_positions: jax.Array | None = None,
              scale: float | None = None, q_chunk: int | None = DEFAULT_Q_CHUNK,
              causal_block: int = DEFAULT_CAUSAL_BLOCK,
              block_sizes: flash.BlockSizes | None = None,
              max_segment_len: int = 0) -> jax.Array:
  _check_shapes(q, k, v, q_segment_ids, kv_segment_ids)
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  if backend == "xla":
    if (causal or max_segment_len > 0) and _is_packed_self_attention(
        q, k, q_segment_ids, kv_segment_ids, q_positions, kv_positions):
      return _xla_blocked(q, k, v, q_segment_ids, q_positions, scale, causal_block, q_chunk,
                          causal=causal, span=max_segment_len)
    return _xla_attention(q, k, v, q_segment_ids, kv_segment_ids, causal, q_positions,
                          kv_positions, scale, q_chunk)
  if backend in ("pallas_gpu", "pallas_interpret"):
    return _pallas_attention(q, k, v, q_segment_ids, kv_segment_ids, causal, q_positions,
                             kv_positions, scale, block_sizes,
                             interpret=backend == "pallas_interpret")
  raise ValueError(f"unknown attention backend {backend!r}; choose one of {BACKENDS}")


def _check_shapes(q, k, v, q_seg, kv_seg) -> None:
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise ValueError(f"attention wants q/k/v [B, T, H, D]; got {q.shape}, {k.shape}, {v.shape}")
  if k.shape != v.shape:
    raise ValueError(f"k {k.shape} and v {v.shape} must match")
  if q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
    raise ValueError(f"q {q.shape} and k {k.shape} disagree on batch or head_dim")
  if q.shape[2] % k.shape[2]:
    raise ValueError(f"query heads {q.shape[2]} not a multiple of kv heads {k.shape[2]}")
  if q_seg.shape != q.shape[:2] or kv_seg.shape != k.shape[:2]:
    raise ValueError(f"segment ids {q_seg.shape}/{kv_seg.shape} must be [B, T]={q.shape[:2]} "
                     f"and [B, S]={k.shape[:2]}")


# ----------------------------------------------------------------------------- xla


def _is_packed_self_attention(q, k, q_seg, kv_seg, q_pos, kv_pos) -> bool:
  """Static test: one packed row attending to itself (the decoder's training call)."""
  return q.shape[1] == k.shape[1] and q_seg is kv_seg and q_pos is kv_pos


def _xla_blocked(q, k, v, seg, pos, scale, block, q_chunk, *, causal: bool, span: int):
  """Self-attention in query blocks. Causal: block i sees keys [0, end of block i] only.
  span = L > 0: keys within L - 1 slots of the block only (every segment is one run of at
  most L slots, so no visible key lies further away)."""
  t = q.shape[1]
  block = max(block, -(-t // MAX_CAUSAL_BLOCKS))
  given = pos is not None
  if causal and not given:
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), seg.shape)
  if not causal:
    pos = seg  # unused by the non-causal mask; any [B, T] array keeps the signature
  fn = functools.partial(_xla_block, causal=causal, scale=scale)
  if q_chunk is not None and t > q_chunk:
    fn = jax.checkpoint(fn)  # long rows: backward keeps O(block*T) live, not O(T*T)
  outs = []
  for start in range(0, t, block):
    end = min(start + block, t)
    lo = max(0, start - span + 1) if span > 0 else 0
    hi = end if causal else (min(t, end + span - 1) if span > 0 else t)
    outs.append(fn(q[:, start:end], k[:, lo:hi], v[:, lo:hi], seg[:, start:end], seg[:, lo:hi],
                   pos[:, start:end], pos[:, lo:hi]))
  out = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=1)
  if span > 0:
    out = flash.raise_or_poison(flash.contiguity_violations(seg) | run_length_violations(seg, span),
                                out, "xla attention with max_segment_len",
                                f"every segment one contiguous run of at most {span} slots")
  if not (causal and given):
    return out
  return flash.raise_or_poison(flash.position_violations(seg, pos), out, "xla causal attention",
                               "positions increasing with the slot inside each segment")


def run_length_violations(segment_ids: jax.Array, max_len: int) -> jax.Array:
  """bool [B]: rows where a run of one nonzero segment id is longer than `max_len` slots."""
  t = segment_ids.shape[1]
  slots = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), segment_ids.shape)
  new_run = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], bool),
                             segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
  run_start = jax.lax.cummax(jnp.where(new_run, slots, 0), axis=1)
  return jnp.any((segment_ids != 0) & (slots - run_start >= max_len), axis=1)


def _xla_attention(q, k, v, q_seg, kv_seg, causal, q_pos, kv_pos, scale, q_chunk):
  b, t, hq, d = q.shape
  s = k.shape[1]
  if causal:
    if q_pos is None:
      q_pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    if kv_pos is None:
      kv_pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
  if q_chunk is None or t <= q_chunk:
    return _xla_block(q, k, v, q_seg, kv_seg, q_pos, kv_pos, causal=causal, scale=scale)
  # Chunk over queries; each chunk recomputed in backward so only O(chunk*S) is live.
  # Pad queries to a multiple of the chunk with segment 0 (those rows come out zero).
  pad = (-t) % q_chunk
  if pad:
    q = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0)))
    q_seg = jnp.pad(q_seg, ((0, 0), (0, pad)))
    q_pos = None if q_pos is None else jnp.pad(q_pos, ((0, 0), (0, pad)))
  n = (t + pad) // q_chunk
  split = lambda x: None if x is None else jnp.moveaxis(
      x.reshape(b, n, q_chunk, *x.shape[2:]), 1, 0)
  block = jax.checkpoint(functools.partial(_xla_block, causal=causal, scale=scale))
  qs, segs, poss = split(q), split(q_seg), split(q_pos)

  def body(_, xs):
    qc, sc, pc = xs
    return None, block(qc, k, v, sc, kv_seg, pc, kv_pos)

  _, out = jax.lax.scan(body, None, (qs, segs, poss) if causal else (qs, segs, segs))
  return jnp.moveaxis(out, 0, 1).reshape(b, t + pad, hq, d)[:, :t]


def _xla_block(q, k, v, q_seg, kv_seg, q_pos, kv_pos, *, causal: bool, scale: float):
  b, t, hq, d = q.shape
  hkv = k.shape[2]
  g = hq // hkv
  # Scale the [T, D] queries, not the [T, S] logits, where that costs no precision.
  fold = q.dtype == jnp.float32
  qg = (q * scale if fold else q).reshape(b, t, hkv, g, d)  # grouped view: no kv copies
  logits = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32)
  if not fold:
    logits = logits * scale
  mask = (q_seg[:, :, None] == kv_seg[:, None, :]) & (q_seg[:, :, None] != 0)
  if causal:
    mask = mask & (kv_pos[:, None, :] <= q_pos[:, :, None])
  logits = jnp.where(mask[:, None, None], logits, -1e30)  # mask [B, 1, 1, T, S]
  # The max is a shift only (softmax is invariant to it): no gradient through it.
  m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  p = jnp.exp(logits - m)
  denom = jnp.sum(p, axis=-1)  # >= 1: the max term is exp(0)
  out = jnp.einsum("bkgts,bskd->bkgtd", p.astype(v.dtype), v,
                   preferred_element_type=jnp.float32) / denom[..., None]
  # A row with no visible key (padding) had p uniform over masked keys: zero it on
  # the [T, D] output rather than masking p over [T, S].
  out = jnp.where(m > -1e29, out, 0.0)
  out = jnp.einsum("bkgtd->btkgd", out)
  return out.reshape(b, t, hq, d).astype(q.dtype)


# -------------------------------------------------------------------------- pallas


def _per_shard(kernel, q, k, v, seg, positions):
  """Runs the Pallas kernel on each device's shard under a mesh.

  XLA cannot partition a custom kernel: without this, a sharded jit would gather
  q/k/v onto every device. Rows split over the batch axes and heads over the
  tensor axis are independent, so the kernel runs per shard with no communication.
  """
  qs = sharding.fitted_activation_spec(q.shape, ("act_batch", None, "act_heads", None))
  if qs is None:
    return kernel(q, k, v, seg, positions=positions)
  ks = sharding.fitted_activation_spec(k.shape, ("act_batch", None, "act_kv_heads", None))
  if qs[2] != ks[2]:  # GQA groups stay aligned only if q and kv heads split alike
    qs = PartitionSpec(qs[0], None, None, None)
    ks = PartitionSpec(qs[0], None, None, None)
  ks = PartitionSpec(qs[0], None, ks[2], None)  # the batch split must match q's
  rows = PartitionSpec(qs[0], None)
  body = lambda q, k, v, seg, pos: kernel(q, k, v, seg, positions=pos)
  return jax.shard_map(body, in_specs=(qs, ks, ks, rows, None if positions is None else rows),
                       out_specs=qs, check_vma=False)(q, k, v, seg, positions)


def _pallas_attention(q, k, v, q_seg, kv_seg, causal, q_pos, kv_pos, scale, block_sizes, *,
                      interpret):
  t, s = q.shape[1], k.shape[1]
  if t != s:
    raise NotImplementedError(
        f"pallas attention is packed self-attention: q and kv lengths differ (T={t}, S={s}); "
        "use backend 'xla' for KV-cache decode")
  # The kernel reads one segment-id array (and, causal, one position array) for q and kv.
  checks = []
  if kv_seg is not q_seg:
    checks.append(jnp.any(q_seg != kv_seg, axis=1))
  positions = None
  if causal and (q_pos is not None or kv_pos is not None):
    slots = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), q_seg.shape)
    positions = slots if q_pos is None else q_pos
    kv_positions = slots if kv_pos is None else kv_pos
    if kv_positions is not positions:
      checks.append(jnp.any(positions != kv_positions, axis=1))
  kernel = functools.partial(flash.segment_flash_attention, causal=causal, scale=scale,
                             block_sizes=block_sizes, interpret=interpret)
  out = _per_shard(kernel, q, k, v, q_seg, positions)
  for bad in checks:
    out = flash.raise_or_poison(bad, out, "pallas attention",
                                "q and kv segment ids (and positions) must be equal")
  return out
