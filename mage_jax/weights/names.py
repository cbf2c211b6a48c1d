"""Parameter path <-> HF tensor name tables for Qwen3 and Mage-VL.

One `TensorSpec` per parameter: our nnx state path ('/'-joined, layer index
as a path element), the HF tensor name, the layout transform between them, and
our shape. The tables are built from the config alone, so the importer can
validate a checkpoint before reading a byte, and the exporter knows every
tensor's header entry before writing one. docs/ARCHITECTURE.md is the
contract these tables implement.

Transforms (ours -> HF; `to_ours` is the inverse):
- "none":        identical layout.
- "transpose":   our Linear kernel [in, out] <-> HF weight [out, in].
- "patch_embed": our [C*P*P, D] <-> HF Conv2d weight [D, C, P, P]
                 (HF reshaped to [D, C*P*P], then transposed).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Union

import numpy as np

from mage_jax.models.config import MageVLConfig, MageViTConfig, Qwen3Config

ModelConfig = Union[Qwen3Config, MageVLConfig]
TRANSFORMS = ("none", "transpose", "patch_embed")

# Architecture names accepted in config.json, per model kind.
QWEN3_ARCHS = ("Qwen3ForCausalLM",)
QWEN3_MODEL_TYPES = ("qwen3",)
MAGE_VL_ARCHS = ("MageVLForConditionalGeneration",)
MAGE_VL_MODEL_TYPES = ("mage_vl",)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
  path: str                 # our nnx state path, e.g. "model/layers/0/self_attn/q_proj/kernel"
  hf_name: str              # e.g. "model.layers.0.self_attn.q_proj.weight"
  transform: str            # one of TRANSFORMS
  shape: tuple[int, ...]    # our shape

  def __post_init__(self):
    if self.transform not in TRANSFORMS:
      raise ValueError(f"{self.path}: unknown transform {self.transform!r}")

  @property
  def hf_shape(self) -> tuple[int, ...]:
    if self.transform == "none":
      return self.shape
    if self.transform == "transpose":
      return tuple(reversed(self.shape))
    # patch_embed: ours [C*P*P, D] -> HF [D, C, P, P]; C = 3 channels.
    rows, dim = self.shape
    patch = int(math.isqrt(rows // 3))
    if 3 * patch * patch != rows:
      raise ValueError(f"{self.path}: {rows} rows is not 3*P*P")
    return (dim, 3, patch, patch)

  def to_hf(self, x: np.ndarray) -> np.ndarray:
    """Our layout -> HF layout (a view where possible)."""
    if self.transform == "none":
      return x
    if self.transform == "transpose":
      return x.T
    return x.T.reshape(self.hf_shape)

  def to_ours(self, x: np.ndarray) -> np.ndarray:
    """HF layout -> our layout (a view where possible)."""
    if self.transform == "none":
      return x
    if self.transform == "transpose":
      return x.T
    return x.reshape(x.shape[0], -1).T

  def hf_rows_for(self, index: tuple[slice, ...]) -> tuple[slice | None, tuple[slice, ...]]:
    """Which HF dim-0 rows a slice of our array needs, and the slice left to apply.

    Returns (rows, rest): read HF rows `rows` (None = all), convert with
    `to_ours`, then index with `rest`. Only dim-0 ranges of the HF tensor are
    contiguous on disk, so that is the one cut made while reading.
    """
    index = tuple(index) + (slice(None),) * (len(self.shape) - len(index))
    if self.transform == "none":
      return index[0], (slice(None),) + index[1:]
    # transpose and patch_embed: HF dim 0 is our last dim.
    return index[-1], index[:-1] + (slice(None),)


def _qwen3_body(cfg: Qwen3Config, ours: str, hf: str) -> list[TensorSpec]:
  d, hd = cfg.hidden_size, cfg.head_dim
  q_out, kv_out = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
  specs = [TensorSpec(f"{ours}/embed_tokens/embedding", f"{hf}embed_tokens.weight", "none",
                      (cfg.vocab_size, d))]
  for i in range(cfg.num_hidden_layers):
    o, h = f"{ours}/layers/{i}", f"{hf}layers.{i}"
    proj = {"q_proj": (d, q_out), "k_proj": (d, kv_out), "v_proj": (d, kv_out), "o_proj": (q_out, d)}
    for name, shape in proj.items():
      specs.append(TensorSpec(f"{o}/self_attn/{name}/kernel", f"{h}.self_attn.{name}.weight",
                              "transpose", shape))
    for name in ("q_norm", "k_norm"):
      specs.append(TensorSpec(f"{o}/self_attn/{name}/scale", f"{h}.self_attn.{name}.weight",
                              "none", (hd,)))
    mlp = {"gate_proj": (d, cfg.intermediate_size), "up_proj": (d, cfg.intermediate_size),
           "down_proj": (cfg.intermediate_size, d)}
    for name, shape in mlp.items():
      specs.append(TensorSpec(f"{o}/mlp/{name}/kernel", f"{h}.mlp.{name}.weight", "transpose", shape))
    for name in ("input_layernorm", "post_attention_layernorm"):
      specs.append(TensorSpec(f"{o}/{name}/scale", f"{h}.{name}.weight", "none", (d,)))
  specs.append(TensorSpec(f"{ours}/norm/scale", f"{hf}norm.weight", "none", (d,)))
  return specs


def _lm_head(cfg: Qwen3Config) -> list[TensorSpec]:
  if cfg.tie_word_embeddings:
    return []
  return [TensorSpec("lm_head/kernel", "lm_head.weight", "transpose",
                     (cfg.hidden_size, cfg.vocab_size))]


def _vit(cfg: MageViTConfig, ours: str, hf: str) -> list[TensorSpec]:
  d, inner = cfg.hidden_size, cfg.intermediate_size
  merged = d * cfg.spatial_merge_size ** 2

  def norm(o: str, h: str) -> list[TensorSpec]:
    return [TensorSpec(f"{o}/scale", f"{h}.weight", "none", (d,)),
            TensorSpec(f"{o}/bias", f"{h}.bias", "none", (d,))]

  def linear(o: str, h: str, n_in: int, n_out: int) -> list[TensorSpec]:
    return [TensorSpec(f"{o}/kernel", f"{h}.weight", "transpose", (n_in, n_out)),
            TensorSpec(f"{o}/bias", f"{h}.bias", "none", (n_out,))]

  specs = [TensorSpec(f"{ours}/embeddings/patch_embedding/kernel",
                      f"{hf}embeddings.patch_embedding.weight", "patch_embed", (cfg.patch_dim, d))]
  specs += norm(f"{ours}/layernorm_pre", f"{hf}layernorm_pre")
  for i in range(cfg.num_hidden_layers):
    o, h = f"{ours}/encoder/layers/{i}", f"{hf}encoder.layers.{i}"
    specs += norm(f"{o}/layer_norm1", f"{h}.layer_norm1")
    specs += norm(f"{o}/layer_norm2", f"{h}.layer_norm2")
    specs += linear(f"{o}/self_attn/qkv", f"{h}.self_attn.qkv", d, 3 * d)
    specs += linear(f"{o}/self_attn/proj", f"{h}.self_attn.proj", d, d)
    specs += linear(f"{o}/mlp/fc1", f"{h}.mlp.fc1", d, inner)
    specs += linear(f"{o}/mlp/fc2", f"{h}.mlp.fc2", inner, d)
  specs += norm(f"{ours}/merger/ln_q", f"{hf}merger.ln_q")
  specs += linear(f"{ours}/merger/fc1", f"{hf}merger.mlp.0", merged, merged)
  specs += linear(f"{ours}/merger/fc2", f"{hf}merger.mlp.2", merged, cfg.out_hidden_size)
  return specs


def tensor_specs(cfg: ModelConfig) -> list[TensorSpec]:
  """Every parameter of the model `cfg` describes, in checkpoint order."""
  if isinstance(cfg, Qwen3Config):
    return _qwen3_body(cfg, "model", "model.") + _lm_head(cfg)
  if isinstance(cfg, MageVLConfig):
    return (_qwen3_body(cfg.text, "language_model", "model.language_model.") + _lm_head(cfg.text)
            + _vit(cfg.vision, "visual", "model.visual."))
  raise TypeError(f"no weight table for config type {type(cfg).__name__}")


def tied_head_copy(cfg: ModelConfig) -> TensorSpec | None:
  """For a tied model: `lm_head.weight` written from the embedding (what `hf.save_hf` adds so
  that vLLM's in-place reload refreshes the head); None for an untied one."""
  text = cfg if isinstance(cfg, Qwen3Config) else cfg.text
  if not text.tie_word_embeddings:
    return None
  embed = next(s for s in tensor_specs(cfg) if s.hf_name.endswith("embed_tokens.weight"))
  return TensorSpec(embed.path, "lm_head.weight", "none", embed.shape)


def tolerated_extra_names(cfg: ModelConfig) -> set[str]:
  """HF names a checkpoint may carry that we do not load.

  A tied model's checkpoint sometimes still stores `lm_head.weight` (a copy of
  the embedding; our own exports do, see `tied_head_copy`); transformers ignores
  it when tying, and so do we.
  """
  copy = tied_head_copy(cfg)
  return {copy.hf_name} if copy is not None else set()


def path_str(path: tuple) -> str:
  """nnx state path tuple -> '/'-joined string used in the tables."""
  return "/".join(str(p) for p in path)
