"""Our SFT train step on a Qwen3 LM, built from the project's own modules.

Model (`mage_jax.models.qwen3`), loss (`mage_jax.train.loss`, chunked CE),
optimizer (`mage_jax.train.optimizer`, AdamW) and step
(`mage_jax.train.step.jit_train_step`) are the ones training uses; this file
only wires them on a one-device mesh and builds synthetic batches. It imports
only jax/flax/optax/numpy, so the GPU suite uses it too.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from flax import nnx
import jax
from jax.sharding import Mesh
import numpy as np

from mage_jax.models.config import PAD_ID, Qwen3Config
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import state as state_lib
from mage_jax.train import step as step_lib

# The fixed "small" config (hidden 512, 4 layers, 8 q / 4 kv heads,
# head_dim 64, intermediate 1536, vocab 32,000, untied head, fp32).
SMALL = Qwen3Config(vocab_size=32_000, hidden_size=512, num_hidden_layers=4,
                    num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                    intermediate_size=1536, tie_word_embeddings=False)
TINY = Qwen3Config(vocab_size=1024, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128, tie_word_embeddings=False)


def one_device_mesh() -> Mesh:
  return Mesh(np.array(jax.devices()[:1]), ("data",))


def packed_batch(batch_size: int, seq_len: int, segment_lengths: Sequence[Sequence[int]] | None,
                 vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
  """A packed LM batch in the ARCHITECTURE.md layout (text keys only).

  `segment_lengths[r]` lists row r's segments; None = one full-length segment
  per row. Slots past the segments are padding (segment 0, pad token).
  """
  rng = np.random.default_rng(seed)
  lengths = segment_lengths or [[seq_len]] * batch_size
  if len(lengths) != batch_size:
    raise ValueError(f"segment_lengths has {len(lengths)} rows, batch_size is {batch_size}")
  tokens = np.full((batch_size, seq_len), PAD_ID % vocab, np.int32)
  targets = np.zeros((batch_size, seq_len), np.int32)
  mask = np.zeros((batch_size, seq_len), np.float32)
  segs = np.zeros((batch_size, seq_len), np.int32)
  pos = np.zeros((batch_size, seq_len), np.int32)
  for r, row in enumerate(lengths):
    if sum(row) > seq_len:
      raise ValueError(f"row {r}: segments {row} exceed seq_len {seq_len}")
    start = 0
    for s, n in enumerate(row):
      seg_tokens = rng.integers(0, vocab, n).astype(np.int32)
      tokens[r, start:start + n] = seg_tokens
      targets[r, start:start + n - 1] = seg_tokens[1:]
      mask[r, start:start + n - 1] = 1.0
      segs[r, start:start + n] = s + 1
      pos[r, start:start + n] = np.arange(n)
      start += n
  return {"tokens": tokens, "targets": targets, "loss_mask": mask, "segment_ids": segs,
          "positions": pos}


@dataclasses.dataclass
class StepRunner:
  """A jitted train step with its state threaded through calls (state is donated)."""
  step_fn: Callable[..., Any]
  state: Any
  batch: dict[str, Any]
  last_metrics: dict[str, Any] | None = None

  def __call__(self) -> Any:
    self.state, self.last_metrics = self.step_fn(self.state, self.batch)
    return self.last_metrics


def build_step(model_factory: Callable[[nnx.Rngs], nnx.Module], batch: dict[str, np.ndarray],
               *, loss_chunk_size: int = 1024, learning_rate: float = 1e-4,
               mesh: Mesh | None = None, objective: Any = None, grad_accum_steps: int = 1
               ) -> tuple[Callable[..., Any], Any, Any, dict]:
  """(jitted step, abstract state, state shardings, device batch) on a replicated mesh.
  `objective`: the step's objective (train.step; None = SFT cross-entropy)."""
  mesh = mesh or one_device_mesh()
  ocfg = opt_lib.OptimizerConfig(learning_rate=learning_rate, warmup_steps=0, total_steps=1000,
                                 weight_decay=0.1, clip_norm=1.0)
  abstract_model = nnx.eval_shape(lambda: model_factory(nnx.Rngs(0)))
  _, abstract_params, _ = state_lib.split_model(abstract_model)
  tx = opt_lib.make_optimizer(ocfg, abstract_params)
  graphdef, rest, abstract = state_lib.abstract_state(model_factory, tx)
  rep = state_lib.replicated(mesh)
  param_sh = jax.tree_util.tree_map(lambda _: rep, abstract.params)
  shardings = state_lib.state_shardings(tx, abstract, param_sh, mesh)
  scfg = step_lib.StepConfig(loss_chunk_size=loss_chunk_size, grad_accum_steps=grad_accum_steps)
  step_fn = step_lib.jit_train_step(graphdef, rest, tx, scfg, mesh, shardings, batch,
                                    objective=objective)
  device_batch = jax.device_put(batch, step_lib.batch_shardings(mesh, batch))
  return step_fn, (model_factory, tx, shardings), abstract, device_batch


def make_runner(model_factory: Callable[[nnx.Rngs], nnx.Module], batch: dict[str, np.ndarray],
                **kwargs: Any) -> StepRunner:
  step_fn, (factory, tx, shardings), _, device_batch = build_step(model_factory, batch, **kwargs)
  state, _ = state_lib.init_state(factory, tx, seed=0, shardings=shardings)
  return StepRunner(step_fn=step_fn, state=state, batch=device_batch)


def qwen3_factory(cfg: Qwen3Config) -> Callable[[nnx.Rngs], nnx.Module]:
  from mage_jax.models.qwen3 import Qwen3ForCausalLM   # the bare GPU image runs this module: each path imports only what it needs
  return lambda rngs: Qwen3ForCausalLM(cfg, rngs=rngs)
