"""Chunked cross-entropy vs a naive full-logits reference (value and gradient)."""
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from mage_jax.train import loss as loss_lib

jax.config.update("jax_enable_x64", False)


def _naive(hidden, kernel, targets, mask, segs, z_w, per_sequence):
  """Reference written from the definition: full [B, T, V] logits."""
  logits = jnp.einsum("btd,dv->btv", hidden, kernel)
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  lse = jax.nn.logsumexp(logits, axis=-1)
  per_tok = nll + z_w * lse ** 2
  if not per_sequence:
    return (per_tok * mask).sum() / mask.sum()
  # Python loop over segments: mean inside each segment, then mean over segments.
  segs_np = np.asarray(segs)
  mask_np = np.asarray(mask)
  total, count = 0.0, 0
  for b in range(segs_np.shape[0]):
    for s in set(segs_np[b].tolist()) - {0}:
      sel = jnp.asarray((segs_np[b] == s) * mask_np[b])
      if float(sel.sum()) == 0:
        continue
      total = total + (per_tok[b] * sel).sum() / sel.sum()
      count += 1
  return total / count


def _batch(seed, b=2, t=37, d=16, v=50):
  rng = np.random.default_rng(seed)
  hidden = jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(d, v)) * 0.3, jnp.float32)
  targets = jnp.asarray(rng.integers(0, v, size=(b, t)), jnp.int32)
  segs = np.zeros((b, t), np.int32)
  segs[0, :10], segs[0, 10:30] = 1, 2
  segs[1, :25], segs[1, 25:35] = 1, 2
  mask = (rng.random((b, t)) < 0.6).astype(np.float32) * (segs > 0)
  return hidden, kernel, targets, jnp.asarray(mask), jnp.asarray(segs)


@pytest.mark.parametrize("per_sequence", [False, True])
@pytest.mark.parametrize("z_w", [0.0, 1e-3])
@pytest.mark.parametrize("chunk", [8, 37, 1000])
def test_chunked_matches_naive_value_and_grad(per_sequence, z_w, chunk):
  hidden, kernel, targets, mask, segs = _batch(0)

  def ours(h, w):
    return loss_lib.cross_entropy(h, w, targets, mask, segs, chunk_size=chunk,
                                  z_loss_weight=z_w, per_sequence=per_sequence)[0]

  def ref(h, w):
    return _naive(h, w, targets, mask, segs, z_w, per_sequence)

  v1, (gh1, gw1) = jax.value_and_grad(ours, argnums=(0, 1))(hidden, kernel)
  v2, (gh2, gw2) = jax.value_and_grad(ref, argnums=(0, 1))(hidden, kernel)
  np.testing.assert_allclose(v1, v2, rtol=1e-5)
  np.testing.assert_allclose(gh1, gh2, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(gw1, gw2, rtol=1e-4, atol=1e-6)


def test_accuracy_and_token_count():
  hidden, kernel, targets, mask, segs = _batch(1)
  _, m = loss_lib.cross_entropy(hidden, kernel, targets, mask, segs, chunk_size=8)
  logits = np.einsum("btd,dv->btv", hidden, kernel)
  want_acc = ((logits.argmax(-1) == np.asarray(targets)) * np.asarray(mask)).sum() / mask.sum()
  np.testing.assert_allclose(m["accuracy"], want_acc, rtol=1e-6)
  assert float(m["trained_tokens"]) == float(mask.sum())


def test_no_full_logits_in_backward():
  """The jaxpr of the gradient must not hold a [B, T, V] (or [B*T, V]) array."""
  b, t, d, v = 1, 256, 8, 4096
  hidden = jnp.ones((b, t, d))
  kernel = jnp.ones((d, v)) * 0.01
  targets = jnp.zeros((b, t), jnp.int32)
  mask = jnp.ones((b, t))
  segs = jnp.ones((b, t), jnp.int32)
  f = lambda h, w: loss_lib.cross_entropy(h, w, targets, mask, segs, chunk_size=32)[0]
  jaxpr = jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(hidden, kernel)
  biggest = max(int(np.prod(getattr(var.aval, "shape", ())))
                for eqn in _equations(jaxpr.jaxpr) for var in eqn.outvars)
  assert biggest < t * v, f"an intermediate of {biggest} elements ~ full logits {t * v}"
  assert biggest >= 32 * v  # the chunk's logits do exist


def test_empty_mask_is_zero_not_nan():
  hidden, kernel, targets, _, segs = _batch(2)
  loss, m = loss_lib.cross_entropy(hidden, kernel, targets, jnp.zeros_like(segs, jnp.float32),
                                   segs, per_sequence=True)
  assert float(loss) == 0.0 and np.isfinite(float(m["accuracy"]))


def _equations(jp):
  """Every equation of a jaxpr, recursing into sub-jaxprs (scan/cond/remat bodies)."""
  for eqn in jp.eqns:
    yield eqn
    for p in eqn.params.values():
      for sub in (p if isinstance(p, (list, tuple)) else [p]):
        if isinstance(sub, jax.extend.core.ClosedJaxpr):
          yield from _equations(sub.jaxpr)
        elif isinstance(sub, jax.extend.core.Jaxpr):
          yield from _equations(sub)


def _primitives(jaxpr) -> set[str]:
  return {eqn.primitive.name for eqn in _equations(jaxpr.jaxpr)}


def test_recompute_only_when_chunked():
  """One chunk: backward reuses the logits (no remat); several: each chunk is
  rematerialised, so long rows (32k x 151,936 at chunk 1024/2048) stay bounded."""
  hidden, kernel, targets, mask, segs = _batch(2)
  grad_jaxpr = lambda chunk: jax.make_jaxpr(jax.grad(
      lambda h, w: loss_lib.cross_entropy(h, w, targets, mask, segs, chunk_size=chunk)[0],
      argnums=(0, 1)))(hidden, kernel)
  remat = lambda names: any(n.startswith(("remat", "checkpoint")) for n in names)
  assert not remat(_primitives(grad_jaxpr(64)))  # 37 tokens: one chunk
  assert remat(_primitives(grad_jaxpr(8)))


def test_single_chunk_stats_equal_chunked_including_unmasked_zeros():
  hidden, kernel, targets, mask, _ = _batch(3)
  one = loss_lib.token_stats(hidden, kernel, targets, chunk_size=64, mask=mask, with_entropy=True)
  many = loss_lib.token_stats(hidden, kernel, targets, chunk_size=8, mask=mask, with_entropy=True)
  assert len(one) == 4
  for a, b in zip(one, many):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(one.nll)[np.asarray(mask) == 0] == 0)
