"""Model presets as ml_collections ConfigDicts.

    from configs import models
    cd = models.get_config("mage_vl_tiny")       # or qwen3_4b, mage_vit, mage_vl_4b, qwen3_tiny, mage_vit_tiny
    cd.text.remat_policy = "dots"                 # runtime knobs live beside the architecture
    cfg = models.build_model_config(cd)           # -> MageVLConfig / Qwen3Config / MageViTConfig

From the command line an entry point takes `--config=configs/models.py:mage_vl_tiny`
(other config files embed `models.get_config(...)` under their `model` key).

The dict has `arch` ("qwen3" | "mage_vit" | "mage_vl") and `text` and/or
`vision` sub-dicts whose keys are the dataclass fields of `Qwen3Config` /
`MageViTConfig`. Tiny presets keep the real vocabulary (151,936) so the real
tokenizer's ids (e.g. <|image_pad|> 151655) are valid, with a 64-wide model.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from mage_jax.models.config import MageViTConfig, Qwen3Config
from mage_jax.models.config import build_model_config  # noqa: F401  (configs only declare values; kept for callers)

PRESETS = ("qwen3_4b", "mage_vit", "mage_vl_4b", "qwen3_tiny", "mage_vit_tiny", "mage_vl_tiny",
           "mage_vl_proof")

_TEXT_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=128)
_VISION_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, out_hidden_size=64)
# The learning proof (configs/proof.py): trained from scratch on 2 CPU cores; 4 layers so the
# text tower can copy parameter values out of the instruction, the real vocabulary (tied head:
# half the embedding parameters).
_TEXT_PROOF = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, intermediate_size=384,
                   tie_word_embeddings=True)
_VISION_PROOF = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=192, out_hidden_size=128)


def _text(**overrides) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({**dataclasses.asdict(Qwen3Config()), **overrides})


def _vision(**overrides) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({**dataclasses.asdict(MageViTConfig()), **overrides})


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  name = arg or "mage_vl_4b"
  if name not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; choose one of {PRESETS}")
  tiny = name.endswith("_tiny")
  cd = ml_collections.ConfigDict()
  cd.name = name
  # A vocab.json of launch.pretrain: train on that compact vocabulary (models/compact_vocab.py);
  # the stage's final params are expanded to the full one. "": the full vocabulary.
  cd.compact_vocab = ""
  if name.startswith("qwen3"):
    cd.arch = "qwen3"
    # Standalone Qwen3-4B-Instruct-2507 ties its head; the tiny keeps the untied path tested.
    cd.text = _text(**_TEXT_TINY) if tiny else _text(tie_word_embeddings=True)
  elif name.startswith("mage_vit"):
    cd.arch = "mage_vit"
    cd.vision = _vision(**_VISION_TINY) if tiny else _vision()
  elif name == "mage_vl_proof":
    cd.arch = "mage_vl"
    cd.text, cd.vision = _text(**_TEXT_PROOF), _vision(**_VISION_PROOF)
  else:
    cd.arch = "mage_vl"
    cd.text = _text(**_TEXT_TINY) if tiny else _text()
    cd.vision = _vision(**_VISION_TINY) if tiny else _vision()
  return cd
