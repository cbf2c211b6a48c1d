"""KV-cache decode equivalence, greedy determinism, top-p support, log-prob recomputation."""
import numpy as np
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from mage_jax.models import sampling
from mage_jax.models.config import Qwen3Config
from mage_jax.models.qwen3 import Qwen3ForCausalLM

CFG = Qwen3Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=48, rope_theta=10_000.0)


@pytest.fixture(scope="module")
def model():
  m = Qwen3ForCausalLM(CFG, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(m)
  state = jax.tree.map(lambda x: x * 5.0, state)  # peaky distributions, non-uniform attention
  return nnx.merge(graphdef, state)


@jax.jit(static_argnums=0)
def _full(graphdef, state, tokens):
  m = nnx.merge(graphdef, state)
  t = tokens.shape[1]
  pos = jnp.broadcast_to(jnp.arange(t), tokens.shape)
  return m.logits(m(tokens, pos, jnp.ones_like(tokens)))


def full_logits(model, tokens) -> np.ndarray:
  graphdef, state = nnx.split(model)
  return np.asarray(_full(graphdef, state, jnp.asarray(tokens, jnp.int32)))


def test_incremental_decode_equals_full_forward(model):
  r = np.random.default_rng(0)
  lengths = np.array([7, 4])
  total = 12
  seqs = r.integers(0, CFG.vocab_size, (2, total)).astype(np.int32)
  prompt = seqs[:, :7].copy()
  prompt[1, 4:] = 0  # right padding for the shorter row
  graphdef, state = nnx.split(model)
  prefill = jax.jit(lambda st, *a: sampling.prefill(nnx.merge(graphdef, st), *a))
  decode = jax.jit(lambda st, *a: sampling.decode_step(nnx.merge(graphdef, st), *a))
  cache = model.init_cache(2, 7 + 6)
  logits, cache = prefill(state, jnp.asarray(prompt), jnp.asarray(lengths), cache)
  steps = [np.asarray(logits)]
  pos = lengths.copy()
  for i in range(5):
    nxt = np.array([seqs[0, 7 + i], seqs[1, 4 + i]], np.int32)
    logits, cache = decode(state, jnp.asarray(nxt), jnp.asarray(pos), cache)
    steps.append(np.asarray(logits))
    pos += 1
  ref0 = full_logits(model, seqs[:1, :12])[0]               # row 0: 7 prompt + 5 new
  ref1 = full_logits(model, seqs[1:, :9])[0]                # row 1: 4 prompt + 5 new
  # fp32: ~1e-5 relative to the logit scale (|logits| ~ 9 here; float64 gives exact equality).
  for i, step in enumerate(steps):
    for got, want in ((step[0], ref0[6 + i]), (step[1], ref1[3 + i])):
      assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), i


def test_greedy_is_deterministic_and_matches_argmax(model):
  prompt = np.random.default_rng(1).integers(0, CFG.vocab_size, (2, 5)).astype(np.int32)
  out1 = sampling.generate(model, prompt, 6, greedy=True, eos_id=-1)
  out2 = sampling.generate(model, prompt, 6, greedy=True, eos_id=-1)
  np.testing.assert_array_equal(np.asarray(out1.tokens), np.asarray(out2.tokens))
  toks = np.asarray(out1.tokens)
  full = full_logits(model, np.concatenate([prompt, toks], 1))
  np.testing.assert_array_equal(full[:, 4:-1].argmax(-1), toks)
  logp = full[:, 4:-1] - np.log(np.exp(full[:, 4:-1] - full[:, 4:-1].max(-1, keepdims=True)).sum(
      -1, keepdims=True)) - full[:, 4:-1].max(-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(out1.logprobs),
                             np.take_along_axis(logp, toks[..., None], -1)[..., 0], atol=1e-5)
  assert np.asarray(out1.lengths).tolist() == [6, 6]


def test_eos_stops_row_and_pads(model):
  prompt = np.random.default_rng(1).integers(0, CFG.vocab_size, (2, 5)).astype(np.int32)
  ref = np.asarray(sampling.generate(model, prompt, 6, greedy=True, eos_id=-1).tokens)
  eos = int(ref[0, 1])
  out = sampling.generate(model, prompt, 6, greedy=True, eos_id=eos, pad_id=63)
  toks = np.asarray(out.tokens)
  stop = int(np.argmax(ref[0] == eos))
  assert int(out.lengths[0]) == stop + 1
  np.testing.assert_array_equal(toks[0, :stop + 1], ref[0, :stop + 1])
  assert np.all(toks[0, stop + 1:] == 63) and np.all(np.asarray(out.logprobs)[0, stop + 1:] == 0)


def numpy_process(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
  """Log-probs of the temperature + nucleus distribution; -inf outside the nucleus."""
  z = logits.astype(np.float64) / temperature
  p = np.exp(z - z.max())
  p /= p.sum()
  order = np.argsort(-p, kind="stable")
  before = np.cumsum(p[order]) - p[order]
  keep = np.zeros_like(p, bool)
  keep[order[before < top_p]] = True
  keep[order[0]] = True
  q = np.where(keep, p, 0.0)
  with np.errstate(divide="ignore"):
    return np.log(q / q.sum())


def test_top_p_restricts_support():
  logits = np.log(np.array([[0.5, 0.25, 0.15, 0.06, 0.04]], np.float32))
  processed = np.asarray(sampling.process_logits(jnp.asarray(logits), 1.0, 0.8))
  assert np.isfinite(processed[0]).tolist() == [True, True, True, False, False]
  draws = [int(sampling.sample_token(jnp.asarray(logits), jax.random.key(i), greedy=False,
                                     temperature=1.0, top_p=0.6)[0][0]) for i in range(40)]
  assert set(draws) <= {0, 1} and set(draws) == {0, 1}


def test_sampled_logprobs_match_numpy(model):
  prompt = np.random.default_rng(2).integers(0, CFG.vocab_size, (2, 4)).astype(np.int32)
  temperature, top_p = 0.7, 0.9
  out = sampling.generate(model, prompt, 5, temperature=temperature, top_p=top_p,
                          rng=jax.random.key(3), eos_id=-1)
  toks = np.asarray(out.tokens)
  full = full_logits(model, np.concatenate([prompt, toks], 1))
  for b in range(2):
    for i in range(5):
      ref = numpy_process(full[b, 3 + i], temperature, top_p)
      assert np.isfinite(ref[toks[b, i]]), "sampled a token outside the nucleus"
      np.testing.assert_allclose(float(out.logprobs[b, i]), ref[toks[b, i]], atol=1e-4)
