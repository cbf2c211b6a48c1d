"""What the checker and preparer extension registries share: one definition per type, and the
extension modules imported once, before any lookup."""
from __future__ import annotations

import importlib
from typing import Any, Iterable

_loaded: set[tuple[str, ...]] = set()


def add(registry: dict[str, Any], kind: str, type_name: str, ext: Any, builtin: Iterable[str]) -> None:
  if type_name in registry or type_name in set(builtin):
    raise ValueError(f"{kind} type {type_name!r} is defined twice")
  registry[type_name] = ext


def load_once(modules: tuple[str, ...]) -> None:
  if modules not in _loaded:  # marked after the imports: another thread never sees a half-filled registry
    for name in modules:
      importlib.import_module(name)
    _loaded.add(modules)
