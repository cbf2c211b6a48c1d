"""Segment-aware flash attention in Pallas (Triton on NVIDIA GPUs) that skips foreign blocks.

    segment_flash_attention(q, k, v, segment_ids, *, causal, scale, positions=None,
                            block_sizes=BlockSizes(), interpret=False) -> out [B, T, Hq, D]

Packed self-attention: q [B, T, Hq, D], k/v [B, T, Hkv, D] (Hq a multiple of
Hkv; query head h reads kv head h // (Hq // Hkv) through the BlockSpec index
map, so kv is never repeated in memory), segment ids int32 [B, T] with 0 =
padding. A query attends to a key iff both have the same nonzero segment id
and, if `causal`, key slot <= query slot. Padding rows come out exactly zero.

Precondition (our packed layout, ARCHITECTURE.md): every nonzero segment id
occupies ONE contiguous run of slots, and when `causal` the positions inside a
segment increase with the slot (so "kv_pos <= q_pos" == "kv slot <= q slot").
`layout_violations` checks both in O(T log T) (two sorts of [B, T] ints):
with concrete inputs a violation raises ValueError; under jit (traced inputs)
the offending rows' outputs become NaN, so a broken batch shows up as a NaN
loss instead of a silently wrong one.

Block skipping. Per query block, `block_ranges` computes (from segment start /
end offsets, in plain jnp, no host round trip) the contiguous range of key
blocks that can share a segment with it, clipped at the diagonal when causal;
per key block, the range of query blocks. The kernels get these as small int32
arrays [B, n_blocks] and run `lax.fori_loop(lo, hi, ...)` over exactly those
blocks. A 32k row of 8k-token segments therefore costs ~4 segments' worth of
attention, not one 32k sequence's (which is ~4x more causal, ~8x with padding
and images for the ViT's bidirectional blocks).

Kernels (one implementation; `interpret=True` runs the same code on CPU):
- forward, grid (q blocks, B, Hq): online softmax in base 2, fp32 accumulators;
  writes out and the base-2 log-sum-exp (0 for rows that see no key);
- dq, grid (q blocks, B, Hq): loops over the query block's key range;
- dk/dv, grid (kv blocks, B, Hq): loops over the key block's query range. It
  writes fp32 dk/dv per *query* head, summed over each GQA group afterwards in
  XLA (a transient [B, T, Hq, D] fp32 buffer; no atomics, which keeps the
  kernel to constructs jax's own Triton mha kernel uses).
delta = rowsum(out * dout) is computed in XLA. Inputs may be bf16 (dots
accumulate in fp32) or fp32. Head dims that are not a power of two are padded
with zeros (Triton tiles need powers of two); sequences are padded with
segment 0 to a multiple of the block sizes.

NOT RUN ON A GPU: the session that wrote this had no GPU. It is tested only in
interpret mode on CPU (tests/test_attention.py). It uses only constructs that
jax's Triton mha kernel uses (pl.program_id, ref slicing with pl.ds,
plgpu.load/plgpu.store, plgpu.dot, lax.fori_loop with traced bounds, exp2,
BlockSpecs with integer index maps, (1,)-blocks read as ref[0] as in jax's
paged_attention kernel), but the first run on an H100/H200 is its first Triton
lowering: run `python -m launch.bench --suite=gpu` (packed == split check).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from mage_jax.models import jax_compat


# Masked logits; finite so no inf - inf. The running max starts at M_INIT, above
# MASK_VALUE, so a fully masked block gives exp2(MASK_VALUE - M_INIT) = 0, not 1.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)
M_INIT = -1e30
MIN_BLOCK = 16  # Triton dots need tiles of at least 16


@dataclasses.dataclass(frozen=True)
class BlockSizes:
  """Tile sizes: forward q×kv, dq q×kv, dk/dv kv×q. Powers of two >= 16.

  Defaults aim at Hopper with head_dim 64-128 (128×128 forward as jax's mha,
  64×64 backward tiles keep the fp32 dk/dv/dq accumulators in registers).
  """
  block_q: int = 128
  block_kv: int = 128
  block_q_dq: int = 64
  block_kv_dq: int = 64
  block_kv_dkv: int = 64
  block_q_dkv: int = 64
  num_warps_fwd: int | None = None  # None: 4 for head_dim <= 64 else 8
  num_warps_bwd: int = 4
  num_stages: int = 2

  def shrink_to(self, t: int) -> "BlockSizes":
    """Blocks no larger than the (power-of-two rounded) sequence, for short rows."""
    cap = max(MIN_BLOCK, 1 << max(0, (t - 1).bit_length()))
    sizes = {f.name: min(getattr(self, f.name), cap) for f in dataclasses.fields(self)
             if f.name.startswith("block_")}
    return dataclasses.replace(self, **sizes)

  def validate(self) -> None:
    for f in dataclasses.fields(self):
      if f.name.startswith("block_"):
        n = getattr(self, f.name)
        if n < MIN_BLOCK or n & (n - 1):
          raise ValueError(f"BlockSizes.{f.name}={n} must be a power of two >= {MIN_BLOCK}")

  @property
  def lcm(self) -> int:
    return max(getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name.startswith("block_"))  # powers of two: the max is the lcm


# ------------------------------------------------------------------ layout & ranges


def segment_bounds(segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Per slot, the [start, end) slots of the contiguous run it belongs to. [B, T] each."""
  b, t = segment_ids.shape
  idx = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  new = jnp.concatenate([jnp.ones((b, 1), bool), segment_ids[:, 1:] != segment_ids[:, :-1]], 1)
  last = jnp.concatenate([segment_ids[:, 1:] != segment_ids[:, :-1], jnp.ones((b, 1), bool)], 1)
  start = lax.cummax(jnp.where(new, idx, 0), axis=1)
  end = lax.cummin(jnp.where(last, idx + 1, t), axis=1, reverse=True)
  return start, end


