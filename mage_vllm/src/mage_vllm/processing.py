"""vLLM multimodal processing for Mage-VL: our preprocessing, no HF processor.

The published processors wrap transformers' Qwen2VLImageProcessor; vLLM would
load it through AutoProcessor, which knows no "MageVLProcessor". Instead
`_call_hf_processor` runs `preprocess.preprocess` on every image and returns
normalised patch rows [sum N_i, 768] (`pixel_values`, flat per image) and the
patch grids [n, 3] (`image_grid_thw`, t = 1). Each `<|image_pad|>` of the
rendered prompt (the chat template writes one per image part) becomes
(h/32)*(w/32) of them.

min_pixels / max_pixels come from the model directory's
`preprocessor_config.json` (DESIGN.md defaults otherwise); `--mm-processor-kwargs`
or a request's `mm_processor_kwargs` may override them.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from PIL import Image
from transformers import BatchFeature
from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from vllm.multimodal.parse import ImageSize, MultiModalDataItems
from vllm.multimodal.processing import (BaseDummyInputsBuilder, BaseMultiModalProcessor,
                                        BaseProcessingInfo, PromptReplacement, PromptUpdate)

from mage_vllm import preprocess
from mage_vllm.config import IMAGE_PAD_ID

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
PIXEL_KEYS = ("min_pixels", "max_pixels")


def _directory_pixel_limits(model_dir: str) -> dict[str, int]:
  path = os.path.join(model_dir, "preprocessor_config.json")
  if not os.path.isfile(path):
    return {}
  with open(path) as f:
    try:
      cfg = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: invalid JSON ({e})") from e
  return {k: int(cfg[k]) for k in PIXEL_KEYS if cfg.get(k) is not None}


class MageVLProcessingInfo(BaseProcessingInfo):

  def get_supported_mm_limits(self) -> Mapping[str, int | None]:
    return {"image": None}

  def get_hf_processor(self, **kwargs: object):
    raise NotImplementedError("Mage-VL preprocesses images itself (mage_vllm.preprocess); "
                              "there is no HF processor to load")

  def get_supported_mm_processor_kwargs(self) -> dict[str, set[str]]:
    return {"text_kwargs": set(), "images_kwargs": set(PIXEL_KEYS)}

  def pixel_limits(self, mm_kwargs: Mapping[str, object] | None = None) -> tuple[int, int]:
    limits = {"min_pixels": preprocess.MIN_PIXELS, "max_pixels": preprocess.MAX_PIXELS}
    limits.update(_directory_pixel_limits(self.ctx.model_config.model))
    merged = self.ctx.get_merged_mm_kwargs(dict(mm_kwargs or {}))
    scoped = merged.get("images_kwargs") if isinstance(merged.get("images_kwargs"), Mapping) else {}
    for key in PIXEL_KEYS:
      value = scoped.get(key, merged.get(key))
      if value is not None:
        limits[key] = int(value)
    if limits["min_pixels"] > limits["max_pixels"]:
      raise ValueError(f"Mage-VL min_pixels={limits['min_pixels']} exceeds "
                       f"max_pixels={limits['max_pixels']}")
    return limits["min_pixels"], limits["max_pixels"]

  def get_image_size_with_most_features(self) -> ImageSize:
    _, max_pixels = self.pixel_limits()
    side = max(preprocess.FACTOR, math.isqrt(max_pixels) // preprocess.FACTOR * preprocess.FACTOR)
    return ImageSize(width=side, height=side)

  def get_mm_max_tokens_per_item(self, seq_len: int,
                                 mm_counts: Mapping[str, int]) -> Mapping[str, int]:
    size = self.get_image_size_with_most_features()
    min_pixels, max_pixels = self.pixel_limits()
    return {"image": preprocess.num_image_tokens(size.height, size.width, min_pixels, max_pixels)}


class MageVLDummyInputsBuilder(BaseDummyInputsBuilder[MageVLProcessingInfo]):

  def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
    return IMAGE_PLACEHOLDER * mm_counts.get("image", 0)

  def get_dummy_mm_data(self, seq_len: int, mm_counts: Mapping[str, int], mm_options=None):
    size = self.info.get_image_size_with_most_features()
    overrides = (mm_options or {}).get("image")
    return {"image": self._get_dummy_images(width=size.width, height=size.height,
                                            num_images=mm_counts.get("image", 0),
                                            overrides=overrides)}


def _as_pil(image: object) -> Image.Image:
  if isinstance(image, Image.Image):
    return image
  if isinstance(image, torch.Tensor):
    image = image.cpu().numpy()
  if isinstance(image, np.ndarray):
    if image.ndim != 3 or image.shape[-1] != 3 or image.dtype != np.uint8:
      raise ValueError(f"Mage-VL takes RGB uint8 [H, W, 3] images, got {image.dtype} {image.shape}")
    return Image.fromarray(image)
  raise TypeError(f"Mage-VL cannot read an image of type {type(image).__name__}")


class MageVLMultiModalProcessor(BaseMultiModalProcessor[MageVLProcessingInfo]):

  def _call_hf_processor(self, hf_data: Mapping[str, object],
                         hf_kwargs: Mapping[str, object]) -> BatchFeature:
    min_pixels, max_pixels = self.info.pixel_limits(hf_kwargs)
    rows, grids = [], []
    for image in hf_data.get("images") or []:
      r, grid = preprocess.preprocess(_as_pil(image), min_pixels, max_pixels)
      rows.append(torch.from_numpy(r))
      grids.append(grid)
    return BatchFeature({
        "pixel_values": torch.cat(rows) if rows else torch.zeros((0, 3 * preprocess.PATCH ** 2)),
        "image_grid_thw": torch.tensor(grids, dtype=torch.int64).reshape(-1, 3),
    })

  def _get_mm_fields_config(self, hf_inputs: BatchFeature,
                            hf_processor_mm_kwargs: Mapping[str, object]
                            ) -> Mapping[str, MultiModalFieldConfig]:
    grids = hf_inputs.get("image_grid_thw", torch.empty((0, 3), dtype=torch.int64))
    return {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", grids.prod(-1)),
        "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True),
    }

  def _get_prompt_updates(self, mm_items: MultiModalDataItems,
                          hf_processor_mm_kwargs: Mapping[str, object],
                          out_mm_kwargs: MultiModalKwargsItems) -> Sequence[PromptUpdate]:
    group = preprocess.MERGE ** 2

    def pads(item_idx: int) -> list[int]:
      grid = out_mm_kwargs["image"][item_idx]["image_grid_thw"].data
      return [IMAGE_PAD_ID] * (int(grid.prod()) // group)

    return [PromptReplacement(modality="image", target=[IMAGE_PAD_ID], replacement=pads)]
