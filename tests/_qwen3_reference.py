"""An independent Qwen3 forward in NumPy (float64), written from DESIGN.md ("Qwen3-4B-Instruct-2507").

It knows nothing of our model or loader: weights come by their HF names in the HF layout
(linear weights [out, in]) and the shape from the keys of an HF `config.json`, so a parity test can
run it on an exported directory read straight from its safetensors files (`read_hf_dir`, a plain
parser of the format; bf16 widened bit for bit) or on any other name -> array mapping.
"""
from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
  """The safetensors format: u64 header length, JSON header {name: {dtype, shape, data_offsets}}, data."""
  with open(path, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    header = json.loads(f.read(n))
    data = f.read()
  out = {}
  for name, meta in header.items():
    if name == "__metadata__":
      continue
    start, end = meta["data_offsets"]
    raw = data[start:end]
    if meta["dtype"] == "BF16":   # the top half of an fp32
      arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
      arr = np.frombuffer(raw, _DTYPES[meta["dtype"]])
    out[name] = arr.reshape(meta["shape"]).astype(np.float64)
  return out


def read_hf_dir(path: str) -> tuple[dict, dict[str, np.ndarray]]:
  """(language-model config dict, HF-named float64 tensors) of an HF directory. For a Mage-VL
  directory: its `text_config` (with the top-level tie flag) and the language tower's tensors
  renamed to plain Qwen3 names (`model.language_model.` -> `model.`)."""
  with open(os.path.join(path, "config.json")) as f:
    config = json.load(f)
  tensors: dict[str, np.ndarray] = {}
  for name in sorted(os.listdir(path)):
    if name.endswith(".safetensors"):
      tensors.update(_read_safetensors(os.path.join(path, name)))
  if "text_config" in config:
    config = {"tie_word_embeddings": config.get("tie_word_embeddings", False), **config["text_config"]}
    tensors = {k.replace("model.language_model.", "model.", 1): v for k, v in tensors.items()
               if not k.startswith("model.visual.")}
  return config, tensors


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
  """Half-split rotate_half RoPE on [T, H, D]."""
  d = x.shape[-1]
  inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
  ang = pos[:, None] * inv[None]
  emb = np.concatenate([ang, ang], -1)[:, None, :]
  rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
  return x * np.cos(emb) + rot * np.sin(emb)


def logits(w: Mapping[str, np.ndarray], config: Mapping, tokens: Sequence[int]) -> np.ndarray:
  """One sequence [T] -> logits [T, V]. With `tie_word_embeddings` the head is the embedding
  (a stored `lm_head.weight` is ignored, as transformers ignores it)."""
  t = len(tokens)
  hq = config["num_attention_heads"]
  hkv = config.get("num_key_value_heads", hq)
  hd = config.get("head_dim") or config["hidden_size"] // hq
  eps = config.get("rms_norm_eps", 1e-6)
  theta = config.get("rope_theta") or config["rope_parameters"]["rope_theta"]
  pos = np.arange(t, dtype=np.float64)
  causal = np.tril(np.ones((t, t), bool))
  x = w["model.embed_tokens.weight"][np.asarray(tokens)]
  for i in range(config["num_hidden_layers"]):
    p = f"model.layers.{i}."
    y = _rms(x, w[p + "input_layernorm.weight"], eps)
    q = (y @ w[p + "self_attn.q_proj.weight"].T).reshape(t, hq, hd)
    k = (y @ w[p + "self_attn.k_proj.weight"].T).reshape(t, hkv, hd)
    v = (y @ w[p + "self_attn.v_proj.weight"].T).reshape(t, hkv, hd)
    q = _rope(_rms(q, w[p + "self_attn.q_norm.weight"], eps), pos, theta)
    k = _rope(_rms(k, w[p + "self_attn.k_norm.weight"], eps), pos, theta)
    out = np.zeros((t, hq, hd))
    for h in range(hq):
      kv = h // (hq // hkv)
      s = np.where(causal, q[:, h] @ k[:, kv].T * hd ** -0.5, -np.inf)
      e = np.exp(s - s.max(-1, keepdims=True))
      out[:, h] = (e / e.sum(-1, keepdims=True)) @ v[:, kv]
    h_ = x + out.reshape(t, hq * hd) @ w[p + "self_attn.o_proj.weight"].T
    y = _rms(h_, w[p + "post_attention_layernorm.weight"], eps)
    gate = y @ w[p + "mlp.gate_proj.weight"].T
    x = h_ + (gate / (1 + np.exp(-gate)) * (y @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
  x = _rms(x, w["model.norm.weight"], eps)
  head = w["model.embed_tokens.weight"] if config.get("tie_word_embeddings") else w["lm_head.weight"]
  return x @ head.T


def completion_logprobs(w: Mapping[str, np.ndarray], config: Mapping, prompt: Sequence[int],
                        completion: Sequence[int]) -> np.ndarray:
  """log p(completion[k] | prompt + completion[:k]) for each k."""
  z = logits(w, config, list(prompt) + list(completion[:-1]))[len(prompt) - 1:]
  z = z - z.max(-1, keepdims=True)
  logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  return logp[np.arange(len(completion)), np.asarray(completion)]
