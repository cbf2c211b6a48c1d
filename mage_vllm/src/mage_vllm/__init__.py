"""vLLM plugin that serves Mage-VL exports (`mage_jax.api.Policy.save`, `launch.convert`).

vLLM calls `register()` in every process it starts (entry point group
`vllm.general_plugins`, name "mage_vl"). It registers the "mage_vl" config type
with transformers' AutoConfig and the architecture our exports name in
`config.json` with vLLM's ModelRegistry. The model module is registered by its
import path, so vLLM imports it only when a Mage-VL checkpoint is served.
"""
from __future__ import annotations

# What `mage_jax.models.config.MageVLConfig.to_hf` writes in config.json "architectures".
# The published checkpoint's own name is not known to us (we hold its file list,
# not its config.json), so no second name is registered.
ARCHITECTURES = ("MageVLForConditionalGeneration",)


def register() -> None:
  """Idempotent: vLLM may call it several times per process."""
  from transformers import AutoConfig
  from vllm import ModelRegistry

  from mage_vllm.config import MageViTConfig, MageVLConfig

  for config_cls in (MageVLConfig, MageViTConfig):
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
  for arch in ARCHITECTURES:
    if arch not in ModelRegistry.get_supported_archs():
      ModelRegistry.register_model(arch, "mage_vllm.model:MageVLForConditionalGeneration")
