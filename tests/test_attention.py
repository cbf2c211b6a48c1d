"""Segment-aware attention vs a NumPy loop reference written from the contract."""
import numpy as np
import jax
import jax.numpy as jnp
import pytest

from mage_jax.models.attention import attention


def numpy_attention(q, k, v, q_seg, kv_seg, causal, q_pos, kv_pos, scale):
  """Per (batch, head, query) loop: softmax over keys with equal nonzero segment (and kv_pos<=q_pos)."""
  b, t, hq, d = q.shape
  hkv = k.shape[2]
  out = np.zeros((b, t, hq, d), np.float64)
  for bi in range(b):
    for h in range(hq):
      kh = h // (hq // hkv)
      for i in range(t):
        if q_seg[bi, i] == 0:
          continue
        ok = kv_seg[bi] == q_seg[bi, i]
        if causal:
          ok &= kv_pos[bi] <= q_pos[bi, i]
        idx = np.nonzero(ok)[0]
        if len(idx) == 0:
          continue
        s = k[bi, idx, kh].astype(np.float64) @ q[bi, i, h].astype(np.float64) * scale
        w = np.exp(s - s.max())
        w /= w.sum()
        out[bi, i, h] = w @ v[bi, idx, kh]
  return out


def _packed_case(seed=0, t=24, hq=4, hkv=2, d=16, row0=(7, 9, 5)):
  r = np.random.default_rng(seed)
  q = r.normal(size=(2, t, hq, d)).astype(np.float32)
  k = r.normal(size=(2, t, hkv, d)).astype(np.float32)
  v = r.normal(size=(2, t, hkv, d)).astype(np.float32)
  seg, pos = _segments([list(row0), [t]], t)  # row 0: three segments then padding
  return q, k, v, seg, pos


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_chunk", [None, 8, 7])  # 7: 24 queries padded to 28
def test_xla_matches_numpy_reference(causal, q_chunk):
  q, k, v, seg, pos = _packed_case()
  out = attention(jnp.array(q), jnp.array(k), jnp.array(v), q_segment_ids=jnp.array(seg),
                  kv_segment_ids=jnp.array(seg), causal=causal, backend="xla",
                  q_positions=jnp.array(pos), kv_positions=jnp.array(pos), q_chunk=q_chunk)
  ref = numpy_attention(q, k, v, seg, seg, causal, pos, pos, 16 ** -0.5)
  assert not np.isnan(np.asarray(out)).any()
  np.testing.assert_allclose(np.asarray(out), ref, atol=2e-6)
  assert np.all(np.asarray(out)[0, 21:] == 0)  # padding rows are exactly zero


@pytest.mark.parametrize("causal", [True, False])
def test_xla_within_max_segment_len_matches_numpy_and_flags_longer_segments(causal):
  # Row 0: segments of 7, 9, 5 then padding; row 1: one 24-slot segment. Blocks of 4 queries
  # see only keys within max_segment_len - 1 slots, so the bound must cover every segment.
  q, k, v, seg, pos = _packed_case(row0=(7, 9, 5))
  seg[1] = np.repeat([1, 2, 3], 8)  # row 1 as three 8-slot segments
  pos[1] = np.tile(np.arange(8), 3)
  args = (jnp.array(q), jnp.array(k), jnp.array(v))
  s, p = jnp.array(seg), jnp.array(pos)
  kw = dict(q_segment_ids=s, kv_segment_ids=s, causal=causal, backend="xla", q_positions=p,
            kv_positions=p, causal_block=4)
  out = attention(*args, max_segment_len=9, **kw)
  ref = numpy_attention(q, k, v, seg, seg, causal, pos, pos, 16 ** -0.5)
  np.testing.assert_allclose(np.asarray(out), ref, atol=2e-6)
  with pytest.raises(ValueError, match="at most 8 slots"):  # the 9-slot segment breaks it
    attention(*args, max_segment_len=8, **kw)
  traced = jax.jit(lambda *a: attention(*a, max_segment_len=8, **kw))(*args)
  assert np.isnan(np.asarray(traced)[0]).all() and not np.isnan(np.asarray(traced)[1]).any()


