"""RL on a compact vocabulary (config.model.compact_vocab in an RL config): the learner trains the
compact model while the engine serves its expansion, so every sampled id, in the vocabulary or not,
must get the expanded model's log-prob and the same gradient. Checked against the full-vocabulary
model with a NumPy log-softmax (fast), and end to end through train_rl with the embedded engine,
whose post-sync probe compares the compact learner with the served weights (slow)."""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import Qwen3Config
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from mage_jax.rl import objective as obj_lib
from mage_jax.train.step import model_hidden

FULL = 4096
TEXT = dict(vocab_size=FULL, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, intermediate_size=64, tie_word_embeddings=True,
            compute_dtype="float32", param_dtype="float32", remat_policy="none", attention_backend="xla")


def _models(seed: int = 0):
  full_cfg = Qwen3Config(**TEXT)
  vocab = CompactVocab.from_token_ids(np.arange(0, 3000, 2), FULL)   # 1,500 kept, 2,596 in the rest row
  compact = Qwen3ForCausalLM(vocab.compact_model_config(full_cfg), rngs=nnx.Rngs(seed))
  # Make the rest row likely so that sampled rest ids are common and their terms are not tiny.
  emb = compact.model.embed_tokens.embedding
  emb[...] = emb[...].at[vocab.rest_row].multiply(3.0)
  pure = vocab.expand_params(jax.tree_util.tree_map(np.asarray, nnx.to_pure_dict(nnx.state(compact, nnx.Param))))
  full = Qwen3ForCausalLM(full_cfg, rngs=nnx.Rngs(1))
  state = nnx.state(full, nnx.Param)
  nnx.replace_by_pure_dict(state, pure)
  nnx.update(full, state)
  return vocab, compact, full


