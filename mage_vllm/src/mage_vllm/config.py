"""transformers config classes for the Mage-VL `config.json` (model_type "mage_vl").

transformers has no "mage_vl" model type; vLLM reads `config.json` through
AutoConfig, so `mage_vllm.register()` registers these. Field names and
defaults follow DESIGN.md and `mage_jax.models.config.MageVLConfig.to_hf`;
keys not declared here (e.g. `max_window_frames`, `frame_windows_size`) are kept
as attributes by transformers' config base class.
"""
from __future__ import annotations

from transformers import Qwen3Config

try:  # transformers >= 5 renamed the base class
  from transformers import PreTrainedConfig
except ImportError:  # pragma: no cover - transformers 4
  from transformers import PretrainedConfig as PreTrainedConfig

IMAGE_PAD_ID = 151655
VISION_START_ID = 151652
VISION_END_ID = 151653


class MageViTConfig(PreTrainedConfig):
  model_type = "mage_vit"
  base_config_key = "vision_config"

  hidden_size: int = 1024
  num_hidden_layers: int = 24
  num_attention_heads: int = 16
  intermediate_size: int = 4096
  patch_size: int = 16
  num_channels: int = 3
  layer_norm_eps: float = 1e-6
  rope_theta: float = 10_000.0
  spatial_merge_size: int = 2
  temporal_patch_size: int = 1
  hidden_act: str = "gelu"
  out_hidden_size: int = 2560


class MageVLConfig(PreTrainedConfig):
  model_type = "mage_vl"
  sub_configs = {"text_config": Qwen3Config, "vision_config": MageViTConfig}

  text_config: dict | PreTrainedConfig | None = None
  vision_config: dict | PreTrainedConfig | None = None
  image_token_id: int = IMAGE_PAD_ID
  vision_start_token_id: int = VISION_START_ID
  vision_end_token_id: int = VISION_END_ID
  tie_word_embeddings: bool = False

  def __post_init__(self, **kwargs):
    for key, cls in self.sub_configs.items():
      value = getattr(self, key)
      if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "model_type"}
        setattr(self, key, cls(**value))
      elif value is None:
        setattr(self, key, cls())
    super().__post_init__(**kwargs)
