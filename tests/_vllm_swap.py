"""The weight-swap check every real-vLLM configuration runs (untied Qwen3: test_vllm_real, tied
Qwen3: test_vllm_tied, tied Mage-VL: test_vllm_mage_vl), against an independent reference: the
NumPy forward of tests/_qwen3_reference.py on the directory the engine was given, read from disk.

On one running server: the initial load, a one-step update (a 2e-3 sign step on every weight,
about one Adam step) and a full swap to an unrelated checkpoint, the last two through the RL
loop's own path (`weight_sync.sync_weights`: bf16 export, pause, reload_weights,
reset_prefix_cache, resume, probe). Each time the engine's sampled-token log-probs must equal
the reference's within `tol`, while the reference of the checkpoint before moves them by far
more than `tol` (the check can tell the two apart).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from tests import _qwen3_reference as reference

PROMPT = [int(t) for t in np.random.default_rng(17).integers(0, 151_643, 24)]
STEP = 2e-3


def peaked(model):
  """Scale the final norm x20 so next-token distributions are far from uniform (a plain random
  init gives about -11.9 everywhere). Not the embedding: with a tied head that would make every
  token predict itself, and two checkpoints would then give the same log-probs."""
  body = model.language_model if hasattr(model, "language_model") else model.model
  body.norm.scale[...] = body.norm.scale[...] * 20.0
  return model


def serve(client, path: str) -> None:
  """Reload `path` the way the sync does (pause, reload_weights, reset_prefix_cache, resume)."""
  client.pause()
  try:
    client.reload_weights(path)
    client.reset_prefix_cache()
  finally:
    client.resume()


def sample(client):
  """Temperature-1 completion of PROMPT (the RL setting), fixed seed."""
  return client.complete(PROMPT, max_tokens=8, temperature=1.0, seed=3)


@dataclasses.dataclass
class Served:
  directory: str
  config: dict
  tensors: dict

  @classmethod
  def read(cls, directory: str) -> "Served":
    return cls(directory, *reference.read_hf_dir(directory))

  def logprobs(self, completion) -> np.ndarray:
    return reference.completion_logprobs(self.tensors, self.config, PROMPT, completion.token_ids)


def diff(completion, served: Served) -> float:
  return float(np.max(np.abs(served.logprobs(completion) - np.asarray(completion.logprobs))))


def one_step(model):
  """`model` plus a 2e-3 sign step on every weight (a new object; `model` is unchanged)."""
  import jax
  from flax import nnx
  graphdef, state = nnx.split(model)
  keys = iter(jax.random.split(jax.random.key(3), len(jax.tree_util.tree_leaves(state))))
  stepped = jax.tree_util.tree_map(lambda x: x + STEP * jax.numpy.sign(jax.random.normal(next(keys), x.shape)),
                                   state)
  return nnx.merge(graphdef, stepped)


def sync(client, model, cfg, out_root: str, version: int, tol: float):
  """The RL loop's sync (weight_sync.sync_weights with its probe at `tol`) -> what it exported."""
  from mage_jax.engine.weight_sync import model_logprobs_fn, sync_weights
  report = sync_weights(client, model, cfg, out_root=out_root, version=version, probe_tokens=PROMPT,
                        learner_logprobs_fn=model_logprobs_fn(model, cfg), tolerance=tol)
  assert report.probe_max_abs_diff <= tol
  return Served.read(report.path)


def check_swaps(client, cfg, start_dir: str, first, unrelated, out_root: str, tol: float) -> dict:
  """Initial load (`first`: the server's first completion, None to skip), one-step update,
  full swap to `unrelated` (an nnx model of the same shape). Returns the figures."""
  from mage_jax import api
  figures = {}
  start = Served.read(start_dir)
  if first is not None:
    figures["initial"] = diff(first, start)
    assert figures["initial"] <= tol, figures
  stepped = sync(client, one_step(api.load(start_dir).model), cfg, out_root, 1, tol)
  c = sample(client)
  figures["one_step"], figures["one_step_vs_start"] = diff(c, stepped), diff(c, start)
  assert figures["one_step"] <= tol < 10 * tol < figures["one_step_vs_start"], figures
  swapped = sync(client, unrelated, cfg, out_root, 2, tol)
  c = sample(client)
  figures["swap"], figures["swap_vs_before"] = diff(c, swapped), diff(c, stepped)
  assert figures["swap"] <= tol and figures["swap_vs_before"] > 1.0, figures
  print(f"[vllm swap] {os.path.basename(start_dir)}: max |engine - reference| log-prob "
        + ", ".join(f"{k} {v:.2e}" for k, v in figures.items()), flush=True)
  return figures