def block_ranges(segment_ids: jax.Array, block_q: int, block_kv: int, *, causal: bool,
                 by: str) -> tuple[jax.Array, jax.Array]:
  """[lo, hi) block ranges, int32 [B, n_blocks] each, of the blocks the kernels visit.

  by="q": per query block of `block_q` slots, the key blocks (of `block_kv`)
  that can hold a key of one of its queries' segments (and, if causal, at or
  before its last query). by="kv": per key block, the query blocks that can
  attend to one of its keys. Blocks with no real (nonzero) slot get [0, 0).
  T must be a multiple of both block sizes.
  """
  b, t = segment_ids.shape
  start, end = segment_bounds(segment_ids)
  real = segment_ids != 0
  own, other = (block_q, block_kv) if by == "q" else (block_kv, block_q)
  n = t // own
  lo = jnp.where(real, start, t).reshape(b, n, own).min(-1)
  hi = jnp.where(real, end, 0).reshape(b, n, own).max(-1)
  first = jnp.arange(n, dtype=jnp.int32) * own
  if causal and by == "q":
    hi = jnp.minimum(hi, first + own)   # keys up to this block's last query
  elif causal:
    lo = jnp.maximum(lo, first)         # queries from this block's first key on
  empty = hi <= lo
  lo_blk = jnp.where(empty, 0, lo // other).astype(jnp.int32)
  hi_blk = jnp.where(empty, 0, (hi + other - 1) // other).astype(jnp.int32)
  return lo_blk, hi_blk


def contiguity_violations(segment_ids: jax.Array) -> jax.Array:
  """bool [B]: rows where some nonzero segment id occupies more than one run of slots."""
  seg = segment_ids
  runs = ((seg[:, 1:] != seg[:, :-1]) & (seg[:, 1:] != 0)).sum(1) + (seg[:, 0] != 0)
  srt = jnp.sort(seg, axis=1)
  distinct = ((srt[:, 1:] != srt[:, :-1]) & (srt[:, 1:] != 0)).sum(1) + (srt[:, 0] != 0)
  return runs != distinct


def position_violations(segment_ids: jax.Array, positions: jax.Array) -> jax.Array:
  """bool [B]: rows where, inside a nonzero segment, positions do not strictly increase
  with the slot (then "kv_pos <= q_pos" is not "kv slot <= q slot"). Segments may be
  split into several runs: slots are grouped by a stable sort on the segment id."""
  order = jnp.argsort(segment_ids, axis=1, stable=True)
  seg = jnp.take_along_axis(segment_ids, order, axis=1)
  pos = jnp.take_along_axis(positions, order, axis=1)
  same = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] != 0)
  return jnp.any(same & (pos[:, 1:] <= pos[:, :-1]), axis=1)


