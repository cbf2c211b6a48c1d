"""Rematerialisation policies by name (config `remat_policy`).

- "none": no remat; every activation of the block is kept for backward.
- "full": keep only the block input; recompute the whole block in backward.
- "dots": keep matmul outputs (`checkpoint_dots`), recompute elementwise ops.
- "dots_no_batch": keep matmul outputs without batch dims (weights x activations),
  recompute attention's batched einsums.
- "save_attn_out": keep only tensors tagged `attn_out` (the attention output
  before o_proj), recompute the rest.
"""
from __future__ import annotations

from typing import Callable

import jax
from jax.ad_checkpoint import checkpoint_name

ATTN_OUT = "attn_out"


def checkpoint_policy(name: str) -> Callable | None:
  """The jax.checkpoint policy for `name` (None = save nothing). 'none' is handled by callers."""
  policies = jax.checkpoint_policies
  table = {
      "full": None,
      "dots": policies.checkpoint_dots,
      "dots_no_batch": policies.dots_with_no_batch_dims_saveable,
      "save_attn_out": policies.save_only_these_names(ATTN_OUT),
  }
  if name not in table:
    raise ValueError(f"remat_policy={name!r} has no checkpoint policy; one of {sorted(table)} or 'none'")
  return table[name]


def tag_attn_out(x: jax.Array) -> jax.Array:
  return checkpoint_name(x, ATTN_OUT)