def test_xla_decode_shape_with_cache_slots():
  # T=3 new queries against S=10 cache slots, some empty (segment 0).
  r = np.random.default_rng(1)
  q = r.normal(size=(1, 3, 4, 8)).astype(np.float32)
  k = r.normal(size=(1, 10, 1, 8)).astype(np.float32)
  v = r.normal(size=(1, 10, 1, 8)).astype(np.float32)
  kv_seg = np.array([[1, 1, 1, 1, 0, 1, 1, 1, 0, 0]], np.int32)
  kv_pos = np.array([[0, 1, 2, 3, 0, 4, 5, 6, 0, 0]], np.int32)
  q_seg = np.array([[1, 1, 1]], np.int32)
  q_pos = np.array([[4, 5, 6]], np.int32)
  out = attention(jnp.array(q), jnp.array(k), jnp.array(v), q_segment_ids=jnp.array(q_seg),
                  kv_segment_ids=jnp.array(kv_seg), causal=True, q_positions=jnp.array(q_pos),
                  kv_positions=jnp.array(kv_pos), scale=0.3)
  ref = numpy_attention(q, k, v, q_seg, kv_seg, True, q_pos, kv_pos, 0.3)
  np.testing.assert_allclose(np.asarray(out), ref, atol=2e-6)


def test_unknown_backend_errors():
  q, k, v, seg, _ = _packed_case(t=8, row0=(3, 4))
  kw = dict(q_segment_ids=jnp.array(seg), kv_segment_ids=jnp.array(seg), causal=True)
  for name in ("flash", "cudnn"):   # cudnn: no segment ids in jax.nn.dot_product_attention
    with pytest.raises(ValueError, match="unknown attention backend"):
      attention(jnp.array(q), jnp.array(k), jnp.array(v), backend=name, **kw)


# ------------------------------------------------- our segment-aware flash kernel (interpret)

from mage_jax.models import flash_attention as flash  # noqa: E402

SMALL_BLOCKS = flash.BlockSizes(block_q=16, block_kv=16, block_q_dq=16, block_kv_dq=16,
                                block_kv_dkv=16, block_q_dkv=16)
# Unequal tiles: forward/dq/dkdv ranges computed on different grids.
MIXED_BLOCKS = flash.BlockSizes(block_q=32, block_kv=16, block_q_dq=16, block_kv_dq=32,
                                block_kv_dkv=32, block_q_dkv=16)


def _segments(rows, t):
  """segment ids [B, T] and positions restarting per segment; slots past the rows pad."""
  seg = np.zeros((len(rows), t), np.int32)
  pos = np.zeros((len(rows), t), np.int32)
  for bi, lens in enumerate(rows):
    start = 0
    for sid, n in enumerate(lens, 1):
      seg[bi, start:start + n] = sid
      pos[bi, start:start + n] = np.arange(n)
      start += n
  return seg, pos


def _qkv(seed, b, t, hq, hkv, d):
  r = np.random.default_rng(seed)
  return tuple(r.normal(size=(b, t, h, d)).astype(np.float32) for h in (hq, hkv, hkv))


def dense_reference(q, k, v, seg, causal, scale):
  """Independent jnp reference (repeat kv, full mask, softmax): differentiable."""
  g = q.shape[2] // k.shape[2]
  k, v = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
  logits = jnp.einsum("bthd,bshd->bhts", q, k) * scale
  t = q.shape[1]
  mask = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
  if causal:
    mask = mask & jnp.tril(jnp.ones((t, t), bool))
  mask = mask[:, None]
  p = jax.nn.softmax(jnp.where(mask, logits, -1e9), axis=-1)
  p = jnp.where(mask, p, 0.0)
  return jnp.einsum("bhts,bshd->bthd", p, v)