def layout_violations(segment_ids: jax.Array, positions: jax.Array | None) -> jax.Array:
  """bool [B]: rows breaking this kernel's precondition (module docstring)."""
  bad = contiguity_violations(segment_ids)
  if positions is not None:
    bad = bad | position_violations(segment_ids, positions)
  return bad


def raise_or_poison(bad: jax.Array, out: jax.Array, what: str, layout: str) -> jax.Array:
  """Concrete `bad` rows: ValueError. Traced: those rows of `out` [B, ...] become NaN."""
  concrete = jax_compat.concrete(bad)
  if concrete is not None:
    rows = np.nonzero(concrete)[0]
    if rows.size:
      raise ValueError(
          f"{what}: batch rows {rows.tolist()} break the packed layout it relies on "
          f"({layout}); see mage_jax/models/flash_attention.py")
    return out
  return jnp.where(bad.reshape((-1,) + (1,) * (out.ndim - 1)), jnp.nan, out).astype(out.dtype)


# ---------------------------------------------------------------------------- kernels


def _dot(a, b):
  """Triton's tile matmul (fp32 accumulation), looked up when a kernel is traced."""
  return jax_compat.triton().dot(a, b)


def _mask(seg_q, seg_k, q_start, k_start, causal: bool):
  """[bq, bk] visibility: same nonzero segment, and key slot <= query slot if causal."""
  mask = (seg_q[:, None] == seg_k[None, :]) & (seg_q != 0)[:, None]
  if causal:
    span_q = q_start + jnp.arange(seg_q.shape[0])
    span_k = k_start + jnp.arange(seg_k.shape[0])
    mask = mask & (span_q[:, None] >= span_k[None, :])
  return mask


def _fwd_kernel(lo_ref, hi_ref, seg_ref, q_ref, k_ref, v_ref, o_ref, lse_ref, *,
                scale_log2: float, causal: bool, block_q: int, block_kv: int):
  i = pl.program_id(0)
  q_start = i * block_q
  q = q_ref[...]
  seg_q = seg_ref[pl.ds(q_start, block_q)]
  d = q.shape[-1]

  def body(j, carry):
    acc, m, l = carry
    k_start = j * block_kv
    ks = pl.ds(k_start, block_kv)
    k = k_ref[ks, :]
    s = _dot(q, k.T) * scale_log2  # [bq, bk] fp32
    s = jnp.where(_mask(seg_q, seg_ref[ks], q_start, k_start, causal), s, MASK_VALUE)
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    alpha = jnp.exp2(m - m_new)
    p = jnp.exp2(s - m_new[:, None])
    v = v_ref[ks, :]
    acc = acc * alpha[:, None] + _dot(p.astype(v.dtype), v)
    return acc, m_new, l * alpha + jnp.sum(p, axis=1)

  init = (jnp.zeros((block_q, d), jnp.float32), jnp.full((block_q,), M_INIT, jnp.float32),
          jnp.zeros((block_q,), jnp.float32))
  acc, m, l = lax.fori_loop(lo_ref[0], hi_ref[0], body, init)
  seen = l > 0  # rows with no visible key (padding) -> out 0, lse 0
  o_ref[...] = (acc / jnp.where(seen, l, 1.0)[:, None]).astype(o_ref.dtype)
  lse_ref[...] = jnp.where(seen, m + jnp.log2(jnp.where(seen, l, 1.0)), 0.0)


