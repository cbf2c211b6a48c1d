"""Mage-VL for vLLM: our Mage-ViT (vision.py) feeding vLLM's own Qwen3ForCausalLM.

The language tower is vLLM's registered Qwen3 (`init_vllm_registered_model`
with `text_config`), so attention, KV cache, sampling and tensor parallelism
are vLLM's. The vision tower is plain torch and replicated on every rank.
Image features replace the `<|image_pad|>` embeddings in order (vLLM's default
`embed_input_ids`); the language model uses plain 1D positions (no M-RoPE).

Checkpoint names (DESIGN.md "HF names (Mage-VL checkpoint)") map by prefix:
`model.language_model.` -> `language_model.model.`, `lm_head.` ->
`language_model.lm_head.`, `model.visual.` -> `visual.`.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models.interfaces import MultiModalEmbeddings, SupportsMultiModal
from vllm.model_executor.models.utils import (AutoWeightsLoader, WeightsMapper,
                                              init_vllm_registered_model, maybe_prefix)
from vllm.multimodal import MULTIMODAL_REGISTRY

from mage_vllm.processing import (IMAGE_PLACEHOLDER, MageVLDummyInputsBuilder,
                                  MageVLMultiModalProcessor, MageVLProcessingInfo)
from mage_vllm.vision import MageViT


def _as_2d(value: object, name: str, width: int) -> torch.Tensor:
  """A field vLLM hands over as one tensor or a list of per-image tensors -> [rows, width]."""
  if isinstance(value, (list, tuple)):
    value = torch.cat([torch.as_tensor(v).reshape(-1, width) for v in value])
  if not isinstance(value, torch.Tensor):
    raise ValueError(f"Mage-VL: {name} must be a tensor or a list of tensors, got {type(value)}")
  return value.reshape(-1, width)


@MULTIMODAL_REGISTRY.register_processor(MageVLMultiModalProcessor, info=MageVLProcessingInfo,
                                        dummy_inputs=MageVLDummyInputsBuilder)
class MageVLForConditionalGeneration(nn.Module, SupportsMultiModal):

  hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={
      "model.language_model.": "language_model.model.",
      "model.visual.": "visual.",
      "lm_head.": "language_model.lm_head.",
  })

  @classmethod
  def get_placeholder_str(cls, modality: str, i: int) -> str | None:
    if modality.startswith("image"):
      return IMAGE_PLACEHOLDER
    raise ValueError(f"Mage-VL takes images only, not {modality!r}")

  def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
    super().__init__()
    config = vllm_config.model_config.hf_config
    self.config = config
    with self._mark_tower_model(vllm_config, "image"):
      self.visual = MageViT(config.vision_config, config.text_config.hidden_size)
    with self._mark_language_model(vllm_config):
      self.language_model = init_vllm_registered_model(
          vllm_config=vllm_config, hf_config=config.text_config,
          prefix=maybe_prefix(prefix, "language_model"), architectures=["Qwen3ForCausalLM"])
    self.make_empty_intermediate_tensors = self.language_model.make_empty_intermediate_tensors

  def embed_multimodal(self, **kwargs: object) -> MultiModalEmbeddings:
    pixel_values = kwargs.get("pixel_values")
    if pixel_values is None:
      return []
    patch_dim = self.visual.embeddings.patch_embedding.weight[0].numel()
    rows = _as_2d(pixel_values, "pixel_values", patch_dim)
    grids = _as_2d(kwargs.get("image_grid_thw"), "image_grid_thw", 3).tolist()
    merged = self.visual(rows, grids)
    group = self.visual.merge ** 2
    return merged.split([t * h * w // group for t, h, w in grids])

  def get_language_model(self) -> nn.Module:
    return self.language_model

  def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
              intermediate_tensors=None, inputs_embeds: torch.Tensor | None = None,
              **kwargs: object):
    if intermediate_tensors is not None:
      inputs_embeds = None
    return self.language_model.model(input_ids=input_ids, positions=positions,
                                     intermediate_tensors=intermediate_tensors,
                                     inputs_embeds=inputs_embeds)

  def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
    return self.language_model.compute_logits(hidden_states)

  def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
    return AutoWeightsLoader(self).load_weights(weights, mapper=self.hf_to_vllm_mapper)
