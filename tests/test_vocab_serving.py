"""The rollout engine decodes an expanded compact model on its distinct vocabulary rows
(models/vocab_serving.py): it finds exactly the ids the compact stage kept, and its tokens and
log-probs are the full model's (an independent full forward, `Policy.logits`, with a NumPy
log-softmax), for sampled, greedy and top_p requests, text-only and with an image."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from mage_jax import api
from mage_jax.engine import generate_batcher as gb
from mage_jax.models import vocab_serving
from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import MageVLConfig, MageViTConfig, Qwen3Config
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from tests.test_rl_rollout import PROMPT, TINY, log_softmax

FULL = 151_936
KEPT = np.unique(np.concatenate([PROMPT, np.random.default_rng(0).choice(FULL, 400, replace=False)]))


def _perturbed(model, seed: int, scale: float):
  params = nnx.state(model, nnx.Param)
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  nnx.update(model, jax.tree_util.tree_unflatten(
      tree, [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]))
  return model


def _expanded_qwen3(tied: bool) -> api.Policy:
  """A compact model on KEPT (random, its rest row distinct), expanded as a stage's params leave it."""
  vocab = CompactVocab(KEPT.astype(np.int32), FULL)
  full_cfg = Qwen3Config(**{**TINY, "tie_word_embeddings": tied})
  compact = _perturbed(Qwen3ForCausalLM(vocab.compact_model_config(full_cfg), rngs=nnx.Rngs(3)), 3, 0.5)
  full = nnx.eval_shape(lambda: Qwen3ForCausalLM(full_cfg, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(full)
  nnx.replace_by_pure_dict(state, vocab.expand_params(nnx.to_pure_dict(nnx.state(compact, nnx.Param))))
  return api.Policy(cfg=full_cfg, model=nnx.merge(graphdef, state))


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_an_expanded_model_decodes_on_the_kept_rows_with_the_full_models_logprobs(tied):
  policy = _expanded_qwen3(tied)
  engine = gb.SlotEngine(8, eos_id=-1)
  engine.use(policy, "v")
  assert engine.table is not None
  assert engine.model.cfg.vocab_size == len(KEPT) + 1 and engine.model.cfg.rest_ids == FULL - len(KEPT)
  np.testing.assert_array_equal(np.flatnonzero(np.asarray(engine.table) != len(KEPT)), KEPT)
  jobs = [gb.Job(np.asarray(PROMPT, np.int32), max_tokens=12, temperature=1.0, top_p=1.0, seed=5),
          gb.Job(np.asarray(PROMPT[:3], np.int32), max_tokens=9, temperature=0.0, top_p=1.0, seed=6),
          gb.Job(np.asarray(PROMPT, np.int32), max_tokens=10, temperature=0.8, top_p=0.6, seed=7)]
  finished = engine.admit(jobs)
  while engine.active:
    finished += engine.step()
  assert len(finished) == 3
  sampled, greedy, nucleus = jobs
  ref = log_softmax(policy.logits(list(sampled.prompt) + sampled.tokens[:-1])[len(sampled.prompt) - 1:])
  np.testing.assert_allclose(sampled.logprobs, ref[np.arange(12), sampled.tokens], atol=1e-4)
  # left-out ids are sampled (the rest holds most of the mass) and fed back as inputs
  assert sum(t not in set(KEPT.tolist()) for t in sampled.tokens) >= 3
  ref = log_softmax(policy.logits(list(greedy.prompt) + greedy.tokens[:-1])[len(greedy.prompt) - 1:])
  assert greedy.tokens == ref.argmax(-1).tolist()   # the first maximum over all 151,936 ids
  np.testing.assert_allclose(greedy.logprobs, ref[np.arange(9), greedy.tokens], atol=1e-4)
  # top_p: each token lies in the full model's nucleus (processed distribution at T = 0.8)
  ref = log_softmax(policy.logits(list(nucleus.prompt) + nucleus.tokens[:-1])[len(nucleus.prompt) - 1:] / 0.8)
  for i, t in enumerate(nucleus.tokens):
    p = np.sort(np.exp(ref[i]))[::-1]
    smallest_kept = p[np.cumsum(p) - p < 0.6].min()
    assert np.exp(ref[i, t]) >= smallest_kept * (1 - 1e-4)


def test_a_model_whose_rows_all_differ_is_served_as_it_is():
  model = Qwen3ForCausalLM(Qwen3Config(**TINY), rngs=nnx.Rngs(0))
  served, table = vocab_serving.serving_model(model)
  assert served is model and table is None


def test_repeated_rows_need_equal_head_columns_and_most_of_the_vocabulary():
  rng = np.random.default_rng(1)
  emb = np.repeat(rng.normal(size=(1, 8)).astype(np.float32), 1000, 0)
  kept = np.sort(rng.choice(1000, 30, replace=False))
  emb[kept] = rng.normal(size=(30, 8))
  head = emb.T.copy()
  head[:, 7] += 1.0                       # id 7's head column differs: it is a row of its own
  vocab = CompactVocab.of_repeated_rows({"model": {"embed_tokens": {"embedding": emb}},
                                         "lm_head": {"kernel": head}}, keep=[999])
  assert sorted(vocab.ids.tolist()) == sorted(set(kept.tolist()) | {7, 999})
  params = vocab.serving_params({"model": {"embed_tokens": {"embedding": emb}}})
  compact = params["model"]["embed_tokens"]["embedding"]
  np.testing.assert_array_equal(compact[:-1], emb[vocab.ids])
  np.testing.assert_array_equal(compact[-1], emb[np.flatnonzero(vocab.table == vocab.rest_row)[0]])
  emb[:600] = rng.normal(size=(600, 8))   # 40% share a row: not worth a compact model
  assert CompactVocab.of_repeated_rows({"model": {"embed_tokens": {"embedding": emb}}}) is None


def test_a_mage_vl_model_with_an_image_decodes_on_its_rows_and_keeps_the_image_ids():
  text = Qwen3Config(**{**TINY, "tie_word_embeddings": True})
  vision = MageViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         out_hidden_size=TINY["hidden_size"])
  cfg = MageVLConfig(text=text, vision=vision)
  model = _perturbed(MageVL(cfg, rngs=nnx.Rngs(2)), 2, 0.3)
  emb = np.array(model.language_model.embed_tokens.embedding[...])
  rest = np.ones(FULL, bool)
  rest[KEPT] = False                       # the image and vision ids share the rest row too
  emb[rest] = emb[np.flatnonzero(rest)[0]]
  model.language_model.embed_tokens.embedding[...] = emb
  policy = api.Policy(cfg=cfg, model=model)
  image = (np.random.default_rng(4).random((56, 84, 3)) * 255).astype(np.uint8)
  prompt = np.asarray(PROMPT + [cfg.vision_start_token_id, cfg.image_token_id, cfg.vision_end_token_id, 11],
                      np.int32)
  tokens, vision = policy._vision_inputs(prompt, [image])
  for temperature in (0.0, 1.0):
    job = gb.run_alone(policy, gb.Job(np.asarray(tokens, np.int32), max_tokens=6, temperature=temperature,
                                      top_p=1.0, seed=9, vision=vision), eos_id=-1)
    served, table = vocab_serving.serving_model(model)
    kept = np.flatnonzero(np.asarray(table) != np.asarray(table).max())
    assert set(KEPT.tolist()) < set(kept.tolist()) and cfg.image_token_id in kept
    ref = log_softmax(policy.logits(list(prompt) + job.tokens[:-1], [image])[-len(job.tokens):])
    np.testing.assert_allclose(job.logprobs, ref[np.arange(6), job.tokens], atol=1e-4)
    if temperature == 0.0:
      assert job.tokens == ref.argmax(-1).tolist()


def test_the_row_sampler_draws_the_full_vocabulary_samplers_tokens():
  """vocab_serving.sample on the rows (RowRace) against sampling.sample_token over full_logits: the
  same tokens for the same keys (sampled, greedy, tied maxima, the rest row on top), log-probs within
  float rounding; a top_p < 1 batch takes the full path."""
  import jax.numpy as jnp
  from mage_jax.models.sampling import sample_token
  rng = np.random.default_rng(3)
  table = np.full(FULL, len(KEPT), np.int32)
  table[KEPT] = np.arange(len(KEPT))
  race = vocab_serving.row_race(jnp.asarray(table))
  assert int(race.rest_row) == len(KEPT) and int(race.rest_count.sum()) == FULL - len(KEPT)
  b = 64
  for trial in range(12):
    logits = rng.normal(size=(b, len(KEPT) + 1)).astype(np.float32) * (1 + trial % 4)
    logits[:4, -1] = logits[:4].max(-1) + 2.0          # the rest row on top: its lowest id wins greedy
    logits[4:8, 10] = logits[4:8, 3] = logits[4:8].max(-1) + 1.0   # a tie between two kept rows
    greedy = jnp.asarray(rng.random(b) < 0.3)
    temperature = jnp.asarray(rng.uniform(0.5, 1.5, b).astype(np.float32))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(trial), i))(jnp.arange(b))
    for top_p in (1.0, 0.9):
      top_p = jnp.full(b, top_p, jnp.float32)
      want, want_lp = sample_token(vocab_serving.full_logits(jnp.asarray(table), jnp.asarray(logits)), keys,
                                   greedy=greedy, temperature=temperature, top_p=top_p)
      got, got_lp = jax.jit(vocab_serving.sample)(jnp.asarray(table), race, jnp.asarray(logits), keys,
                                                  greedy=greedy, temperature=temperature, top_p=top_p)
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
      np.testing.assert_allclose(np.asarray(got_lp), np.asarray(want_lp), atol=2e-5)
  g = np.asarray(greedy)
  assert (np.asarray(got)[:4][g[:4]] == np.flatnonzero(table == len(KEPT))[0]).all()
  assert vocab_serving.row_race(None) is None
