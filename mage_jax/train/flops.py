"""FLOPs accounting: the paper's 6·N·D over LM parameters, plus attention and ViT.

- `lm_params`: the Qwen3 LM (embedding counted once, layers, final norm) —
  4.02B for Qwen3-4B; the untied head (0.39B) and the ViT are excluded, as in
  the paper's per-stage compute.
- `attention_flops_per_token`: causal attention score/value matmuls for a
  segment of length L, forward+backward = 3 × 4·L_avg·Hq·hd per layer, with
  L_avg = (L+1)/2. At 32k bins this about doubles 6·N.
- ViT: 6·N_vit per patch (+ merger on P/4 tokens) and its bidirectional
  attention within each image.
- `flops_model` (per batch): the matmul FLOPs actually executed — all of the
  above without the embedding lookup — for an honest MFU on small models.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mage_jax.models.config import MageViTConfig, MageVLConfig, Qwen3Config


def lm_params(text: Qwen3Config) -> int:
  d, hd = text.hidden_size, text.head_dim
  attn = d * text.num_attention_heads * hd * 2 + d * text.num_key_value_heads * hd * 2 + 2 * hd
  mlp = 3 * d * text.intermediate_size
  per_layer = attn + mlp + 2 * d
  return text.vocab_size * d + text.num_hidden_layers * per_layer + d


def head_params(text: Qwen3Config) -> int:
  return 0 if text.tie_word_embeddings else text.vocab_size * text.hidden_size


def vit_params(vision: MageViTConfig) -> tuple[int, int]:
  """(patch-level params: embed + blocks + pre-norm, merger params)."""
  d, m = vision.hidden_size, vision.intermediate_size
  block = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * m + m) + (m * d + d)
  tower = vision.patch_dim * d + 2 * d + vision.num_hidden_layers * block
  g = vision.spatial_merge_size ** 2
  merger = 2 * d + (g * d) * (g * d) + g * d + (g * d) * vision.out_hidden_size + vision.out_hidden_size
  return tower, merger


def attention_flops(text: Qwen3Config, segment_lengths: np.ndarray | list[int]) -> float:
  """Training FLOPs (fwd+bwd) of causal attention over packed segments of these lengths."""
  lengths = np.asarray(segment_lengths, np.float64)
  pairs = (lengths * (lengths + 1) / 2).sum()   # causal (query, key) pairs
  return 3.0 * 4.0 * pairs * text.num_attention_heads * text.head_dim * text.num_hidden_layers


def vit_flops(vision: MageViTConfig, image_patch_counts: np.ndarray | list[int]) -> float:
  counts = np.asarray(image_patch_counts, np.float64)
  tower, merger = vit_params(vision)
  dense = 6.0 * (tower * counts.sum() + merger * counts.sum() / vision.spatial_merge_size ** 2)
  attn = 3.0 * 4.0 * (counts ** 2).sum() * vision.hidden_size * vision.num_hidden_layers
  return dense + attn


def text_config(model_cfg: Any) -> Qwen3Config:
  return model_cfg.text if isinstance(model_cfg, MageVLConfig) else model_cfg


def batch_flops(model_cfg: Any, batch: dict[str, np.ndarray]) -> dict[str, float]:
  """Training FLOPs of one host batch: 6·N·tokens (LM), + head, + attention, + ViT.

  `tokens` counts every non-padding slot (the model computes all of them).
  """
  text = text_config(model_cfg)
  segs = np.asarray(batch["segment_ids"])
  real = float((segs > 0).sum())
  lengths = []
  for row in segs:
    ids, counts = np.unique(row[row > 0], return_counts=True)
    lengths.extend(counts.tolist())
  six_nd = 6.0 * lm_params(text) * real
  head = 6.0 * head_params(text) * real
  attn = attention_flops(text, lengths)
  vit = 0.0
  if isinstance(model_cfg, MageVLConfig) and "patch_image_ids" in batch:
    pids = np.asarray(batch["patch_image_ids"])
    per_image = []
    for row in pids:
      _, c = np.unique(row[row > 0], return_counts=True)
      per_image.extend(c.tolist())
    vit = vit_flops(model_cfg.vision, per_image)
  # The embedding is a gather, not a matmul: the FLOPs the hardware really runs leave it out.
  # (It is most of N for the tiny model, where 6·N would overstate MFU many times over.)
  embed = 6.0 * text.vocab_size * text.hidden_size * real
  return {"flops_6nd": six_nd, "flops_total": six_nd + head + attn + vit,
          "flops_model": six_nd - embed + head + attn + vit, "tokens": real}


def stage_flops(model_cfg: Any, *, bins: int, epochs: float, seq_len: int,
                patches_per_bin: float = 0.0, images_per_bin: float = 1.0) -> dict[str, float]:
  """Per-stage compute for `epochs` passes over `bins` full bins of `seq_len`.

  `flops_6nd` is the paper's accounting. `flops_with_attention` assumes each
  bin is one causal segment (an upper bound); `flops_total` adds the head and
  the ViT for `patches_per_bin` patches split over `images_per_bin` images.
  """
  text = text_config(model_cfg)
  tokens = float(bins) * epochs * seq_len
  six_nd = 6.0 * lm_params(text) * tokens
  attn = attention_flops(text, [seq_len]) * bins * epochs
  head = 6.0 * head_params(text) * tokens
  vit = 0.0
  if isinstance(model_cfg, MageVLConfig) and patches_per_bin > 0:
    per = patches_per_bin / max(images_per_bin, 1.0)
    vit = vit_flops(model_cfg.vision, [per] * int(max(images_per_bin, 1))) * bins * epochs
  return {"tokens": tokens, "lm_params": float(lm_params(text)), "flops_6nd": six_nd,
          "flops_with_attention": six_nd + attn, "flops_total": six_nd + attn + head + vit}


def format_zflops(x: float) -> str:
  return f"{x / 1e21:.3f} ZFLOPs"
