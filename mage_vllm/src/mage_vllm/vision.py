"""Mage-ViT in PyTorch, for vLLM (DESIGN.md "Mage-ViT"; mage_jax/models/mage_vit.py).

Plain torch modules (no vLLM layers), so the tower can be checked against the
JAX model without an engine, and loads with vLLM's default weight loader.
Attribute names are the checkpoint's names under `model.visual.`.

- patch embedding: Conv2d 16x16 stride 16, no bias, on [C, 16, 16] patch rows;
- `layernorm_pre`, then pre-LN blocks: x + proj(attn(ln1(x))), h + fc2(gelu(fc1(ln2(h))));
- fused qkv with bias, rows q | k | v; exact (erf) GELU; LayerNorm eps from the config;
- interleaved 3D RoPE 4:6:6 (vision_rope.py): angles e = concat(f, f),
  r[2i] = -x[2i+1], r[2i+1] = x[2i], out = x cos e + r sin e, in fp32;
- bidirectional attention, block-diagonal: each image alone, a [T, h, w] grid in
  windows of at most `frame_windows_size` frames;
- merger: ln_q, 4 consecutive rows (one 2x2 block) concatenated -> fc1 -> GELU -> fc2.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def rope_axis_sizes(head_dim: int) -> tuple[int, int, int]:
  if head_dim % 32:
    raise ValueError(f"Mage-ViT 3D RoPE needs head_dim % 32 == 0, got {head_dim}")
  u = head_dim // 2 // 16
  return 4 * u, 6 * u, 6 * u


def inverse_frequencies(head_dim: int, theta: float) -> np.ndarray:
  """fp32 [head_dim/2] = concat(inv_t, inv_h, inv_w), inv_a[k] = theta^(-k/size_a) (float64 maths)."""
  parts = [theta ** (-np.arange(n, dtype=np.float64) / n) for n in rope_axis_sizes(head_dim)]
  return np.concatenate(parts).astype(np.float32)


def grid_positions(grid_thw: Sequence[Sequence[int]], merge: int = 2) -> np.ndarray:
  """(t, h, w) int [sum T*h*w, 3] in patch order: frames in turn, each in 2x2 block order."""
  out = []
  for t_len, gh, gw in grid_thw:
    hh, ww = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    def blocks(a):
      return a.reshape(gh // merge, merge, gw // merge, merge).transpose(0, 2, 1, 3).ravel()
    h, w = blocks(hh), blocks(ww)
    out += [np.stack([np.full_like(h, t), h, w], axis=-1) for t in range(t_len)]
  return np.concatenate(out) if out else np.zeros((0, 3), np.int64)


def attention_windows(grid_thw: Sequence[Sequence[int]], frames_per_window: int) -> list[int]:
  """Lengths of the attention blocks, in patch order: one per image, or per window of frames."""
  lengths = []
  for t_len, gh, gw in grid_thw:
    for start in range(0, t_len, frames_per_window):
      lengths.append(min(frames_per_window, t_len - start) * gh * gw)
  return lengths


def rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
  pairs = x.unflatten(-1, (-1, 2))
  return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


class VisionAttention(nn.Module):
  def __init__(self, dim: int, heads: int):
    super().__init__()
    self.heads, self.head_dim = heads, dim // heads
    self.qkv = nn.Linear(dim, 3 * dim, bias=True)
    self.proj = nn.Linear(dim, dim, bias=True)

  def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              windows: list[int]) -> torch.Tensor:
    n = x.shape[0]
    q, k, v = self.qkv(x).view(n, 3, self.heads, self.head_dim).unbind(1)
    def rope(a):
      af = a.float()
      return (af * cos + rotate_interleaved(af) * sin).to(a.dtype)
    q, k = rope(q), rope(k)
    outs = []
    for qw, kw, vw in zip(q.split(windows), k.split(windows), v.split(windows)):
      # [L, H, D] -> [1, H, L, D]; no mask inside a window: bidirectional.
      o = F.scaled_dot_product_attention(*(t.transpose(0, 1)[None] for t in (qw, kw, vw)))
      outs.append(o[0].transpose(0, 1).reshape(-1, self.heads * self.head_dim))
    return self.proj(torch.cat(outs))


class VisionMLP(nn.Module):
  def __init__(self, dim: int, hidden: int):
    super().__init__()
    self.fc1 = nn.Linear(dim, hidden, bias=True)
    self.fc2 = nn.Linear(hidden, dim, bias=True)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    return self.fc2(F.gelu(self.fc1(x), approximate="none"))


class VisionBlock(nn.Module):
  def __init__(self, dim: int, heads: int, mlp: int, eps: float):
    super().__init__()
    self.layer_norm1 = nn.LayerNorm(dim, eps=eps)
    self.self_attn = VisionAttention(dim, heads)
    self.layer_norm2 = nn.LayerNorm(dim, eps=eps)
    self.mlp = VisionMLP(dim, mlp)

  def forward(self, x, cos, sin, windows):
    h = x + self.self_attn(self.layer_norm1(x), cos, sin, windows)
    return h + self.mlp(self.layer_norm2(h))


class VisionEmbeddings(nn.Module):
  def __init__(self, channels: int, patch: int, dim: int):
    super().__init__()
    self.channels, self.patch = channels, patch
    self.patch_embedding = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch, bias=False)

  def forward(self, rows: torch.Tensor) -> torch.Tensor:
    x = rows.view(-1, self.channels, self.patch, self.patch)
    return self.patch_embedding(x).flatten(1)


class VisionEncoder(nn.Module):
  def __init__(self, blocks: list[VisionBlock]):
    super().__init__()
    self.layers = nn.ModuleList(blocks)


class PatchMerger(nn.Module):
  def __init__(self, dim: int, out_dim: int, merge: int, eps: float):
    super().__init__()
    self.group = merge * merge
    self.ln_q = nn.LayerNorm(dim, eps=eps)
    merged = dim * self.group
    self.mlp = nn.ModuleList([nn.Linear(merged, merged), nn.GELU(approximate="none"),
                              nn.Linear(merged, out_dim)])

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    x = self.ln_q(x).reshape(-1, self.group * x.shape[-1])
    for layer in self.mlp:
      x = layer(x)
    return x


class MageViT(nn.Module):
  """normalised patch rows [N, C*P*P] + grids [(t, h, w)] -> merged tokens [N / 4, out_hidden_size]."""

  def __init__(self, vision_config, out_hidden_size: int):
    super().__init__()
    c = vision_config
    dim, heads = c.hidden_size, c.num_attention_heads
    eps = getattr(c, "layer_norm_eps", 1e-6)
    self.merge = getattr(c, "spatial_merge_size", 2)
    # The published config names the window `frame_windows_size`; our own export, `max_window_frames`.
    self.frames_per_window = int(getattr(c, "frame_windows_size", None)
                                 or getattr(c, "max_window_frames", None) or 4)
    self.embeddings = VisionEmbeddings(getattr(c, "num_channels", 3), c.patch_size, dim)
    self.layernorm_pre = nn.LayerNorm(dim, eps=eps)
    self.encoder = VisionEncoder([VisionBlock(dim, heads, c.intermediate_size, eps)
                                  for _ in range(c.num_hidden_layers)])
    self.merger = PatchMerger(dim, getattr(c, "out_hidden_size", None) or out_hidden_size,
                              self.merge, eps)
    # Not a checkpoint tensor: rebuilt from the config, kept in fp32 whatever the model dtype.
    self.register_buffer("inv_freq", torch.from_numpy(
        inverse_frequencies(dim // heads, float(getattr(c, "rope_theta", 10_000.0)))),
        persistent=False)

  def forward(self, rows: torch.Tensor, grid_thw: Sequence[Sequence[int]]) -> torch.Tensor:
    grid_thw = [tuple(int(v) for v in g) for g in grid_thw]
    positions = torch.from_numpy(grid_positions(grid_thw, self.merge)).to(rows.device)
    if positions.shape[0] != rows.shape[0]:
      raise ValueError(f"{rows.shape[0]} patch rows for grids {grid_thw} "
                       f"({positions.shape[0]} patches)")
    st, sh, sw = rope_axis_sizes(self.inv_freq.numel() * 2)
    axis = torch.repeat_interleave(torch.arange(3, device=rows.device),
                                   torch.tensor([st, sh, sw], device=rows.device))
    f = positions.float()[:, axis] * self.inv_freq.float()      # [N, half]
    e = torch.cat([f, f], dim=-1)[:, None, :]                    # [N, 1, head_dim]
    cos, sin = e.cos(), e.sin()
    windows = attention_windows(grid_thw, self.frames_per_window)
    dtype = self.embeddings.patch_embedding.weight.dtype
    x = self.layernorm_pre(self.embeddings(rows.to(dtype)))
    for block in self.encoder.layers:
      x = block(x, cos, sin, windows)
    return self.merger(x)
