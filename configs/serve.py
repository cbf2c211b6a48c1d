"""The embedded rollout server (vLLM's OpenAI-server protocol over a mage_jax checkpoint).

  python -m launch.serve --config=configs/serve.py --config.model_path=/ckpt/export --config.port=8000
  python -m launch.serve --config=configs/serve.py:tiny        # random-init qwen3_tiny in a temp HF dir
  python -m launch.serve --config=configs/serve.py:tiny_vl     # the same with mage_vl_tiny (image chat)

Arg: "" (serve `model_path`), "tiny" or "tiny_vl".
"""
from __future__ import annotations

import ml_collections

_TINY_PRESETS = {"tiny": "qwen3_tiny", "tiny_vl": "mage_vl_tiny"}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  arg = arg or ""
  if arg and arg not in _TINY_PRESETS:
    raise ValueError(f"configs/serve.py: unknown arg {arg!r}; expected '', 'tiny' or 'tiny_vl'")
  c = ml_collections.ConfigDict()
  c.model_path = ""                     # an HF directory (Qwen3 or Mage-VL; config.json decides)
  c.tiny_preset = _TINY_PRESETS.get(arg, "")  # with no model_path: random-init this configs/models.py preset
  c.seed = 0                            # random init of the tiny preset
  c.host = "127.0.0.1"
  c.port = 8000                         # 0 = any free port (printed on start)
  c.model_name = "mage"                 # the `model` requests must name
  c.param_dtype = "float32"
  c.compute_dtype = "float32" if arg else "bfloat16"
  return c
