"""Compact vocabulary (models/compact_vocab.py): a model trained on a few ids expands to the full
vocabulary exactly, checked against HF transformers loading the exported checkpoint (tied and
untied heads), plus the maps, the loss term and bad input."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import Qwen3ForCausalLM as HFQwen3ForCausalLM

from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import MageVLConfig, MageViTConfig, Qwen3Config
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from mage_jax.train import loss as loss_lib
from mage_jax.weights.hf import save_hf

FULL = 500
KEPT = np.sort(np.random.default_rng(0).choice(FULL, 60, replace=False))


def _full_cfg(tied: bool) -> Qwen3Config:
  return Qwen3Config(vocab_size=FULL, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, intermediate_size=48, rope_theta=10_000.0,
                     tie_word_embeddings=tied)


def _compact_model(vocab: CompactVocab, tied: bool, seed: int = 1):
  cfg = vocab.compact_model_config(_full_cfg(tied))
  model = Qwen3ForCausalLM(cfg, rngs=nnx.Rngs(seed))
  params = nnx.state(model, nnx.Param)
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  # perturb every tensor (norms start at 1, the rest row must differ from the kept rows)
  leaves = [x + 0.3 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
  nnx.update(model, jax.tree_util.tree_unflatten(tree, leaves))
  return cfg, model


def _logprobs(model, tokens: np.ndarray) -> np.ndarray:
  b, t = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  hidden = model(jnp.asarray(tokens, jnp.int32), pos, jnp.ones((b, t), jnp.int32))
  return np.asarray(jax.nn.log_softmax(model.logits(hidden), axis=-1))


@pytest.mark.parametrize("tied", [True, False])
def test_expanded_checkpoint_matches_compact_model_in_transformers(tied, tmp_path):
  vocab = CompactVocab.from_token_ids(KEPT, FULL)
  cfg, model = _compact_model(vocab, tied)
  assert cfg.vocab_size == 61 and cfg.rest_ids == FULL - 60
  full_ids = np.random.default_rng(2).choice(KEPT, (2, 9))
  compact_lp = _logprobs(model, vocab.to_compact(full_ids))            # [B, T, 61]

  full_cfg = vocab.full_model_config(cfg, _full_cfg(tied))
  full_model = Qwen3ForCausalLM(full_cfg, rngs=nnx.Rngs(0))
  pure = vocab.expand_params(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  state = nnx.state(full_model, nnx.Param)
  nnx.replace_by_pure_dict(state, pure)
  save_hf(state, full_cfg, str(tmp_path / "hf"), dtype="float32")
  hf = HFQwen3ForCausalLM.from_pretrained(str(tmp_path / "hf"), torch_dtype=torch.float32).eval()
  assert hf.config.vocab_size == FULL and hf.config.tie_word_embeddings == tied
  with torch.no_grad():
    want = torch.log_softmax(hf(torch.from_numpy(full_ids)).logits, -1).numpy()   # [B, T, 500]
  np.testing.assert_allclose(compact_lp[..., :-1], want[..., KEPT], atol=1e-4)
  # the rest row holds exactly the mass of every id left out
  left_out = np.setdiff1d(np.arange(FULL), KEPT)
  rest_mass = np.log(np.exp(want[..., left_out]).sum(-1))
  np.testing.assert_allclose(compact_lp[..., -1], rest_mass, atol=1e-4)


def test_loss_term_equals_full_vocabulary_nll():
  vocab = CompactVocab.from_token_ids(KEPT, FULL)
  _, model = _compact_model(vocab, tied=True)
  rng = np.random.default_rng(3)
  hidden = jnp.asarray(rng.normal(size=(2, 7, 32)), jnp.float32)
  targets = rng.choice(KEPT, (2, 7))
  kernel = model.lm_head_kernel()
  compact = loss_lib.token_stats(hidden, kernel, jnp.asarray(vocab.to_compact(targets)),
                                 bias=model.lm_head_bias())
  full_kernel = jnp.asarray(np.asarray(kernel)[:, vocab.table])
  full = loss_lib.token_stats(hidden, full_kernel, jnp.asarray(targets))
  np.testing.assert_allclose(compact.nll, full.nll, rtol=1e-5, atol=1e-5)
  # without the rest term the compact NLL would be too low: the term matters
  no_bias = loss_lib.token_stats(hidden, kernel, jnp.asarray(vocab.to_compact(targets)))
  assert float(jnp.min(full.nll - no_bias.nll)) > 0


def test_maps_round_trip_and_bad_input(tmp_path):
  vocab = CompactVocab.from_token_ids([5, 3, 3, 9], 12)
  assert list(vocab.ids) == [3, 5, 9] and vocab.size == 4 and vocab.rest_ids == 9
  np.testing.assert_array_equal(vocab.to_compact(np.array([9, 3, 5])), [2, 0, 1])
  with pytest.raises(ValueError, match="outside the compact vocabulary.*ids \\[4\\]"):
    vocab.to_compact(np.array([3, 4]))
  assert vocab.to_compact(np.array([4]), strict=False)[0] == vocab.rest_row
  batch = {"tokens": np.array([[3, 5]]), "targets": np.array([[5, 7]]), "loss_mask": np.array([[1, 0]])}
  out = vocab.compact_batch(batch)       # 7 is untrained (mask 0): allowed, mapped to rest
  np.testing.assert_array_equal(out["targets"], [[1, 3]])
  with pytest.raises(ValueError, match="targets \\(trained\\)"):
    vocab.compact_batch({**batch, "loss_mask": np.array([[1, 1]])})
  vocab.save(str(tmp_path / "v.json"))
  again = CompactVocab.load(str(tmp_path / "v.json"))
  assert again.fingerprint() == vocab.fingerprint()
  params = {"model": {"embed_tokens": {"embedding": np.arange(8.0).reshape(4, 2)}},
            "lm_head": {"kernel": np.arange(8.0).reshape(2, 4)}}
  full = vocab.expand_params(params)
  assert full["model"]["embed_tokens"]["embedding"].shape == (12, 2)
  np.testing.assert_array_equal(full["model"]["embed_tokens"]["embedding"][4], [6.0, 7.0])  # rest
  back = vocab.compact_params(full)
  np.testing.assert_array_equal(back["model"]["embed_tokens"]["embedding"], params["model"]["embed_tokens"]["embedding"])
  np.testing.assert_array_equal(back["lm_head"]["kernel"], params["lm_head"]["kernel"])
  with pytest.raises(ValueError, match="sorted"):
    CompactVocab(np.array([3, 2]), 12)
  with pytest.raises(ValueError, match="has no HF form"):
    vocab.compact_model_config(Qwen3Config(vocab_size=12, hidden_size=8, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                                           intermediate_size=8)).to_hf()


def test_mage_vl_token_ids_map_to_compact_rows():
  text = dataclasses.replace(_full_cfg(True), vocab_size=151936)
  cfg = MageVLConfig(text=text, vision=MageViTConfig(hidden_size=64, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=64,
                                                     out_hidden_size=32))
  vocab = CompactVocab.from_token_ids([10, 151652, 151653, 151655], 151936)
  small = vocab.compact_model_config(cfg)
  assert (small.image_token_id, small.vision_start_token_id, small.vision_end_token_id) == (3, 1, 2)
  assert small.text.vocab_size == 5
  back = vocab.full_model_config(small, cfg)
  assert back == cfg
