"""Architecture configs for Qwen3, Mage-ViT and Mage-VL.

Frozen dataclasses so they can be static jit arguments. Field names follow the
HF `config.json` keys where one exists; `from_hf`/`to_hf` translate. Runtime
knobs (dtypes, attention backend, remat) live beside the architecture because
every forward needs them, but they never go into an exported `config.json`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

# Token ids from the Qwen3 tokenizer (DESIGN.md).
IM_START_ID = 151644
IM_END_ID = 151645
PAD_ID = 151643
VISION_START_ID = 151652
VISION_END_ID = 151653
IMAGE_PAD_ID = 151655

REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch", "save_attn_out")
ATTENTION_BACKENDS = ("xla", "pallas_gpu", "pallas_interpret")
# Fields that say how to run a model, not what it is: free to change between runs.
RUNTIME_FIELDS = ("param_dtype", "compute_dtype", "attention_backend", "remat_policy",
                  "max_segment_len")


@dataclasses.dataclass(frozen=True)
class Qwen3Config:
  vocab_size: int = 151936
  hidden_size: int = 2560
  num_hidden_layers: int = 36
  num_attention_heads: int = 32
  num_key_value_heads: int = 8
  head_dim: int = 128
  intermediate_size: int = 9728
  rms_norm_eps: float = 1e-6
  rope_theta: float = 5_000_000.0
  tie_word_embeddings: bool = False
  # A compact vocabulary (models/compact_vocab.py): the last of `vocab_size` rows stands for this
  # many ids of the full vocabulary and its logit gets +log(rest_ids), so softmax over the compact
  # rows equals softmax over the full vocabulary the model expands to. 0: a plain vocabulary.
  # Training-only: an exported checkpoint is always expanded (rest_ids 0).
  rest_ids: int = 0
  # Runtime knobs (not part of the HF config).
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  attention_backend: str = "xla"
  remat_policy: str = "none"
  # 0, or a promise that no packed segment is longer: lets the "xla" attention backend
  # attend within that window instead of the whole prefix (models/attention.py; checked).
  max_segment_len: int = 0

  def __post_init__(self):
    if self.max_segment_len < 0:
      raise ValueError(f"max_segment_len={self.max_segment_len} must be >= 0 (0: no bound)")
    if self.num_attention_heads % self.num_key_value_heads:
      raise ValueError(
          f"num_attention_heads={self.num_attention_heads} is not a multiple of "
          f"num_key_value_heads={self.num_key_value_heads}")
    _check_choice("remat_policy", self.remat_policy, REMAT_POLICIES)
    _check_choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
    if self.rest_ids < 0:
      raise ValueError(f"rest_ids={self.rest_ids} must be >= 0")

  @classmethod
  def from_hf(cls, d: dict[str, Any], **runtime) -> "Qwen3Config":
    theta = d.get("rope_theta")
    if theta is None:  # transformers-5 style
      theta = (d.get("rope_parameters") or {}).get("rope_theta")
    if theta is None:
      raise ValueError("Qwen3 config has no rope_theta (looked in rope_theta and rope_parameters)")
    hidden = d["hidden_size"]
    heads = d["num_attention_heads"]
    return cls(
        vocab_size=d["vocab_size"], hidden_size=hidden,
        num_hidden_layers=d["num_hidden_layers"], num_attention_heads=heads,
        num_key_value_heads=d.get("num_key_value_heads", heads),
        head_dim=d.get("head_dim") or hidden // heads,
        intermediate_size=d["intermediate_size"],
        rms_norm_eps=d.get("rms_norm_eps", 1e-6), rope_theta=float(theta),
        tie_word_embeddings=bool(d.get("tie_word_embeddings", False)), **runtime)

  def to_hf(self) -> dict[str, Any]:
    if self.rest_ids:
      raise ValueError("a compact-vocabulary config (rest_ids > 0) has no HF form: expand the "
                       "params first (models/compact_vocab.py CompactVocab.expand_params)")
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
        "num_hidden_layers": self.num_hidden_layers,
        "num_attention_heads": self.num_attention_heads,
        "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
        "intermediate_size": self.intermediate_size, "hidden_act": "silu",
        "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
        "tie_word_embeddings": self.tie_word_embeddings, "attention_bias": False,
        "max_position_embeddings": 262144, "bos_token_id": PAD_ID,
        "eos_token_id": IM_END_ID, "torch_dtype": "bfloat16",
    }


@dataclasses.dataclass(frozen=True)
class MageViTConfig:
  hidden_size: int = 1024
  num_hidden_layers: int = 24
  num_attention_heads: int = 16
  intermediate_size: int = 4096
  patch_size: int = 16
  num_channels: int = 3
  layer_norm_eps: float = 1e-6
  rope_theta: float = 10_000.0
  spatial_merge_size: int = 2
  out_hidden_size: int = 2560  # LM width the merger projects to
  max_window_frames: int = 4   # video: attention windows of at most this many frames
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  attention_backend: str = "xla"
  remat_policy: str = "none"
  # 0, or a promise that no image has more patches: the "xla" backend's attention window.
  max_segment_len: int = 0

  def __post_init__(self):
    if self.max_segment_len < 0:
      raise ValueError(f"vision max_segment_len={self.max_segment_len} must be >= 0 (0: no bound)")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError("vision hidden_size must be a multiple of num_attention_heads")
    if self.max_window_frames < 1:
      raise ValueError(f"vision max_window_frames (frame_windows_size)={self.max_window_frames} "
                       "must be >= 1")
    if (self.hidden_size // self.num_attention_heads) % 32:
      raise ValueError("vision head_dim must be a multiple of 32 for the 4:6:6 3D RoPE split")
    _check_choice("remat_policy", self.remat_policy, REMAT_POLICIES)
    _check_choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_attention_heads

  @property
  def patch_dim(self) -> int:
    return self.num_channels * self.patch_size * self.patch_size

  @classmethod
  def from_hf(cls, d: dict[str, Any], out_hidden_size: int, **runtime) -> "MageViTConfig":
    return cls(
        hidden_size=d["hidden_size"], num_hidden_layers=d["num_hidden_layers"],
        num_attention_heads=d["num_attention_heads"],
        intermediate_size=d["intermediate_size"], patch_size=d.get("patch_size", 16),
        num_channels=d.get("num_channels", 3),
        layer_norm_eps=d.get("layer_norm_eps", 1e-6),
        rope_theta=float(d.get("rope_theta", 10_000.0)),
        spatial_merge_size=d.get("spatial_merge_size", 2),
        out_hidden_size=d.get("out_hidden_size", out_hidden_size),
        max_window_frames=int(d.get("frame_windows_size", 4)), **runtime)

  def to_hf(self) -> dict[str, Any]:
    return {
        "model_type": "mage_vit", "hidden_size": self.hidden_size,
        "num_hidden_layers": self.num_hidden_layers,
        "num_attention_heads": self.num_attention_heads,
        "intermediate_size": self.intermediate_size, "patch_size": self.patch_size,
        "num_channels": self.num_channels, "layer_norm_eps": self.layer_norm_eps,
        "rope_theta": self.rope_theta, "spatial_merge_size": self.spatial_merge_size,
        "temporal_patch_size": 1, "hidden_act": "gelu",
        "out_hidden_size": self.out_hidden_size, "frame_windows_size": self.max_window_frames,
    }


@dataclasses.dataclass(frozen=True)
class MageVLConfig:
  text: Qwen3Config = dataclasses.field(default_factory=Qwen3Config)
  vision: MageViTConfig = dataclasses.field(default_factory=MageViTConfig)
  image_token_id: int = IMAGE_PAD_ID
  vision_start_token_id: int = VISION_START_ID
  vision_end_token_id: int = VISION_END_ID

  def __post_init__(self):
    if self.vision.out_hidden_size != self.text.hidden_size:
      raise ValueError(
          f"vision.out_hidden_size={self.vision.out_hidden_size} must equal "
          f"text.hidden_size={self.text.hidden_size}")

  @classmethod
  def from_hf(cls, d: dict[str, Any], **runtime) -> "MageVLConfig":
    if "text_config" not in d or "vision_config" not in d:
      raise ValueError("Mage-VL config.json needs both text_config and vision_config")
    text = Qwen3Config.from_hf(
        {"tie_word_embeddings": d.get("tie_word_embeddings", False), **d["text_config"]}, **runtime)
    vision = MageViTConfig.from_hf(d["vision_config"], text.hidden_size, **runtime)
    return cls(text=text, vision=vision,
               image_token_id=d.get("image_token_id", IMAGE_PAD_ID),
               vision_start_token_id=d.get("vision_start_token_id", VISION_START_ID),
               vision_end_token_id=d.get("vision_end_token_id", VISION_END_ID))

  def to_hf(self) -> dict[str, Any]:
    text = self.text.to_hf()
    for k in ("architectures", "bos_token_id", "eos_token_id", "torch_dtype"):
      text.pop(k)
    return {
        "architectures": ["MageVLForConditionalGeneration"], "model_type": "mage_vl",
        "text_config": text, "vision_config": self.vision.to_hf(),
        "image_token_id": self.image_token_id,
        "vision_start_token_id": self.vision_start_token_id,
        "vision_end_token_id": self.vision_end_token_id,
        "tie_word_embeddings": self.text.tie_word_embeddings,
        "eos_token_id": IM_END_ID, "torch_dtype": "bfloat16",
    }


def _check_choice(field: str, value: str, choices: tuple[str, ...]) -> None:
  if value not in choices:
    raise ValueError(f"{field}={value!r} is not one of {choices}")


def build_model_config(cd: Any) -> Qwen3Config | MageViTConfig | MageVLConfig:
  """The frozen dataclass config for a preset ConfigDict (configs/models.py: arch, text, vision;
  unknown keys raise TypeError naming them)."""
  if cd.arch == "qwen3":
    return Qwen3Config(**cd.text.to_dict())
  if cd.arch == "mage_vit":
    return MageViTConfig(**cd.vision.to_dict())
  if cd.arch == "mage_vl":
    return MageVLConfig(text=Qwen3Config(**cd.text.to_dict()),
                        vision=MageViTConfig(**cd.vision.to_dict()))
  raise ValueError(f"model config arch={cd.arch!r} is not one of qwen3, mage_vit, mage_vl")