def _dq_kernel(lo_ref, hi_ref, seg_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref,
               dq_ref, *, scale: float, causal: bool, block_q: int, block_kv: int):
  i = pl.program_id(0)
  q_start = i * block_q
  q = q_ref[...]
  do = do_ref[...]
  lse = lse_ref[...]
  di = delta_ref[...]
  seg_q = seg_ref[pl.ds(q_start, block_q)]
  scale_log2 = scale * math.log2(math.e)

  def body(j, dq):
    k_start = j * block_kv
    ks = pl.ds(k_start, block_kv)
    k = k_ref[ks, :]
    v = v_ref[ks, :]
    s = _dot(q, k.T) * scale_log2
    s = jnp.where(_mask(seg_q, seg_ref[ks], q_start, k_start, causal), s, MASK_VALUE)
    p = jnp.exp2(s - lse[:, None])
    dp = _dot(do, v.T)
    ds = p * (dp - di[:, None])
    return dq + _dot(ds.astype(k.dtype), k)

  dq = lax.fori_loop(lo_ref[0], hi_ref[0], body,
                     jnp.zeros((block_q, q.shape[-1]), jnp.float32))
  dq_ref[...] = (dq * scale).astype(dq_ref.dtype)


def _dkdv_kernel(lo_ref, hi_ref, seg_ref, q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref,
                 dk_ref, dv_ref, *, scale: float, causal: bool, block_q: int, block_kv: int):
  j = pl.program_id(0)
  k_start = j * block_kv
  k = k_ref[...]
  v = v_ref[...]
  seg_k = seg_ref[pl.ds(k_start, block_kv)]
  scale_log2 = scale * math.log2(math.e)
  d = k.shape[-1]

  def body(i, carry):
    dk, dv = carry
    q_start = i * block_q
    qs = pl.ds(q_start, block_q)
    q = q_ref[qs, :]
    do = do_ref[qs, :]
    s = _dot(q, k.T) * scale_log2  # [bq, bk]
    s = jnp.where(_mask(seg_ref[qs], seg_k, q_start, k_start, causal), s, MASK_VALUE)
    p = jnp.exp2(s - lse_ref[qs][:, None])
    dv = dv + _dot(p.astype(do.dtype).T, do)
    dp = _dot(do, v.T)
    ds = p * (dp - delta_ref[qs][:, None])
    dk = dk + _dot(ds.astype(q.dtype).T, q)
    return dk, dv

  zeros = jnp.zeros((block_kv, d), jnp.float32)
  dk, dv = lax.fori_loop(lo_ref[0], hi_ref[0], body, (zeros, zeros))
  dk_ref[...] = (dk * scale).astype(dk_ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)


# ----------------------------------------------------------------------- pallas calls


@dataclasses.dataclass(frozen=True)
class _Static:
  causal: bool
  scale: float
  groups: int  # query heads per kv head
  blocks: BlockSizes
  interpret: bool


def _kv_head_map(groups: int):
  """Query head -> its kv head in the BlockSpec index maps (GQA without repeating kv)."""
  return (lambda h: h) if groups == 1 else (lambda h: lax.div(h, groups))


def _range_spec() -> pl.BlockSpec:
  """(1,)-block of a [B, n_blocks] range array: this program's block, read as ref[0]."""
  return pl.BlockSpec((None, 1), lambda i, b, h: (b, i))


def _row_spec(t: int, d: int, head_map) -> pl.BlockSpec:
  return pl.BlockSpec((None, t, None, d), lambda i, b, h: (b, 0, head_map(h), 0))


def _tile_spec(block: int, d: int, head_map) -> pl.BlockSpec:
  return pl.BlockSpec((None, block, None, d), lambda i, b, h: (b, i, head_map(h), 0))


