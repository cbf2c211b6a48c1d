"""FLOP accounting for MFU: 6·N·D for the matmuls plus causal attention.

Counts only matrix multiplies (the work a ceiling matmul measures). Embedding
lookups are gathers, not matmuls, so the input embedding is excluded from N;
an untied LM head is a matmul and is included. Training = 3 × forward
(backward costs two forward's worth: grads w.r.t. activations and weights).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from mage_jax.models.config import MageViTConfig, MageVLConfig, Qwen3Config


def qwen3_matmul_params(cfg: Qwen3Config) -> int:
  """Parameters that take part in a matmul per token (no embedding gather, no norms)."""
  d, hd = cfg.hidden_size, cfg.head_dim
  attn = d * hd * (cfg.num_attention_heads * 2 + cfg.num_key_value_heads * 2)
  mlp = 3 * d * cfg.intermediate_size
  head = d * cfg.vocab_size  # tied or not, logits are a [D, V] matmul
  return cfg.num_hidden_layers * (attn + mlp) + head


def qwen3_total_params(cfg: Qwen3Config) -> int:
  """All parameters, as a checkpoint would count them."""
  d, hd = cfg.hidden_size, cfg.head_dim
  attn = d * hd * (cfg.num_attention_heads * 2 + cfg.num_key_value_heads * 2) + 2 * hd
  mlp = 3 * d * cfg.intermediate_size
  norms = 2 * d
  embed = cfg.vocab_size * d
  head = 0 if cfg.tie_word_embeddings else d * cfg.vocab_size
  return cfg.num_hidden_layers * (attn + mlp + norms) + d + embed + head


def vit_matmul_params(cfg: MageViTConfig) -> tuple[int, int]:
  """(per-patch matmul params of embedding + blocks, per-merged-token params of the merger)."""
  d = cfg.hidden_size
  per_block = d * 3 * d + d * d + 2 * d * cfg.intermediate_size
  per_patch = cfg.patch_dim * d + cfg.num_hidden_layers * per_block
  merged_in = d * cfg.spatial_merge_size ** 2
  per_merged = merged_in * merged_in + merged_in * cfg.out_hidden_size
  return per_patch, per_merged


def attention_pair_count(segment_lengths: Iterable[int], causal: bool) -> int:
  """Query-key pairs actually attended to (block-diagonal over segments)."""
  if causal:
    return sum(n * (n + 1) // 2 for n in segment_lengths)
  return sum(n * n for n in segment_lengths)


def attention_forward_flops(pairs: int, num_heads: int, head_dim: int, layers: int) -> int:
  """QKᵀ and PV: 2 matmuls × 2 FLOPs per multiply-add per pair per head-dim."""
  return 4 * pairs * num_heads * head_dim * layers


def qwen3_step_flops(cfg: Qwen3Config, segment_lengths: Sequence[int]) -> dict[str, float]:
  """Training FLOPs (fwd + bwd) of one step over packed segments of these lengths."""
  tokens = sum(segment_lengths)
  dense = 6 * qwen3_matmul_params(cfg) * tokens
  attn = 3 * attention_forward_flops(
      attention_pair_count(segment_lengths, causal=True), cfg.num_attention_heads,
      cfg.head_dim, cfg.num_hidden_layers)
  return {"tokens": tokens, "six_n_d": float(dense), "attention": float(attn),
          "total": float(dense + attn)}


def mage_vl_step_flops(cfg: MageVLConfig, segment_lengths: Sequence[int],
                       image_patch_counts: Sequence[int]) -> dict[str, float]:
  """Training FLOPs of a Mage-VL step: LM over tokens + ViT over patches + merger.

  `image_patch_counts` lists each image's patch count (its attention block).
  """
  lm = qwen3_step_flops(cfg.text, segment_lengths)
  per_patch, per_merged = vit_matmul_params(cfg.vision)
  patches = sum(image_patch_counts)
  merged = patches // cfg.vision.spatial_merge_size ** 2
  vit_dense = 6 * (per_patch * patches + per_merged * merged)
  v = cfg.vision
  vit_attn = 3 * attention_forward_flops(
      attention_pair_count(image_patch_counts, causal=False), v.num_attention_heads,
      v.head_dim, v.num_hidden_layers)
  six_n_d = lm["six_n_d"] + vit_dense
  attn = lm["attention"] + vit_attn
  return {"tokens": lm["tokens"], "patches": patches, "six_n_d": float(six_n_d),
          "attention": float(attn), "total": float(six_n_d + attn)}
