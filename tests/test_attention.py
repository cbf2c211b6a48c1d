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
  lens = [list(row0), [t]]  # row 0: three segments then padding
  seg = np.zeros((2, t), np.int32)
  pos = np.zeros((2, t), np.int32)
  for bi, ls in enumerate(lens):
    start = 0
    for sid, n in enumerate(ls, 1):
      seg[bi, start:start + n] = sid
      pos[bi, start:start + n] = np.arange(n)
      start += n
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


def test_pallas_interpret_packed_equals_split_and_xla():
  q, k, v, seg, pos = _packed_case(seed=2, t=24)
  args = dict(q_segment_ids=jnp.array(seg), kv_segment_ids=jnp.array(seg), causal=True)
  packed = np.asarray(attention(jnp.array(q), jnp.array(k), jnp.array(v),
                                backend="pallas_interpret", **args))
  xla = np.asarray(attention(jnp.array(q), jnp.array(k), jnp.array(v), backend="xla",
                             q_positions=jnp.array(pos), kv_positions=jnp.array(pos), **args))
  np.testing.assert_allclose(packed, xla, atol=2e-6)
  assert np.all(packed[0, 21:] == 0)
  # Each segment of row 0 run alone gives the same rows.
  start = 0
  for n in (7, 9, 5):
    sl = slice(start, start + n)
    one = np.ones((1, n), np.int32)
    alone = attention(jnp.array(q[:1, sl]), jnp.array(k[:1, sl]), jnp.array(v[:1, sl]),
                      q_segment_ids=jnp.array(one), kv_segment_ids=jnp.array(one), causal=True,
                      backend="pallas_interpret")
    np.testing.assert_allclose(packed[0, sl], np.asarray(alone)[0], atol=2e-6)
    start += n


def test_pallas_interpret_grad_matches_xla():
  q, k, v, seg, pos = _packed_case(seed=3, t=16, hq=2, hkv=1, d=16, row0=(5, 6, 3))
  seg[0, 14:] = 0  # some padding inside the row

  def loss(backend, q, k, v):
    out = attention(q, k, v, q_segment_ids=jnp.array(seg), kv_segment_ids=jnp.array(seg),
                    causal=True, backend=backend)
    return jnp.sum(out * jnp.cos(out))

  g_pallas = jax.grad(lambda *a: loss("pallas_interpret", *a), argnums=(0, 1, 2))(
      jnp.array(q), jnp.array(k), jnp.array(v))
  g_xla = jax.grad(lambda *a: loss("xla", *a), argnums=(0, 1, 2))(
      jnp.array(q), jnp.array(k), jnp.array(v))
  for a, b in zip(g_pallas, g_xla):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_cudnn_refuses_segments_and_unknown_backend_errors():
  q, k, v, seg, _ = _packed_case(t=8, row0=(3, 4))
  kw = dict(q_segment_ids=jnp.array(seg), kv_segment_ids=jnp.array(seg), causal=True)
  with pytest.raises(NotImplementedError, match="segment ids"):
    attention(jnp.array(q), jnp.array(k), jnp.array(v), backend="cudnn", **kw)
  with pytest.raises(ValueError, match="unknown attention backend"):
    attention(jnp.array(q), jnp.array(k), jnp.array(v), backend="flash", **kw)
