"""The teacher's harness as configuration (variant.py), its terminal environment (env.py), extra
tools (extra_tools.py), scripted teachers (teacher.py) and the collection loop (collect.py)."""
from __future__ import annotations

import importlib.util
import json
import os

from mage_jax.harness.variant import HarnessVariant, VariantError


def load_variant(spec: str) -> HarnessVariant:
  """`configs/harness.py:<arg>` (a get_config file) or a `.json` file -> a validated variant."""
  if spec.endswith(".json"):
    with open(spec, encoding="utf-8") as f:
      return HarnessVariant.from_dict(json.load(f), where=spec)
  path, _, arg = spec.partition(":")
  if not os.path.isfile(path):
    raise VariantError(f"harness {spec!r}: {path} is not a file (expected configs/harness.py:<arg> or a .json)")
  mod_spec = importlib.util.spec_from_file_location("_harness_config", path)
  mod = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(mod)
  cfg = mod.get_config(arg or None)
  return HarnessVariant.from_dict(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg), where=spec)
