"""Mage-VL: image-token splicing vs NumPy, packed invariance, count checks, generate with images."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mage_jax.models import mage_vl
from mage_jax.models.config import (IMAGE_PAD_ID, PAD_ID, VISION_END_ID, VISION_START_ID,
                                    MageViTConfig, MageVLConfig, Qwen3Config)
from mage_jax.models.sampling import generate
# NumPy ViT reference and helpers written from DESIGN.md (tests/test_mage_vit.py).
from test_mage_vit import block_order_positions, np_params, randomize, ref_vit

D = 48
TEXT = Qwen3Config(vocab_size=151936, hidden_size=D, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=16, intermediate_size=64)
VISION = MageViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=96, out_hidden_size=D)


@pytest.fixture(scope="module")
def model():
  m = mage_vl.MageVL(MageVLConfig(text=TEXT, vision=VISION), rngs=nnx.Rngs(0))
  randomize(m.visual, seed=3)
  return m


def sample_tokens(n_images_pad: int, text: list[int]) -> list[int]:
  return text[:2] + [VISION_START_ID] + [IMAGE_PAD_ID] * n_images_pad + [VISION_END_ID] + text[2:]


def build_batch(rng):
  """Sample 1: image A (2x2 patches -> 1 token). Sample 2: image B (4x2 -> 2 tokens).
  Row 0 packs both (with padding patches *between* the images, which the splice must skip);
  row 1 holds sample 2 alone; row 2 holds sample 1 alone."""
  s1 = sample_tokens(1, [11, 12, 13, 14])
  s2 = sample_tokens(2, [21, 22, 23])
  t = 20
  a = rng.integers(0, 256, (4, 768), dtype=np.uint8)
  b = rng.integers(0, 256, (8, 768), dtype=np.uint8)
  junk = rng.integers(0, 256, (4, 768), dtype=np.uint8)
  pa, pb, z = block_order_positions(2, 2), block_order_positions(4, 2), np.zeros((4, 3), np.int32)

  def row(samples):
    toks = sum(samples, [])
    seg = sum([[i + 1] * len(s) for i, s in enumerate(samples)], [])
    pos = sum([list(range(len(s))) for s in samples], [])
    pad = t - len(toks)
    return toks + [PAD_ID] * pad, seg + [0] * pad, pos + [0] * pad

  rows = [row([s1, s2]), row([s2]), row([s1])]
  batch = dict(
      tokens=np.array([r[0] for r in rows], np.int32),
      segment_ids=np.array([r[1] for r in rows], np.int32),
      positions=np.array([r[2] for r in rows], np.int32),
      patch_rows=np.stack([np.concatenate([a, junk, b]), np.concatenate([b, junk, junk]),
                           np.concatenate([a, junk, junk, junk])]),
      patch_image_ids=np.array([[1] * 4 + [0] * 4 + [2] * 8, [1] * 8 + [0] * 8,
                                [1] * 4 + [0] * 12], np.int32),
      patch_positions=np.stack([np.concatenate([pa, z, pb]), np.concatenate([pb, z, z]),
                                np.concatenate([pa, z, z, z])]))
  return batch, (len(s1), len(s2))


def vision_args(batch):
  return {k: batch[k] for k in ("patch_rows", "patch_image_ids", "patch_positions")}


def test_splice_matches_numpy_reference(model):
  batch, _ = build_batch(np.random.default_rng(0))
  embeds = np.asarray(jax.jit(lambda m, t, v: m.embed_inputs(t, **v))(
      model, batch["tokens"], vision_args(batch)))
  table = np.asarray(model.language_model.embed_tokens.embedding[...], np.float64)
  prm = np_params(model.visual)
  for r in range(3):
    ids = batch["patch_image_ids"][r]
    real = ids != 0
    merged = ref_vit(prm, batch["patch_rows"][r][real], ids[real],
                     batch["patch_positions"][r][real], VISION)  # real merged tokens in order
    expected = table[batch["tokens"][r]].copy()
    pad_slots = np.nonzero(batch["tokens"][r] == IMAGE_PAD_ID)[0]
    assert len(pad_slots) == len(merged)
    expected[pad_slots] = merged
    np.testing.assert_allclose(embeds[r], expected, atol=1e-4, rtol=0)


def test_packed_rows_give_same_logits_as_each_alone(model):
  batch, (n1, n2) = build_batch(np.random.default_rng(1))
  fwd = jax.jit(lambda m, b: m.logits(m(b["tokens"], b["positions"], b["segment_ids"],
                                          b["patch_rows"], b["patch_image_ids"],
                                          b["patch_positions"])))
  logits = np.asarray(fwd(model, batch))
  assert logits.shape == (3, 20, TEXT.vocab_size) and np.isfinite(logits).all()
  np.testing.assert_allclose(logits[0, :n1], logits[2, :n1], atol=1e-4, rtol=0)
  np.testing.assert_allclose(logits[0, n1:n1 + n2], logits[1, :n2], atol=1e-4, rtol=0)
  # The images matter: zeroing image B's pixels changes sample 2's logits.
  blank = dict(batch, patch_rows=batch["patch_rows"].copy())
  blank["patch_rows"][1, :8] = 0
  assert np.abs(np.asarray(fwd(model, blank))[1, :n2] - logits[1, :n2]).max() > 1e-4


def test_eager_call_checks_counts_and_names_both(model):
  batch, _ = build_batch(np.random.default_rng(2))
  tokens = batch["tokens"].copy()
  first_pad = np.nonzero(tokens[0] == IMAGE_PAD_ID)[0][0]
  tokens[0, first_pad] = 11  # row 0 now has 2 image pads but 3 merged image tokens
  with pytest.raises(ValueError, match=r"row 0: 2 <\|image_pad\|> tokens .* but 3 merged"):
    model(tokens, batch["positions"], batch["segment_ids"], **vision_args(batch))
  with pytest.raises(ValueError, match=r"row 0: 3 <\|image_pad\|> tokens .* but 0 merged"):
    model(batch["tokens"], batch["positions"], batch["segment_ids"])  # images missing
  ids = batch["patch_image_ids"].copy()
  ids[1, 3] = 2  # a 2x2 block split across two images
  with pytest.raises(ValueError, match="row 1: patch rows 0..3 mix image ids"):
    mage_vl.check_inputs(batch["tokens"], ids, image_token_id=IMAGE_PAD_ID)
  mage_vl.check_inputs(batch["tokens"], batch["patch_image_ids"], image_token_id=IMAGE_PAD_ID)


def test_untied_head_and_kernel(model):
  assert model.lm_head is not None
  assert model.lm_head_kernel().shape == (D, TEXT.vocab_size)
  tied = mage_vl.MageVL(MageVLConfig(
      text=Qwen3Config(**{**TEXT.__dict__, "tie_word_embeddings": True}), vision=VISION),
      rngs=nnx.Rngs(1))
  assert tied.lm_head is None
  np.testing.assert_array_equal(tied.lm_head_kernel(),
                                tied.language_model.embed_tokens.embedding[...].T)


def test_generate_with_image_matches_full_forward(model):
  batch, (n1, _) = build_batch(np.random.default_rng(3))
  prompt = batch["tokens"][2:3, :n1]
  vis = {k: v[2:3] for k, v in vision_args(batch).items()}
  out = generate(model, prompt, 3, greedy=True, **vis)
  gen = np.asarray(out.tokens[0])
  full = np.concatenate([prompt[0], gen])[None]
  n = full.shape[1]
  logits = np.asarray(model.logits(model(full, np.arange(n)[None], np.ones((1, n), np.int32),
                                         **vis)))[0]
  steps = logits[n1 - 1:n - 1]
  np.testing.assert_array_equal(gen, steps.argmax(-1))
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(steps), axis=-1))
  np.testing.assert_allclose(np.asarray(out.logprobs[0]), logp[np.arange(3), gen], atol=1e-4)


def test_count_mismatch_under_jit_is_finite(model):
  """Under jit no check is possible (documented): surplus pads get a real token, no NaN."""
  batch, _ = build_batch(np.random.default_rng(4))
  ids = batch["patch_image_ids"].copy()
  ids[0, 8:] = 0  # drop image B's patches: row 0 has 3 pads but 1 merged token
  embeds = jax.jit(lambda m, t, v: m.embed_inputs(t, **v))(
      model, batch["tokens"], dict(vision_args(batch), patch_image_ids=ids))
  assert np.isfinite(np.asarray(embeds)).all()


def test_generate_checks_counts_before_jit(model):
  """generate() jits its prefill, so it must run the host-side count check first."""
  batch, (n1, _) = build_batch(np.random.default_rng(5))
  prompt = batch["tokens"][2:3, :n1].copy()
  prompt[0, np.nonzero(prompt[0] == IMAGE_PAD_ID)[0][0]] = 11
  vis = {k: v[2:3] for k, v in vision_args(batch).items()}
  with pytest.raises(ValueError, match="image token count mismatch"):
    generate(model, prompt, 2, greedy=True, **vis)
  with pytest.raises(ValueError, match="image token count mismatch"):
    generate(nnx.split(model), prompt, 2, greedy=True, **vis)