def _flash(q, k, v, seg, causal, blocks=SMALL_BLOCKS, pos=None):
  return attention(q, k, v, q_segment_ids=seg, kv_segment_ids=seg, causal=causal,
                   backend="pallas_interpret", q_positions=pos, kv_positions=pos,
                   block_sizes=blocks)


# Row 0: a segment spanning 3 blocks, two not aligned to 16, trailing padding.
# Row 1: one segment over every block. T = 80 (5 blocks of 16).
ROWS = [[37, 5, 21], [80]]


@pytest.mark.parametrize("causal,hq,hkv,d,blocks", [
    (True, 4, 2, 16, SMALL_BLOCKS),    # decoder: causal packed, GQA
    (False, 2, 2, 16, SMALL_BLOCKS),   # ViT: bidirectional block-diagonal
    (True, 2, 1, 12, MIXED_BLOCKS),    # head_dim padded to 16, unequal tiles
])
def test_flash_interpret_matches_references_fwd_and_grad(causal, hq, hkv, d, blocks):
  t = 80
  seg, pos = _segments(ROWS, t)
  q, k, v = _qkv(5, 2, t, hq, hkv, d)
  scale = d ** -0.5
  out = np.asarray(_flash(jnp.array(q), jnp.array(k), jnp.array(v), jnp.array(seg), causal,
                          blocks, jnp.array(pos)))
  np.testing.assert_allclose(out, numpy_attention(q, k, v, seg, seg, causal, pos, pos, scale),
                             atol=2e-5)
  assert np.all(out[0, 63:] == 0)  # padding rows exactly zero

  cot = jnp.array(np.random.default_rng(6).normal(size=out.shape).astype(np.float32))
  grad = lambda f: jax.jit(jax.grad(lambda *a: jnp.sum(f(*a) * cot), argnums=(0, 1, 2)))(
      jnp.array(q), jnp.array(k), jnp.array(v))
  ours = grad(lambda q, k, v: _flash(q, k, v, jnp.array(seg), causal, blocks))
  ref = grad(lambda q, k, v: dense_reference(q, k, v, jnp.array(seg), causal, scale))
  xla = grad(lambda q, k, v: attention(q, k, v, q_segment_ids=jnp.array(seg),
                                       kv_segment_ids=jnp.array(seg), causal=causal))
  for a, b_, c in zip(ours, ref, xla):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b_), atol=5e-5)
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=5e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_flash_interpret_packed_equals_each_segment_alone(causal):
  t, lens = 80, ROWS[0]
  seg, _ = _segments(ROWS, t)
  q, k, v = _qkv(7, 2, t, 2, 1, 16)
  cot = np.random.default_rng(8).normal(size=q.shape).astype(np.float32)

  @jax.jit
  def fwd_bwd(q, k, v, seg, cot):
    f = lambda q, k, v: jnp.sum(_flash(q, k, v, seg, causal) * cot)
    return _flash(q, k, v, seg, causal), jax.grad(f, argnums=(0, 1, 2))(q, k, v)

  out, grads = fwd_bwd(*map(jnp.array, (q, k, v, seg, cot)))
  # Each segment alone: one row per segment (its slots first, then padding), one call.
  starts = np.cumsum([0] + lens)
  n_max = max(lens)
  alone = [np.zeros((len(lens), n_max) + x.shape[2:], np.float32) for x in (q, k, v, cot)]
  seg1 = np.zeros((len(lens), n_max), np.int32)
  for r, n in enumerate(lens):
    for dst, src in zip(alone, (q, k, v, cot)):
      dst[r, :n] = src[0, starts[r]:starts[r] + n]
    seg1[r, :n] = 1
  out1, grads1 = fwd_bwd(*map(jnp.array, alone[:3]), jnp.array(seg1), jnp.array(alone[3]))
  for r, n in enumerate(lens):
    sl = slice(starts[r], starts[r] + n)
    np.testing.assert_allclose(np.asarray(out)[0, sl], np.asarray(out1)[r, :n], atol=2e-5)
    for g, g1 in zip(grads, grads1):
      np.testing.assert_allclose(np.asarray(g)[0, sl], np.asarray(g1)[r, :n], atol=5e-5)
  for g in grads:  # padding slots get no gradient
    assert np.all(np.asarray(g)[0, starts[-1]:] == 0)


