"""Segment-aware multi-head attention with GQA, behind explicit backends.

    attention(q, k, v, *, q_segment_ids, kv_segment_ids, causal, backend="xla",
              q_positions=None, kv_positions=None, scale=None) -> out [B, T, Hq, D]

q [B, T, Hq, D]; k, v [B, S, Hkv, D] with Hq a multiple of Hkv (query head h
uses kv head h // (Hq // Hkv), the HF `repeat_kv` order). Segment ids are
int32 [B, T] / [B, S]; 0 marks padding. A query attends to a key only when
both carry the same nonzero segment id and, if `causal`, kv_pos <= q_pos
(positions default to arange). Rows with no visible key (segment 0) output
zeros, never NaN. Logits and softmax are fp32; output has q's dtype.

Backends (chosen explicitly; nothing falls back silently):
- "xla": einsum + mask. Memory O(T*S) per head; for T above `q_chunk` the
  queries are processed in rematerialised chunks so backward memory stays
  O(q_chunk*S) per chunk. Used on CPU and for decode with a KV cache.
- "pallas_gpu": the segment-aware flash kernel of
  `jax.experimental.pallas.ops.gpu.attention.mha` (Triton). It takes one
  segment-id array for q and kv, so it needs T == S and treats causality by
  slot index: valid for packed rows where each segment is contiguous and its
  positions increase with the slot (our packed layout). Sequences are padded
  to the block size with segment 0; kv heads are repeated for GQA.
- "pallas_interpret": the same kernel with interpret=True (runs on CPU; tests).
- "cudnn": not implemented for segment ids: `jax.nn.dot_product_attention`
  has no segment-id argument and cuDNN's packed (offset) layout is not wired;
  raises NotImplementedError instead of attending across segments.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

BACKENDS = ("xla", "pallas_gpu", "pallas_interpret", "cudnn")
DEFAULT_Q_CHUNK = 2048
PALLAS_BLOCK = 128


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, q_segment_ids: jax.Array,
              kv_segment_ids: jax.Array, causal: bool, backend: str = "xla",
              q_positions: jax.Array | None = None, kv_positions: jax.Array | None = None,
              scale: float | None = None, q_chunk: int | None = DEFAULT_Q_CHUNK) -> jax.Array:
  _check_shapes(q, k, v, q_segment_ids, kv_segment_ids)
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  if backend == "xla":
    return _xla_attention(q, k, v, q_segment_ids, kv_segment_ids, causal, q_positions,
                          kv_positions, scale, q_chunk)
  if backend in ("pallas_gpu", "pallas_interpret"):
    return _pallas_attention(q, k, v, q_segment_ids, kv_segment_ids, causal, q_positions,
                             kv_positions, scale, interpret=backend == "pallas_interpret")
  if backend == "cudnn":
    raise NotImplementedError(
        "attention backend 'cudnn' cannot honour segment ids: "
        "jax.nn.dot_product_attention(implementation='cudnn') in this JAX takes no "
        "segment ids, and cuDNN's packed q/kv offset layout is not wired here. "
        "Use attention_backend='pallas_gpu' for packed sequences.")
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
  qg = q.reshape(b, t, hkv, g, d)  # grouped view: no repeated kv copies
  logits = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32)
  logits = logits * scale
  mask = (q_seg[:, :, None] == kv_seg[:, None, :]) & (q_seg[:, :, None] != 0)
  if causal:
    mask = mask & (kv_pos[:, None, :] <= q_pos[:, :, None])
  mask = mask[:, None, None]  # [B, 1, 1, T, S]
  logits = jnp.where(mask, logits, -1e30)
  m = jnp.max(logits, axis=-1, keepdims=True)
  p = jnp.exp(logits - m)
  p = jnp.where(mask, p, 0.0)  # fully masked rows: all zero, not uniform
  denom = jnp.sum(p, axis=-1, keepdims=True)
  p = p / jnp.maximum(denom, 1e-30)
  out = jnp.einsum("bkgts,bskd->btkgd", p.astype(v.dtype), v,
                   preferred_element_type=jnp.float32)
  return out.reshape(b, t, hq, d).astype(q.dtype)


# -------------------------------------------------------------------------- pallas


def _pallas_attention(q, k, v, q_seg, kv_seg, causal, q_pos, kv_pos, scale, *, interpret):
  from jax.experimental.pallas.ops.gpu import attention as pallas_attention

  b, t, hq, d = q.shape
  s, hkv = k.shape[1], k.shape[2]
  if t != s:
    raise NotImplementedError(
        f"pallas attention needs q and kv of equal length (got T={t}, S={s}); "
        "use backend 'xla' for KV-cache decode")
  del q_pos, kv_pos  # causality by slot index; see module docstring
  if hq != hkv:
    k = jnp.repeat(k, hq // hkv, axis=2)
    v = jnp.repeat(v, hq // hkv, axis=2)
  block = min(PALLAS_BLOCK, _next_pow2(t)) if interpret else PALLAS_BLOCK
  pad = (-t) % block
  seg = q_seg.astype(jnp.int32)
  if pad:
    widths = ((0, 0), (0, pad), (0, 0), (0, 0))
    q, k, v = (jnp.pad(x, widths) for x in (q, k, v))
    seg = jnp.pad(seg, ((0, 0), (0, pad)))
  # kv segments equal q segments here (T == S, same packed row); check cheaply when concrete.
  del kv_seg
  sizes = pallas_attention.BlockSizes(block_q=block, block_k=block, block_q_dkv=min(block, 32),
                                      block_kv_dkv=min(block, 32), block_q_dq=min(block, 32),
                                      block_kv_dq=min(block, 32))
  out = pallas_attention.mha(q, k, v, seg, sm_scale=scale, causal=causal, block_sizes=sizes,
                             interpret=interpret)
  out = out[:, :t]
  # Padding rows (segment 0) attended each other inside the kernel; zero them.
  return jnp.where((q_seg != 0)[:, :, None, None], out, 0).astype(q.dtype)


def _next_pow2(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())
