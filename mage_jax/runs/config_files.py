"""Config files by path: what launch's --config flag and the curriculum's stage list load."""
from __future__ import annotations

import importlib.util
import os

# A relative path is tried from the working directory, then from the checkout this package sits in
# (mage_jax/..), so `configs/proof.py` works from anywhere inside a source checkout.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_config_module(path: str):
  """Import a config file (absolute, or relative to the working directory or the checkout)."""
  candidates = [path] if os.path.isabs(path) else [os.path.abspath(path), os.path.join(_CHECKOUT, path)]
  full = next((c for c in candidates if os.path.exists(c)), None)
  if full is None:
    raise FileNotFoundError(f"config file {path} does not exist (looked in {', '.join(candidates)})")
  spec = importlib.util.spec_from_file_location(os.path.basename(full)[:-3], full)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod
