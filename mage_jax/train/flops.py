"""The one FLOP accounting: the trainer's logged MFU and the benchmarks both read it.

Per training step (fwd + bwd = 3 × forward; backward costs two forwards' worth):

- `flops_6nd`: the paper's 6·N·D over the LM's parameters (`lm_params`: embedding
  counted once, layers, norms; 4.02B for Qwen3-4B), no head, no ViT, no attention.
- `flops_model`: the matmul FLOPs the model needs (the MFU numerator): the LM layers'
  weight matmuls on every real token, the LM head only on the tokens the chunked loss
  computes (`head_tokens`), causal attention within segments, the ViT's matmuls and its
  per-image attention, the merger. No embedding lookup (a gather, not a matmul; most of
  N for tiny models) and no norms.
- `flops_total`: `flops_6nd` + the untied head (on `head_tokens`) + attention + ViT:
  the paper's accounting extended, for stage totals.
- `flops_hardware`: `flops_model` plus what rematerialisation recomputes (the HFU
  numerator): per `remat_policy`, one more forward of the layers and/or attention, and
  the chunked loss's head forward (its chunks are checkpointed). Recomputation inside
  the attention kernel's own backward is not counted.

The head rule mirrors `train.loss.token_stats`: a row that fits one chunk computes the
head on all its slots; otherwise the row's trained tokens are moved to the front and
only chunks holding one are computed, i.e. ceil(trained / chunk) chunks per row.
Imports only numpy and the model configs (the GPU bench's image has nothing else).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from mage_jax.models.config import MageViTConfig, MageVLConfig, Qwen3Config

# What each remat policy recomputes in backward (models/remat.py): the layers' weight
# matmuls, attention (its batched einsums or kernel, which no dots policy saves), both.
_REMAT_RECOMPUTES = {"none": (False, False), "full": (True, True), "dots": (False, True),
                     "dots_no_batch": (False, True), "save_attn_out": (True, False)}


# ------------------------------------------------------------------------- parameter counts


def lm_params(text: Qwen3Config) -> int:
  """The paper's N: embedding, layers (with norms), final norm; no untied head."""
  d, hd = text.hidden_size, text.head_dim
  attn = d * text.num_attention_heads * hd * 2 + d * text.num_key_value_heads * hd * 2 + 2 * hd
  mlp = 3 * d * text.intermediate_size
  per_layer = attn + mlp + 2 * d
  return text.vocab_size * d + text.num_hidden_layers * per_layer + d


def head_params(text: Qwen3Config) -> int:
  """Parameters of an untied LM head (0 when tied: the embedding is reused)."""
  return 0 if text.tie_word_embeddings else text.vocab_size * text.hidden_size


def qwen3_layer_matmul_params(text: Qwen3Config) -> int:
  """Weights every token multiplies in the decoder layers (q, k, v, o, gate, up, down)."""
  d, hd = text.hidden_size, text.head_dim
  attn = d * hd * (text.num_attention_heads * 2 + text.num_key_value_heads * 2)
  return text.num_hidden_layers * (attn + 3 * d * text.intermediate_size)


def qwen3_matmul_params(text: Qwen3Config) -> int:
  """Matmul weights per token when the head runs on every token (tied or not, logits are a
  [D, V] matmul); no embedding gather, no norms."""
  return qwen3_layer_matmul_params(text) + text.hidden_size * text.vocab_size


def qwen3_total_params(text: Qwen3Config) -> int:
  """All parameters, as a checkpoint counts them."""
  return lm_params(text) + head_params(text)


def vit_params(vision: MageViTConfig) -> tuple[int, int]:
  """(patch-level params: embed + blocks + pre-norm, merger params), biases and norms included."""
  d, m = vision.hidden_size, vision.intermediate_size
  block = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * m + m) + (m * d + d)
  tower = vision.patch_dim * d + 2 * d + vision.num_hidden_layers * block
  g = vision.spatial_merge_size ** 2
  merger = 2 * d + (g * d) * (g * d) + g * d + (g * d) * vision.out_hidden_size + vision.out_hidden_size
  return tower, merger


def vit_matmul_params(vision: MageViTConfig) -> tuple[int, int]:
  """(per-patch matmul weights of embedding + blocks, per-merged-token weights of the merger)."""
  d = vision.hidden_size
  per_block = d * 3 * d + d * d + 2 * d * vision.intermediate_size
  per_patch = vision.patch_dim * d + vision.num_hidden_layers * per_block
  merged_in = d * vision.spatial_merge_size ** 2
  per_merged = merged_in * merged_in + merged_in * vision.out_hidden_size
  return per_patch, per_merged


# ------------------------------------------------------------------------------ attention


def attention_pair_count(segment_lengths: Iterable[int], causal: bool) -> int:
  """Query-key pairs actually attended to (block-diagonal over segments)."""
  if causal:
    return sum(int(n) * (int(n) + 1) // 2 for n in segment_lengths)
  return sum(int(n) * int(n) for n in segment_lengths)


def attention_forward_flops(pairs: float, num_heads: int, head_dim: int, layers: int) -> float:
  """QKᵀ and PV: 2 matmuls × 2 FLOPs per multiply-add per pair per head-dim."""
  return 4.0 * pairs * num_heads * head_dim * layers


def attention_flops(text: Qwen3Config, segment_lengths: Sequence[int]) -> float:
  """Training FLOPs (fwd+bwd) of causal attention over packed segments of these lengths."""
  return 3.0 * attention_forward_flops(attention_pair_count(segment_lengths, causal=True),
                                       text.num_attention_heads, text.head_dim,
                                       text.num_hidden_layers)


def vit_flops(vision: MageViTConfig, image_patch_counts: Sequence[int]) -> float:
  """Training FLOPs of the ViT (matmuls + per-image bidirectional attention) and merger."""
  counts = [int(n) for n in image_patch_counts]
  per_patch, per_merged = vit_matmul_params(vision)
  patches = sum(counts)
  dense = 6.0 * (per_patch * patches + per_merged * (patches // vision.spatial_merge_size ** 2))
  attn = 3.0 * attention_forward_flops(attention_pair_count(counts, causal=False),
                                       vision.num_attention_heads, vision.head_dim,
                                       vision.num_hidden_layers)
  return dense + attn


# ------------------------------------------------------------------------------ head tokens


def head_tokens(loss_mask: np.ndarray, chunk_size: int) -> int:
  """Slots the chunked loss (`train.loss.token_stats`) runs the LM head on, over a [B, T] mask."""
  mask = np.asarray(loss_mask) > 0
  if mask.ndim != 2:
    raise ValueError(f"loss_mask must be [B, T]; got shape {mask.shape}")
  t = mask.shape[1]
  chunk = max(1, min(int(chunk_size), t))
  if -(-t // chunk) == 1:
    return int(mask.shape[0] * t)  # one chunk: the whole row, trained or not
  trained = mask.sum(axis=1)
  return int((-(-trained // chunk) * chunk).sum())


# ------------------------------------------------------------------------------- one step


def text_config(model_cfg: Any) -> Qwen3Config:
  return model_cfg.text if isinstance(model_cfg, MageVLConfig) else model_cfg


def step_flops(model_cfg: Any, segment_lengths: Sequence[int],
               image_patch_counts: Sequence[int] = (), *, head_tokens: int | None = None,
               loss_chunked: bool = False) -> dict[str, float]:
  """Training FLOPs of one step over packed segments of these lengths (and, for Mage-VL,
  images of these patch counts). `head_tokens`: slots the loss computes the head on
  (default: every real token); `loss_chunked`: the loss ran in checkpointed chunks (its
  head forward is recomputed in backward)."""
  text = text_config(model_cfg)
  tokens = float(sum(int(n) for n in segment_lengths))
  heads = tokens if head_tokens is None else float(head_tokens)
  d, v = text.hidden_size, text.vocab_size
  layers_fwd = 2.0 * qwen3_layer_matmul_params(text) * tokens
  attn = attention_flops(text, segment_lengths)
  head_fwd = 2.0 * d * v * heads
  six_nd = 6.0 * lm_params(text) * tokens
  vit = vit_fwd = vit_attn_fwd = 0.0
  patches = 0
  if isinstance(model_cfg, MageVLConfig) and len(image_patch_counts):
    vision = model_cfg.vision
    vit = vit_flops(vision, image_patch_counts)
    patches = sum(int(n) for n in image_patch_counts)
    vit_attn_fwd = attention_forward_flops(
        attention_pair_count(image_patch_counts, causal=False), vision.num_attention_heads,
        vision.head_dim, vision.num_hidden_layers)
    vit_fwd = vit / 3.0 - vit_attn_fwd
  model = 3.0 * layers_fwd + 3.0 * head_fwd + attn + vit
  recompute = 0.0
  layers_again, attn_again = _REMAT_RECOMPUTES[text.remat_policy]
  recompute += (layers_fwd if layers_again else 0.0) + (attn / 3.0 if attn_again else 0.0)
  if isinstance(model_cfg, MageVLConfig) and patches:
    v_layers, v_attn = _REMAT_RECOMPUTES[model_cfg.vision.remat_policy]
    recompute += (vit_fwd if v_layers else 0.0) + (vit_attn_fwd if v_attn else 0.0)
  if loss_chunked:
    recompute += head_fwd
  untied_head = 6.0 * head_params(text) * heads
  return {"tokens": tokens, "patches": float(patches), "head_tokens": heads,
          "flops_6nd": six_nd, "flops_model": model, "flops_hardware": model + recompute,
          "flops_total": six_nd + untied_head + attn + vit, "flops_attention": attn}


def _run_lengths(ids: np.ndarray) -> list[int]:
  """Slots per nonzero id, row by row (segments / images of a packed [B, T] id array)."""
  out: list[int] = []
  for row in np.asarray(ids):
    _, counts = np.unique(row[row > 0], return_counts=True)
    out.extend(int(c) for c in counts)
  return out


def batch_flops(model_cfg: Any, batch: dict[str, np.ndarray], *,
                loss_chunk_size: int | None = None) -> dict[str, float]:
  """step_flops of one host batch (segment lengths, image patch counts and the loss's head
  tokens read from it). With `loss_chunk_size` and a `loss_mask`, the head counts only the
  slots the chunked loss computes; without, every real token."""
  segs = np.asarray(batch["segment_ids"])
  images = _run_lengths(batch["patch_image_ids"]) if (
      isinstance(model_cfg, MageVLConfig) and "patch_image_ids" in batch) else []
  heads = None
  chunked = False
  if loss_chunk_size is not None and "loss_mask" in batch:
    heads = head_tokens(batch["loss_mask"], loss_chunk_size)
    chunked = segs.shape[1] > loss_chunk_size
  return step_flops(model_cfg, _run_lengths(segs), images, head_tokens=heads,
                    loss_chunked=chunked)


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> float:
  """Model FLOPs utilisation: achieved FLOP/s over the peak (a fraction)."""
  return flops / seconds / peak_flops_per_s if seconds > 0 and peak_flops_per_s > 0 else 0.0


# ------------------------------------------------------------------------------ per stage


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
    per = int(patches_per_bin / max(images_per_bin, 1.0))
    vit = vit_flops(model_cfg.vision, [per] * int(max(images_per_bin, 1))) * bins * epochs
  return {"tokens": tokens, "lm_params": float(lm_params(text)), "flops_6nd": six_nd,
          "flops_with_attention": six_nd + attn, "flops_total": six_nd + attn + head + vit}


def format_zflops(x: float) -> str:
  return f"{x / 1e21:.3f} ZFLOPs"
