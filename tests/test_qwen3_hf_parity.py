"""Qwen3 vs transformers Qwen3ForCausalLM (torch CPU), through the real weight files.

transformers `save_pretrained` -> our `load_hf` -> logits, compared with the
torch model's logits (fp32, max abs diff <= 1e-4). Then our `save_hf` (fp32)
-> transformers `from_pretrained` must give the same logits and identical
tensors.
"""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers import Qwen3Config as HFQwen3Config
from transformers import Qwen3ForCausalLM as HFQwen3ForCausalLM

from mage_jax.weights.hf import load_hf, save_hf

TOL = 1e-4
# (name, kwargs): tied/untied head, GQA, head_dim != hidden / heads.
CASES = {
    "untied_gqa_wide_head": dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                 head_dim=16, tie_word_embeddings=False),
    "tied_mha": dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
                     tie_word_embeddings=True),
    "tied_gqa3_narrow_head": dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                                  head_dim=4, tie_word_embeddings=True),
}


def _hf_model(seed: int, **kw) -> HFQwen3ForCausalLM:
  torch.manual_seed(seed)
  cfg = HFQwen3Config(vocab_size=97, num_hidden_layers=2, intermediate_size=40,
                      rope_theta=50_000.0, rms_norm_eps=1e-6, max_position_embeddings=64,
                      attention_bias=False, **kw)
  model = HFQwen3ForCausalLM(cfg).eval()
  with torch.no_grad():  # norms start at 1: perturb every tensor so a mix-up shows
    for p in model.parameters():
      p.add_(0.2 * torch.randn_like(p))
  return model


def _our_logits(model, tokens: np.ndarray) -> np.ndarray:
  b, t = tokens.shape
  positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  hidden = model(jnp.asarray(tokens, jnp.int32), positions, jnp.ones((b, t), jnp.int32))
  return np.asarray(model.logits(hidden))


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case, tmp_path):
  hf = _hf_model(seed=len(case), **CASES[case])
  hf.save_pretrained(tmp_path / "hf")
  cfg, model = load_hf(str(tmp_path / "hf"))
  assert cfg.tie_word_embeddings == CASES[case]["tie_word_embeddings"]
  assert cfg.head_dim == CASES[case]["head_dim"]
  tokens = np.random.default_rng(0).integers(0, 97, (2, 11))
  with torch.no_grad():
    want = hf(torch.from_numpy(tokens)).logits.numpy()
  got = _our_logits(model, tokens)
  diff = float(np.abs(got - want).max())
  print(f"[parity] {case}: max |logit diff| = {diff:.3e}")
  assert diff <= TOL, diff

  # Our fp32 export, loaded by transformers: same tensors, same logits.
  save_hf(model, cfg, str(tmp_path / "ours"), dtype="float32")
  reloaded = HFQwen3ForCausalLM.from_pretrained(str(tmp_path / "ours"), dtype=torch.float32).eval()
  want_sd, got_sd = hf.state_dict(), reloaded.state_dict()
  assert set(want_sd) == set(got_sd)
  for name, t in want_sd.items():
    assert torch.equal(t, got_sd[name]), name
  with torch.no_grad():
    again = reloaded(torch.from_numpy(tokens)).logits.numpy()
  diff_export = float(np.abs(again - got).max())
  print(f"[parity] {case}: export reloaded by transformers, max |logit diff| = {diff_export:.3e}")
  assert diff_export <= TOL
  config = json.load(open(tmp_path / "ours" / "config.json"))
  assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
  for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
    assert os.path.exists(tmp_path / "ours" / name), name


def test_python_api_against_transformers(tmp_path):
  """mage_jax.api: load -> logits -> greedy generate -> save, checked against torch."""
  from mage_jax import api
  hf = _hf_model(seed=3, **CASES["untied_gqa_wide_head"])
  hf.save_pretrained(tmp_path / "hf")
  policy = api.load(str(tmp_path / "hf"))
  prompt = np.array([5, 17, 3, 88, 41], np.int32)
  with torch.no_grad():
    want = hf(torch.from_numpy(prompt[None].astype(np.int64))).logits.numpy()[0]
  assert np.abs(policy.logits(prompt) - want).max() <= TOL
  # Greedy continuation by repeated full forwards in torch (no cache): independent of ours.
  seq = list(prompt)
  with torch.no_grad():
    for _ in range(4):
      seq.append(int(hf(torch.tensor([seq])).logits[0, -1].argmax()))
  out = policy.generate(prompt, max_new_tokens=4)
  assert out.tokens.tolist() == seq[len(prompt):]
  assert out.logprobs.shape == (4,) and np.all(out.logprobs <= 0)
  policy.save(str(tmp_path / "saved"), dtype="float32")
  again = HFQwen3ForCausalLM.from_pretrained(str(tmp_path / "saved"), dtype=torch.float32)
  for name, t in hf.state_dict().items():
    assert torch.equal(t, again.state_dict()[name]), name
  # hf/ has no tokenizer.json and a 97-id vocab: the full Qwen3 tokenizer is refused, not used.
  with pytest.raises(ValueError, match="no tokenizer.json"):
    policy.encode("<|im_end|>")
  saved = api.load(str(tmp_path / "saved"))   # the export ships the tokenizer files
  assert saved.encode("<|im_end|>").tolist() == [151645]
