"""Learner -> rollout engine weight sync from disk, with a live-weights check (DESIGN.md
"Weight sync to vLLM").

    report = sync_weights(client, state.params, model_cfg, out_root=f"{workdir}/sync",
                          version=step, probe_tokens=probe, learner_logprobs_fn=logp_fn)

1. export bf16 HF safetensors (`weights.hf.save_hf`) to `<out_root>/v<version>` (written
   under a temporary name and renamed, so the engine never reads a half-written dir);
2. pause (in-flight requests finish) -> reload_weights -> reset_prefix_cache ->
   update_weight_version("<version>") -> resume (resume runs even when the reload fails,
   so the engine is never left paused);
3. verify: the served version label (GET /weight_info, vLLM >= 0.29 and the embedded
   server; skipped where there is no such route), the served path (embedded server only),
   and a greedy probe completion of `probe_tokens`, whose per-token log-probs must match
   `learner_logprobs_fn(probe_tokens + completion)` within `tolerance` (max abs);
4. prune exports so that the newest `keep` remain.

`learner_logprobs_fn(tokens)` returns per-position log-probs of a token list: either
log p(tokens[t+1] | tokens[:t+1]) for t < T-1 (the packed batch's target layout) or
one entry per token; only the last len(completion) entries are compared, which are
the completion tokens' log-probs in both layouts. `model_logprobs_fn` builds one from
an nnx model.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from typing import Any, Callable, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from mage_jax import api
from mage_jax.engine.rollout_client import RolloutClient, RolloutError
from mage_jax.weights import hf

_VERSION_DIR = re.compile(r"^v(\d+)$")


@dataclasses.dataclass
class SyncReport:
  version: int
  path: str
  seconds: float
  probe_max_abs_diff: float | None  # None: the probe was skipped (sync_weights(probe=False))
  served_label: str | None = None   # GET /weight_info after the sync; None: no such route


class WeightSyncError(RuntimeError):
  """The engine did not take the new weights (reload failed, or it serves stale ones)."""


def model_logprobs_fn(model: Any, cfg: Any, *, export_dtype: str | None = "bfloat16", vocab: Any = None
                      ) -> Callable[[Sequence[int]], np.ndarray]:
  """tokens -> [T-1] fp32 log p(tokens[t+1] | tokens[:t+1]) from the model's forward (api.Policy.logits).

  With a compact `vocab` (models/compact_vocab.py; `model` on its rows), the tokens are full ids:
  they are mapped to rows, and an id outside the vocabulary gets its rest row's log-prob less
  log rest_ids, i.e. the expanded model's log-prob, which the engine serves. So the probe checks
  the compact learner itself against the engine, not an expansion of it.

  With `export_dtype`, the forward uses the parameters rounded to that dtype, i.e. the
  weights `export` hands the engine, not the fp32 master copy: one small update can
  leave the bf16 weights nearly unchanged, so only a reference computed from the
  exported values lets a tight tolerance tell fresh engine weights from stale ones
  (the embedded server then matches to ~1e-5; an engine computing in bf16 needs a
  looser tolerance, and so cannot see very small updates). Costs one parameter copy.
  """
  if export_dtype is not None:
    graphdef, state = nnx.split(model)
    rounded = jax.tree_util.tree_map(
        lambda x: x.astype(export_dtype).astype(x.dtype)
        if jnp.issubdtype(x.dtype, jnp.floating) else x, state)
    model = nnx.merge(graphdef, rounded)
  policy = api.Policy(cfg=cfg, model=model)

  def fn(tokens: Sequence[int]) -> np.ndarray:
    rows = np.asarray(tokens, np.int64) if vocab is None else vocab.to_compact(tokens, strict=False)
    logits = policy.logits(rows).astype(np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    targets = np.asarray(rows[1:], np.int64)
    out = logp[np.arange(len(targets)), targets]
    if vocab is not None:
      out = out - np.where(targets == vocab.rest_row, np.log(vocab.rest_ids), 0.0)
    return out.astype(np.float32)

  return fn


def export(model_or_state: Any, model_cfg: Any, out_root: str, version: int) -> str:
  """bf16 HF directory at <out_root>/v<version>, renamed into place once complete."""
  final = os.path.join(os.path.abspath(out_root), f"v{version}")
  tmp = final + ".partial"
  shutil.rmtree(tmp, ignore_errors=True)
  hf.save_hf(model_or_state, model_cfg, tmp, dtype="bfloat16")
  shutil.rmtree(final, ignore_errors=True)
  os.replace(tmp, final)
  return final


def prune(out_root: str, keep: int) -> list[str]:
  """Delete all but the newest `keep` v<N> exports; returns the removed paths."""
  versions = sorted((int(m.group(1)), name) for name in os.listdir(out_root)
                    if (m := _VERSION_DIR.match(name)) and os.path.isdir(os.path.join(out_root, name)))
  removed = []
  for _, name in versions[:max(0, len(versions) - max(keep, 1))]:
    path = os.path.join(out_root, name)
    shutil.rmtree(path, ignore_errors=True)
    removed.append(path)
  return removed


def probe_diff(client: RolloutClient, probe_tokens: Sequence[int], learner_logprobs_fn,
               max_tokens: int) -> float:
  """Max |engine - learner| log-prob over a greedy probe completion's tokens."""
  probe = [int(t) for t in probe_tokens]
  c = client.complete(probe, max_tokens=max_tokens, temperature=0.0)
  if not c.token_ids:
    raise WeightSyncError(f"{client.base_url}: the probe completion is empty")
  learner = np.asarray(learner_logprobs_fn(probe + c.token_ids), np.float64).reshape(-1)
  n = len(c.token_ids)
  if learner.size < n:
    raise WeightSyncError(f"learner_logprobs_fn returned {learner.size} log-probs for "
                          f"{len(probe) + n} tokens; need at least the {n} completion tokens")
  return float(np.max(np.abs(learner[-n:] - np.asarray(c.logprobs, np.float64))))