def _batch(vocab: CompactVocab, rows: int = 3, seq: int = 24, seed: int = 0) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, FULL, (rows, seq)).astype(np.int32)
  targets = np.roll(tokens, -1, axis=1)
  mask = np.zeros((rows, seq), np.float32)
  mask[:, seq // 2:-1] = 1.0                    # the "completion": half of each row
  kept, rest = vocab.ids, np.setdiff1d(np.arange(FULL), vocab.ids)
  targets[:, seq // 2:seq // 2 + 4] = rng.choice(rest, (rows, 4))    # sampled ids outside the vocabulary
  targets[:, seq // 2 + 4:seq // 2 + 8] = rng.choice(kept, (rows, 4))
  return {"tokens": tokens, "targets": targets, "loss_mask": mask,
          "segment_ids": np.ones((rows, seq), np.int32),
          "positions": np.broadcast_to(np.arange(seq, dtype=np.int32), (rows, seq)).copy(),
          "advantages": rng.normal(size=(rows, seq)).astype(np.float32),
          "logp_rollout": np.full((rows, seq), -8.0, np.float32)}


def _reference_logprobs(full, batch) -> np.ndarray:
  """log p(target) of the full-vocabulary model: its logits and a float64 NumPy log-softmax."""
  jb = {k: jnp.asarray(v) for k, v in batch.items()}
  logits = np.asarray(full.logits(model_hidden(full, jb)), np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  out = np.take_along_axis(logp, batch["targets"][..., None].astype(np.int64), -1)[..., 0]
  return np.where(batch["loss_mask"] > 0, out, 0.0)


def test_compact_token_logprobs_are_the_served_models_for_ids_in_and_out_of_the_vocabulary():
  vocab, compact, full = _models()
  batch = _batch(vocab)
  ref = _reference_logprobs(full, batch)
  cb = {k: jnp.asarray(v) for k, v in vocab.compact_batch(batch, strict=False).items()}
  got = np.asarray(obj_lib.token_logprobs(compact, cb, chunk_size=8))
  live = batch["loss_mask"] > 0
  out_of_vocab = live & (vocab.table[batch["targets"]] == vocab.rest_row)
  assert out_of_vocab.sum() >= 12
  np.testing.assert_allclose(got[live], ref[live], atol=2e-4)
  assert np.all(got[~live] == 0)
  # Without the rest correction an out-of-vocabulary id would read the whole rest row's mass:
  # log rest_ids = 7.86 nats above its own log-prob, far outside the tolerance above.
  assert np.log(vocab.rest_ids) > 7


def _rl_loss(model, batch):
  sums = obj_lib.grpo_sums(obj_lib.token_logprobs(model, batch, 8), jax.lax.stop_gradient(
      obj_lib.token_logprobs(model, batch, 8)), batch["logp_rollout"], batch["advantages"],
      batch["loss_mask"], obj_lib.RLLossConfig())
  return sums.loss / sums.denominator


def test_the_compact_rl_gradient_is_the_full_models_gradient_folded_onto_its_rows():
  vocab, compact, full = _models(seed=2)
  batch = _batch(vocab, seed=1)
  cb = {k: jnp.asarray(v) for k, v in vocab.compact_batch(batch, strict=False).items()}
  fb = {k: jnp.asarray(v) for k, v in batch.items()}
  loss_c, g_c = nnx.value_and_grad(_rl_loss)(compact, cb)
  loss_f, g_f = nnx.value_and_grad(_rl_loss)(full, fb)
  np.testing.assert_allclose(float(loss_c), float(loss_f), rtol=1e-4, atol=1e-5)
  gc, gf = nnx.to_pure_dict(g_c), nnx.to_pure_dict(g_f)
  # Every transformer weight: the same gradient.
  for a, b in zip(jax.tree_util.tree_leaves(gc["model"]["layers"]), jax.tree_util.tree_leaves(gf["model"]["layers"])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-3)
  # The tied embedding: a kept row's gradient is its id's; the rest row's is the sum over the ids
  # it stands for (an Adam step on it moves them all alike, so the expansion stays exact).
  ec, ef = np.asarray(gc["model"]["embed_tokens"]["embedding"]), np.asarray(gf["model"]["embed_tokens"]["embedding"])
  np.testing.assert_allclose(ec[:-1], ef[vocab.ids], atol=1e-5, rtol=1e-3)
  rest = np.setdiff1d(np.arange(FULL), vocab.ids)
  np.testing.assert_allclose(ec[-1], ef[rest].sum(0), atol=1e-4, rtol=1e-3)
  assert np.abs(ec[-1]).max() > 1e-4     # the rest row does get a gradient


def test_the_sync_probe_reference_reads_a_compact_learner_as_the_served_model():
  from mage_jax.engine.weight_sync import model_logprobs_fn
  vocab, compact, full = _models(seed=3)
  rng = np.random.default_rng(4)
  tokens = [int(t) for t in rng.integers(0, FULL, 20)]
  tokens[5] = int(np.setdiff1d(np.arange(FULL), vocab.ids)[7])   # an id the compact model lacks
  got = model_logprobs_fn(compact, compact.cfg, export_dtype=None, vocab=vocab)(tokens)
  ref = model_logprobs_fn(full, full.cfg, export_dtype=None)(tokens)
  np.testing.assert_allclose(got, ref, atol=2e-4)


# --- end to end -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_train_rl_on_a_compact_vocabulary_serves_and_hands_on_full_vocabulary_weights(tmp_path):
  from mage_jax.rl import loop
  from mage_jax.train import checkpoint as ckpt_lib
  from mage_jax.train import metrics as metrics_lib
  from mage_jax.train import run_setup
  from mage_jax.weights import hf
  from tests.test_rl_loop import ToyRollouts, tiny_rl_config

  # The toy rollouts' prompt ids (PROMPT and 100-102) and the first half of the vocabulary are kept;
  # the engine samples the other half too (the rest row at init holds about half the mass).
  ids = np.unique(np.concatenate([np.arange(1000), [151644, 151645, 872, 198, 9707, 77091]]))
  vocab = CompactVocab.from_token_ids(ids, 151_936)
  vocab_file = str(tmp_path / "vocab.json")
  vocab.save(vocab_file)
  config = tiny_rl_config(2)
  config.model.compact_vocab = vocab_file
  workdir = str(tmp_path / "rl")
  summary = loop.train_rl(config, workdir, rollout_fn=ToyRollouts())
  assert summary["updates"] == 2
  rows = [r for r in metrics_lib.read_metrics(workdir) if "reward_mean" in r]
  # The probe compares the compact learner with the engine serving the expanded export, exactly.
  assert all(0 <= r["probe_max_abs_diff"] <= config.rl.sync_tolerance for r in rows)
  assert sum(r["rest_targets"] for r in rows) > 0          # sampled ids outside the vocabulary trained
  # Update 1 trains version-0 samples with the version-0 learner: its log-probs of the sampled
  # tokens are the engine's up to the bf16 export (a learner reading full ids as rows is not).
  assert rows[0]["rollout_logp_gap"] < 0.02, rows[0]["rollout_logp_gap"]
  assert all(np.isfinite(r["loss"]) for r in rows) and any(r["update_norm"] > 0 for r in rows)
  # The engine was handed full-vocabulary weights, and so is the next stage.
  with open(os.path.join(summary["served_weights"], "config.json")) as f:
    assert json.load(f)["vocab_size"] == 151_936
  t = loop.build(config, workdir)
  assert t.model_cfg.vocab_size == vocab.size and t.full_cfg.vocab_size == 151_936
  full_abstract = run_setup.final_params(t, jax.tree_util.tree_map(
      lambda a: np.zeros(a.shape, a.dtype), t.abstract.params))[0]
  meta = ckpt_lib.make_meta(t.full_cfg, full_abstract, {})
  final = ckpt_lib.load_final_params(workdir, jax.tree_util.tree_map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), full_abstract), meta)
  emb = np.asarray(nnx.to_pure_dict(final)["model"]["embed_tokens"]["embedding"])
  assert emb.shape[0] == 151_936
  rest = np.setdiff1d(np.arange(151_936), vocab.ids)
  np.testing.assert_array_equal(emb[rest[0]], emb[rest[-1]])   # one row for the ids it stands for
  cfg, _ = hf.load_hf(summary["served_weights"])
  assert cfg.vocab_size == 151_936 and not cfg.rest_ids