def _forward(st: _Static, q, k, v, seg, ranges):
  b, t, hq, d = q.shape
  bq, bk = st.blocks.block_q, st.blocks.block_kv
  kv_head = _kv_head_map(st.groups)
  q_head = lambda h: h
  lo, hi = ranges["fwd"]
  warps = st.blocks.num_warps_fwd or (4 if d <= 64 else 8)
  out, lse = pl.pallas_call(
      functools.partial(_fwd_kernel, scale_log2=st.scale * math.log2(math.e), causal=st.causal,
                        block_q=bq, block_kv=bk),
      grid=(t // bq, b, hq),
      in_specs=[_range_spec(), _range_spec(), pl.BlockSpec((None, t), lambda i, b, h: (b, 0)),
                _tile_spec(bq, d, q_head), _row_spec(t, d, kv_head), _row_spec(t, d, kv_head)],
      out_specs=[_tile_spec(bq, d, q_head),
                 pl.BlockSpec((None, None, bq), lambda i, b, h: (b, h, i))],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, hq, t), jnp.float32)],
      compiler_params=jax_compat.triton_compiler_params(num_warps=warps,
                                                        num_stages=st.blocks.num_stages),
      interpret=st.interpret, name="segment_flash_fwd",
  )(lo, hi, seg, q, k, v)
  return out, lse