def _probe_failure_cause(diff: float, tolerance: float) -> str:
  if not diff == diff:
    return "non-finite log-probs (engine or learner)"
  if diff > 1.0:
    return ("the engine serves other weights than the export: a failed, ignored or partial reload "
            "(for example vLLM's in-place reload of a tied-embedding model from a directory without "
            "lm_head.weight keeps the old head: docs/rl.md \"Tied embeddings\")")
  return ("the engine computes in lower precision than the tolerance allows (a bf16 engine needs ~0.05: "
          "widen config.rl.sync_tolerance), or it still serves the previous, nearby weights")


def sync_weights(client: RolloutClient, model_or_state, model_cfg, *, out_root: str, version: int,
                 probe_tokens: list[int], learner_logprobs_fn, tolerance: float = 0.05,
                 keep: int = 2, probe_max_tokens: int = 8, probe: bool = True) -> SyncReport:
  """Export, reload, verify (module docstring). `probe=False` skips step 3's log-prob probe:
  only for a run that chose so explicitly (config.rl.sync_probe, recorded in its manifest)."""
  start = time.perf_counter()
  os.makedirs(out_root, exist_ok=True)
  path = export(model_or_state, model_cfg, out_root, version)
  try:
    client.pause()
    try:
      client.reload_weights(path)
      client.reset_prefix_cache()
      client.update_weight_version(str(version))
    finally:
      client.resume()
    label = client.weight_version()
  except RolloutError as e:
    raise WeightSyncError(f"sync v{version} ({path}): {e}") from e
  if label is not None and label != str(version):
    raise WeightSyncError(f"sync v{version}: {client.root_url}/weight_info says the engine serves "
                          f"weight_version {label!r}, not {str(version)!r}")
  served = client.served_weights()
  if served is not None and os.path.abspath(served) != path:
    raise WeightSyncError(f"sync v{version}: the engine serves {served}, not {path}")
  diff = None
  if probe:
    diff = probe_diff(client, probe_tokens, learner_logprobs_fn, probe_max_tokens)
    if not diff <= tolerance:  # NaN fails too
      raise WeightSyncError(
          f"sync v{version}: post-sync probe failed: max |engine - learner| log-prob {diff:.4g} > "
          f"tolerance {tolerance:g}, over the greedy completion of the {len(probe_tokens)}-token probe "
          f"prompt on {client.base_url}; likely cause: {_probe_failure_cause(diff, tolerance)}")
  prune(out_root, keep)
  return SyncReport(version=version, path=path, seconds=time.perf_counter() - start,
                    probe_max_abs_diff=diff, served_label=label)
