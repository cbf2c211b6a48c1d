"""Build the learning proof's pretrained base (stage 0; configs/pretrain.py).

  python -m launch.pretrain --config=configs/pretrain.py --workdir=workdirs/proof_base
  python -m launch.pretrain --config=configs/pretrain.py:tiny --workdir=/tmp/base_tiny

Prints the probe curve as it goes; <workdir>/base.json holds the outcome (passed / failed, build
time, probe curve) and <workdir>/hf/ the base as a plain Qwen3 checkpoint. A build of the same
config and code already in the cache is reused at once.
"""
from __future__ import annotations

import json

from absl import app, flags
from ml_collections import config_flags

from launch import shell

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/pretrain.py[:tiny]", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the build is written.", required=True)


def main(argv):
  del argv
  from mage_jax.runs import proof_base
  info = proof_base.run(_CONFIG.value, _WORKDIR.value)
  print(json.dumps({k: v for k, v in info.items() if k != "curve"}, indent=1))


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main, flags_parser=shell.parse_flags)
