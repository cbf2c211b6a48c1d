"""Convert model weights between an HF safetensors directory and an Orbax checkpoint.

    python -m launch.convert --src=/ckpt/Mage-VL --dst=/ckpt/mage_vl_orbax
    python -m launch.convert --src=/ckpt/mage_vl_orbax --dst=/ckpt/export --dtype=bfloat16

The direction is inferred from --src (a dir with config.json and *.safetensors
is HF; a dir with params/ from mage_jax.weights.orbax_io is Orbax) unless
--direction is given. config.json decides the architecture (Qwen3ForCausalLM
or MageVLForConditionalGeneration). A tqdm bar counts tensors.
"""
from __future__ import annotations

import os
import sys

from absl import app, flags

_DIRECTION = flags.DEFINE_enum("direction", None, ["hf_to_orbax", "orbax_to_hf"],
                               "Conversion direction (default: inferred from --src).")
_SRC = flags.DEFINE_string("src", None, "Source HF directory or Orbax checkpoint.", required=True)
_DST = flags.DEFINE_string("dst", None, "Destination directory.", required=True)
_DTYPE = flags.DEFINE_string(
    "dtype", None, "hf_to_orbax: stored param dtype (default float32); "
    "orbax_to_hf: exported tensor dtype (default bfloat16).")
_MAX_SHARD_GB = flags.DEFINE_float("max_shard_gb", 5.0, "orbax_to_hf: max size of one shard (GB).")
_TEMPLATE = flags.DEFINE_string(
    "template_dir", None, "orbax_to_hf: a published HF checkpoint dir whose other non-weight "
    "files (remote code, README, ...) are copied into --dst.")


def infer_direction(src: str) -> str:
  from mage_jax.weights import orbax_io
  if not os.path.isdir(src):
    raise ValueError(f"--src={src}: not a directory")
  if os.path.isdir(os.path.join(src, orbax_io.PARAMS_DIR)):
    return "orbax_to_hf"
  if any(f.endswith(".safetensors") for f in os.listdir(src)):
    return "hf_to_orbax"
  raise ValueError(f"--src={src}: neither an HF directory (*.safetensors) nor an Orbax "
                   f"checkpoint ({orbax_io.PARAMS_DIR}/); pass --direction")


def main(argv):
  del argv
  from mage_jax.weights import hf, orbax_io
  src, dst = _SRC.value, _DST.value
  try:
    direction = _DIRECTION.value or infer_direction(src)
    if direction == "hf_to_orbax":
      cfg = orbax_io.hf_to_orbax(src, dst, param_dtype=_DTYPE.value or "float32", progress=True)
    else:
      cfg = orbax_io.orbax_to_hf(src, dst, dtype=_DTYPE.value or "bfloat16", progress=True,
                                 max_shard_bytes=int(_MAX_SHARD_GB.value * 1e9),
                                 template_dir=_TEMPLATE.value)
  except (ValueError, KeyError, OSError) as e:  # bad or damaged input: one line, no traceback
    print(f"convert: {e}", file=sys.stderr)
    sys.exit(2)
  print(f"convert: {direction} {hf.architecture(cfg)} {src} -> {dst}")


if __name__ == "__main__":
  app.run(main)