def _backward(st: _Static, q, k, v, seg, ranges, out, lse, do):
  b, t, hq, d = q.shape
  hkv = k.shape[2]
  kv_head = _kv_head_map(st.groups)
  q_head = lambda h: h
  delta = jnp.einsum("bthd,bthd->bht", out.astype(jnp.float32), do.astype(jnp.float32))
  seg_spec = pl.BlockSpec((None, t), lambda i, b, h: (b, 0))
  vec_row = pl.BlockSpec((None, None, t), lambda i, b, h: (b, h, 0))
  params = jax_compat.triton_compiler_params(num_warps=st.blocks.num_warps_bwd,
                                             num_stages=st.blocks.num_stages)

  bq, bk = st.blocks.block_q_dq, st.blocks.block_kv_dq
  lo, hi = ranges["dq"]
  dq = pl.pallas_call(
      functools.partial(_dq_kernel, scale=st.scale, causal=st.causal, block_q=bq, block_kv=bk),
      grid=(t // bq, b, hq),
      in_specs=[_range_spec(), _range_spec(), seg_spec, _tile_spec(bq, d, q_head),
                _row_spec(t, d, kv_head), _row_spec(t, d, kv_head), _tile_spec(bq, d, q_head),
                pl.BlockSpec((None, None, bq), lambda i, b, h: (b, h, i)),
                pl.BlockSpec((None, None, bq), lambda i, b, h: (b, h, i))],
      out_specs=_tile_spec(bq, d, q_head),
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      compiler_params=params, interpret=st.interpret, name="segment_flash_dq",
  )(lo, hi, seg, q, k, v, do, lse, delta)

  bq, bk = st.blocks.block_q_dkv, st.blocks.block_kv_dkv
  lo, hi = ranges["dkv"]
  grad_shape = jax.ShapeDtypeStruct((b, t, hq, d), jnp.float32)  # per query head
  dk, dv = pl.pallas_call(
      functools.partial(_dkdv_kernel, scale=st.scale, causal=st.causal, block_q=bq, block_kv=bk),
      grid=(t // bk, b, hq),
      in_specs=[_range_spec(), _range_spec(), seg_spec, _row_spec(t, d, q_head),
                _tile_spec(bk, d, kv_head), _tile_spec(bk, d, kv_head), _row_spec(t, d, q_head),
                vec_row, vec_row],
      out_specs=[_tile_spec(bk, d, q_head), _tile_spec(bk, d, q_head)],
      out_shape=[grad_shape, grad_shape],
      compiler_params=params, interpret=st.interpret, name="segment_flash_dkdv",
  )(lo, hi, seg, q, k, v, do, lse, delta)
  if st.groups > 1:  # sum each GQA group's query heads into its kv head
    dk = dk.reshape(b, t, hkv, st.groups, d).sum(3)
    dv = dv.reshape(b, t, hkv, st.groups, d).sum(3)
  return dq, dk.astype(k.dtype), dv.astype(v.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(st: _Static, q, k, v, seg, ranges):
  return _forward(st, q, k, v, seg, ranges)[0]


def _flash_fwd(st, q, k, v, seg, ranges):
  out, lse = _forward(st, q, k, v, seg, ranges)
  return out, (q, k, v, seg, ranges, out, lse)


def _flash_bwd(st, res, do):
  q, k, v, seg, ranges, out, lse = res
  dq, dk, dv = _backward(st, q, k, v, seg, ranges, out, lse, do)
  return dq, dk, dv, None, jax.tree_util.tree_map(lambda _: None, ranges)


_flash.defvjp(_flash_fwd, _flash_bwd)


# ------------------------------------------------------------------------- entry point


def segment_flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array,
                            *, causal: bool, scale: float | None = None,
                            positions: jax.Array | None = None,
                            block_sizes: BlockSizes | None = None,
                            interpret: bool = False) -> jax.Array:
  """Packed self-attention; see the module docstring for layout and precondition."""
  b, t, hq, d = q.shape
  hkv = k.shape[2]
  if k.shape[1] != t:
    raise NotImplementedError(f"segment flash attention is self-attention: T={t} != S={k.shape[1]}")
  if hq % hkv:
    raise ValueError(f"query heads {hq} not a multiple of kv heads {hkv}")
  scale = d ** -0.5 if scale is None else scale
  blocks = (block_sizes or BlockSizes()).shrink_to(t)
  blocks.validate()
  seg = segment_ids.astype(jnp.int32)
  bad = layout_violations(seg, positions if causal else None)
  pad_t = (-t) % blocks.lcm
  d_pad = max(MIN_BLOCK, 1 << (d - 1).bit_length()) - d
  if pad_t or d_pad:
    widths = ((0, 0), (0, pad_t), (0, 0), (0, d_pad))
    q, k, v = (jnp.pad(x, widths) for x in (q, k, v))
    seg = jnp.pad(seg, ((0, 0), (0, pad_t)))
  bs = blocks
  ranges = {
      "fwd": block_ranges(seg, bs.block_q, bs.block_kv, causal=causal, by="q"),
      "dq": block_ranges(seg, bs.block_q_dq, bs.block_kv_dq, causal=causal, by="q"),
      "dkv": block_ranges(seg, bs.block_q_dkv, bs.block_kv_dkv, causal=causal, by="kv"),
  }
  st = _Static(causal=causal, scale=float(scale), groups=hq // hkv, blocks=blocks,
               interpret=interpret)
  out = _flash(st, q, k, v, seg, ranges)[:, :t, :, :d]
  return raise_or_poison(bad, out, "segment_flash_attention",
                         "each nonzero segment id one contiguous run of slots; if causal, "
                         "positions increasing with the slot inside a segment")


def visited_blocks(segment_ids: jax.Array, *, causal: bool,
                   block_sizes: BlockSizes | None = None) -> dict[str, int]:
  """Blocks each kernel visits for these segment ids (summed over the batch, per head),
  and the dense count (every block pair; causal: the lower triangle) for comparison."""
  t = segment_ids.shape[1]
  bs = (block_sizes or BlockSizes()).shrink_to(t)
  pad = (-t) % bs.lcm
  seg = jnp.pad(segment_ids.astype(jnp.int32), ((0, 0), (0, pad)))
  out = {}
  for name, (bq, bk, by) in {"fwd": (bs.block_q, bs.block_kv, "q"),
                             "dq": (bs.block_q_dq, bs.block_kv_dq, "q"),
                             "dkv": (bs.block_q_dkv, bs.block_kv_dkv, "kv")}.items():
    lo, hi = block_ranges(seg, bq, bk, causal=causal, by=by)
    out[name] = int(jnp.sum(hi - lo))
    nq, nk = seg.shape[1] // bq, seg.shape[1] // bk
    if causal:
      qi = np.arange(nq)[:, None]
      kj = np.arange(nk)[None, :]
      dense = int(((kj * bk) < (qi + 1) * bq).sum())
    else:
      dense = nq * nk
    out[f"{name}_dense"] = dense * seg.shape[0]
  return out
