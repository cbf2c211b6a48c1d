"""FLOPs accounting against the paper's numbers and hand-computed values."""
import numpy as np

from configs import models, stage4_hybrid_sft, stage1_midtrain, stage2_gui_sft, stage3_code_sft
from mage_jax.train import flops


def _model(cfg):
  return models.build_model_config(cfg.model)


def test_qwen3_4b_lm_params_is_4_02b():
  c = stage4_hybrid_sft.get_config()
  n = flops.lm_params(_model(c).text)
  assert abs(n - 4.02e9) / 4.02e9 < 0.005, n
  assert abs(flops.head_params(_model(c).text) - 0.389e9) / 0.389e9 < 0.01


def test_stage4_is_2_17_zflops():
  c = stage4_hybrid_sft.get_config()
  assert c.train.num_epochs == 2 and c.train.paper_bins == 1_377_805 and c.data.seq_len == 32_768
  f = flops.stage_flops(_model(c), bins=c.train.paper_bins, epochs=c.train.num_epochs,
                        seq_len=c.data.seq_len)
  assert abs(f["flops_6nd"] - 2.17e21) / 2.17e21 < 0.03, flops.format_zflops(f["flops_6nd"])
  # Attention at 32k roughly doubles the 6·N·D figure.
  assert 1.7 < f["flops_with_attention"] / f["flops_6nd"] < 2.5


def test_stages_1_to_3_match_paper_within_3pct():
  for mod, want in ((stage1_midtrain, 1.18e21), (stage2_gui_sft, 1.55e21), (stage3_code_sft, 0.27e21)):
    c = mod.get_config()
    f = flops.stage_flops(_model(c), bins=c.train.paper_bins, epochs=c.train.num_epochs,
                          seq_len=c.data.seq_len)
    assert abs(f["flops_6nd"] - want) / want < 0.03, (mod.__name__, f["flops_6nd"])


def test_attention_flops_hand_computed():
  text = _model(stage4_hybrid_sft.get_config()).text
  # one segment of 3 tokens: 6 causal pairs; 12 flops per pair per head-dim per head per layer
  want = 12 * 6 * 32 * 128 * 36
  assert flops.attention_flops(text, [3]) == want


def test_batch_flops_counts_real_tokens_and_segments():
  text = _model(stage4_hybrid_sft.get_config()).text
  segs = np.array([[1, 1, 1, 2, 2, 0]])
  f = flops.batch_flops(text, {"segment_ids": segs})
  assert f["tokens"] == 5
  want = 6 * (flops.lm_params(text) + flops.head_params(text)) * 5 + flops.attention_flops(text, [3, 2])
  np.testing.assert_allclose(f["flops_total"], want)
