"""mage_jax.api input contracts: [T] or [B, T] token arrays, ids outside the vocabulary,
the tokenizer fallback of a checkpoint without tokenizer.json, and the vision config's
frame window read from config.json."""
import os

import numpy as np
import pytest
from flax import nnx

from mage_jax import api
from mage_jax.models.config import MageViTConfig, MageVLConfig, Qwen3Config
from mage_jax.weights import hf

VOCAB = 64
TINY = Qwen3Config(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=8, intermediate_size=24)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  from mage_jax.models.qwen3 import Qwen3ForCausalLM
  path = str(tmp_path_factory.mktemp("tiny_qwen3"))
  hf.save_hf(Qwen3ForCausalLM(TINY, rngs=nnx.Rngs(0)), TINY, path, dtype="float32")
  return path


def test_logits_of_a_batch_are_per_row_not_one_flattened_sequence(checkpoint):
  policy = api.load(checkpoint)
  rows = np.random.default_rng(0).integers(0, VOCAB, (2, 10)).astype(np.int32)
  batched = policy.logits(rows)
  assert batched.shape == (2, 10, VOCAB)
  for i in range(2):
    np.testing.assert_allclose(batched[i], policy.logits(rows[i]), rtol=1e-5, atol=1e-5)
  # What the old reshape(-1) computed: row 1 as a continuation of row 0. It differs.
  flattened = policy.logits(rows.reshape(-1))
  assert flattened.shape == (20, VOCAB)
  assert np.abs(flattened[10:] - batched[1]).max() > 1e-3
  with pytest.raises(ValueError, match=r"rank \(1, 2\).*shape \(1, 2, 3\)"):
    policy.logits(np.zeros((1, 2, 3), np.int32))
  with pytest.raises(ValueError, match="one prompt"):
    policy.generate(rows, max_new_tokens=2)


@pytest.mark.parametrize("bad, index", [(VOCAB, (0, 3)), (151_655, (0, 1)), (-1, (0, 4))])
def test_token_ids_outside_the_vocabulary_name_the_id_and_size(checkpoint, bad, index):
  policy = api.load(checkpoint)
  tokens = np.array([1, 2, 3, 4, 5], np.int32)
  tokens[index[1]] = bad
  with pytest.raises(ValueError, match=rf"token id {bad} at index \(0, {index[1]}\).*"
                                       rf"vocab_size {VOCAB}"):
    policy.logits(tokens)
  with pytest.raises(ValueError, match=rf"token id {bad} .*vocab_size {VOCAB}"):
    policy.generate(tokens, max_new_tokens=2)


def test_no_tokenizer_json_does_not_fall_back_to_qwen3_for_a_small_vocab(checkpoint, tmp_path):
  from mage_jax.data.tokenizer import default_tokenizer_dir
  bare = tmp_path / "bare"
  bare.mkdir()
  for name in os.listdir(checkpoint):
    if name != "tokenizer.json":
      os.symlink(os.path.join(checkpoint, name), bare / name)
  policy = api.load(str(bare))
  with pytest.raises(ValueError, match=rf"{bare}: no tokenizer.json.*vocab_size is {VOCAB}"
                                       r".*tokenizer_path"):
    policy.encode("hello")
  assert policy.logits(np.array([1, 2, 3], np.int32)).shape == (3, VOCAB)  # ids still work
  # An explicit tokenizer is the caller's choice and is used as given.
  explicit = api.load(str(bare), tokenizer_path=default_tokenizer_dir())
  assert explicit.encode("<|im_start|>").tolist() == [151644]


def test_mage_vit_from_hf_reads_frame_windows_size():
  base = MageViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=32, out_hidden_size=16)
  d = dict(base.to_hf(), frame_windows_size=2)
  assert MageViTConfig.from_hf(d, 16).max_window_frames == 2
  assert base.to_hf()["frame_windows_size"] == 4
  d.pop("frame_windows_size")
  assert MageViTConfig.from_hf(d, 16).max_window_frames == 4  # the published default
  vl = MageVLConfig(text=TINY, vision=base).to_hf()
  vl["vision_config"]["frame_windows_size"] = 8
  assert MageVLConfig.from_hf(vl).vision.max_window_frames == 8
  with pytest.raises(ValueError, match="frame_windows_size"):
    MageViTConfig.from_hf(dict(d, frame_windows_size=0), 16)
