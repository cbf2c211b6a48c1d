"""JAX APIs that move between the releases this project runs on.

The project is tested on jax 0.10.2; the GPU device image carries jax 0.11.x. Every use of
an API that has moved or may move goes through here, so a move breaks one guarded place
with a clear error instead of an import anywhere in the model code.

- `triton()`: `jax.experimental.pallas.triton` (the Pallas GPU dialect), imported lazily
  and on failure reported only when a GPU kernel is built, never at import;
- `triton_compiler_params(**kw)`: `CompilerParams` (newer) or `TritonCompilerParams` (older);
- `is_traced(x)`: whether x is a tracer (`jax.core.Tracer` where it exists, else by the
  public concretization error).
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

try:
  from jax.experimental.pallas import triton as _triton
  _TRITON_ERROR = ""
except ImportError as e:  # pragma: no cover - depends on the installed jax
  _triton, _TRITON_ERROR = None, f"{type(e).__name__}: {e}"

_TRACER = getattr(jax.core, "Tracer", None)


def triton() -> Any:
  """The pallas triton module; NotImplementedError (with the import error) when absent."""
  if _triton is None:
    raise NotImplementedError(f"jax {jax.__version__} has no jax.experimental.pallas.triton "
                              f"({_TRITON_ERROR}); use attention backend 'xla'")
  return _triton


def triton_compiler_params(**kw: Any) -> Any:
  tri = triton()
  cls = getattr(tri, "CompilerParams", None) or getattr(tri, "TritonCompilerParams", None)
  if cls is None:
    raise NotImplementedError(f"jax {jax.__version__}: pallas.triton has neither CompilerParams "
                              "nor TritonCompilerParams")
  return cls(**kw)


def concrete(x: Any) -> np.ndarray | None:
  """x as numpy, or None when it is traced."""
  try:
    return np.asarray(x)
  except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
    return None


def is_traced(x: Any) -> bool:
  if _TRACER is not None:
    return isinstance(x, _TRACER)
  return isinstance(x, jax.Array) and concrete(x) is None  # pragma: no cover - newer jax