def _needed_block_pairs(seg, causal, bq, bk):
  """Brute force: block pairs holding at least one visible (query, key) pair."""
  b, t = seg.shape
  vis = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
  if causal:
    vis &= np.tril(np.ones((t, t), bool))
  return int(vis.reshape(b, t // bq, bq, t // bk, bk).any(axis=(2, 4)).sum())


@pytest.mark.parametrize("causal", [True, False])
def test_flash_visits_exactly_the_needed_blocks(causal):
  # A 512-slot row of 4 segments (128 + 100 + 200 + 60) + 24 padding, blocks of 16/32.
  seg, _ = _segments([[128, 100, 200, 60], [512]], 512)
  blocks = flash.BlockSizes(block_q=32, block_kv=16, block_q_dq=16, block_kv_dq=16,
                            block_kv_dkv=32, block_q_dkv=16)
  counts = flash.visited_blocks(jnp.array(seg), causal=causal, block_sizes=blocks)
  assert counts["fwd"] == _needed_block_pairs(seg, causal, 32, 16)
  assert counts["dq"] == _needed_block_pairs(seg, causal, 16, 16)
  assert counts["dkv"] == _needed_block_pairs(seg, causal, 16, 32)
  # Row 0 alone visits far fewer blocks than a dense (or dense-causal) schedule.
  row0 = flash.visited_blocks(jnp.array(seg[:1]), causal=causal, block_sizes=blocks)
  assert row0["fwd"] < 0.45 * row0["fwd_dense"], row0


def test_flash_kernels_skip_foreign_blocks():
  """NaN k/v/q in whole blocks no segment can see must not reach any output or gradient:
  the kernels' loops never load them (0 * NaN would be NaN)."""
  t = 80
  seg = np.zeros((1, t), np.int32)
  seg[0, :21] = 1          # blocks 0-1 (block 1 partly padding)
  seg[0, 48:70] = 2        # blocks 3-4; block 2 (slots 32..47) is all padding
  q, k, v = _qkv(9, 1, t, 2, 1, 16)
  for x in (q, k, v):
    x[:, 32:48] = np.nan
  cot = jnp.array(np.random.default_rng(1).normal(size=q.shape).astype(np.float32))
  for causal in (True, False):
    f = lambda q, k, v: _flash(q, k, v, jnp.array(seg), causal)
    out = np.asarray(f(jnp.array(q), jnp.array(k), jnp.array(v)))
    grads = jax.grad(lambda *a: jnp.sum(jnp.nan_to_num(f(*a)) * cot), argnums=(0, 1, 2))(
        jnp.array(q), jnp.array(k), jnp.array(v))
    real = seg[0] != 0
    assert np.isfinite(out[0, real]).all() and np.all(out[0, ~real] == 0)
    for g in grads:
      assert np.isfinite(np.asarray(g)[0, real]).all()


def test_flash_layout_violations_raise_eagerly_and_poison_under_jit():
  t = 32
  seg = np.ones((2, t), np.int32)
  seg[0, 10:20] = 2        # row 0: segment 1 split into two runs
  pos = np.tile(np.arange(t, dtype=np.int32), (2, 1))
  q, k, v = map(jnp.array, _qkv(2, 2, t, 2, 1, 16))
  with pytest.raises(ValueError, match=r"rows \[0\]"):
    _flash(q, k, v, jnp.array(seg), True)
  out = jax.jit(lambda s: _flash(q, k, v, s, True))(jnp.array(seg))
  assert np.isnan(np.asarray(out)[0]).all() and np.isfinite(np.asarray(out)[1]).all()
  pos_bad = pos.copy()
  pos_bad[1, 5] = 0        # row 1: positions not increasing inside its segment
  seg_ok = np.ones((2, t), np.int32)
  with pytest.raises(ValueError, match=r"rows \[1\]"):
    _flash(q, k, v, jnp.array(seg_ok), True, pos=jnp.array(pos_bad))


# ------------------------------------------------------------ XLA causal blocking


@pytest.mark.parametrize("causal_block,q_chunk", [(8, None), (5, 7), (64, None)])
def test_xla_causal_blocked_matches_references(causal_block, q_chunk):
  q, k, v, seg, pos = _packed_case(seed=4)
  seg_j, pos_j = jnp.array(seg), jnp.array(pos)  # one array for q and kv: the blocked path

  @jax.jit
  def ours(q, k, v):
    return attention(q, k, v, q_segment_ids=seg_j, kv_segment_ids=seg_j, causal=True,
                     q_positions=pos_j, kv_positions=pos_j, causal_block=causal_block,
                     q_chunk=q_chunk)

  out = np.asarray(ours(jnp.array(q), jnp.array(k), jnp.array(v)))
  np.testing.assert_allclose(out, numpy_attention(q, k, v, seg, seg, True, pos, pos, 0.25),
                             atol=2e-6)
  assert np.all(out[0, 21:] == 0)
  cot = jnp.array(np.random.default_rng(2).normal(size=q.shape).astype(np.float32))
  grad = lambda f: jax.jit(jax.grad(lambda *a: jnp.sum(f(*a) * cot), argnums=(0, 1, 2)))(
      jnp.array(q), jnp.array(k), jnp.array(v))
  for a, b_ in zip(grad(ours), grad(lambda q, k, v: dense_reference(q, k, v, seg_j, True, 0.25))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b_), atol=2e-5)


def test_xla_causal_blocked_rejects_positions_against_slot_order():
  q, k, v, seg, pos = _packed_case(seed=4)
  pos[1, 3], pos[1, 4] = pos[1, 4], pos[1, 3]  # a later slot with an earlier position
  seg_j, pos_j = jnp.array(seg), jnp.array(pos)
  with pytest.raises(ValueError, match=r"rows \[1\]"):
    attention(jnp.array(q), jnp.array(k), jnp.array(v), q_segment_ids=seg_j,
              kv_segment_ids=seg_j, causal=True, q_positions=pos_j, kv_positions=pos_j)


@pytest.mark.parametrize("mesh_cfg", [dict(data=2, fsdp=2, tensor=2), dict(fsdp=4, tensor=2)])
def test_flash_runs_per_shard_under_a_mesh(mesh_cfg):
  """Under a sharded jit the kernel runs on each device's rows/heads (shard_map):
  same result as the dense reference, and no all-gather of q/k/v in the program."""
  from jax.sharding import NamedSharding, PartitionSpec as P
  from mage_jax import sharding
  rows = [(7, 9, 5), (21,), (3, 3, 3, 3), (12, 10)]
  seg, pos = _segments(rows, 32)
  q, k, v = _qkv(5, 4, 32, 4, 2, 16)
  mesh = sharding.make_mesh(mesh_cfg, jax.devices()[:8])
  batch = tuple(a for a in ("data", "fsdp") if a in mesh.axis_names)
  put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
  q, k, v = (put(x, P(batch, None, "tensor", None)) for x in (q, k, v))
  seg_s, pos_s = put(seg, P(batch, None)), put(pos, P(batch, None))
  fn = jax.jit(lambda q, k, v, s, p: _flash(q, k, v, s, True, pos=p))
  with jax.set_mesh(mesh):
    out = fn(q, k, v, seg_s, pos_s)
    hlo = fn.lower(q, k, v, seg_s, pos_s).compile().as_text()
  ref = dense_reference(jnp.asarray(np.asarray(q)), jnp.asarray(np.asarray(k)),
                        jnp.asarray(np.asarray(v)), jnp.asarray(seg), True, 16 ** -0.5)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5)
  assert "all-gather" not in hlo
