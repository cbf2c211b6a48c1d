"""RL figures for the CPU suite: one GRPO update next to one SFT step, same model and batch.

An RL update (stage 5) is one optimizer step per batch, so logp_old is the update's own
forward under stop_gradient (`rl_objective(..., logp_old_in_update=True)`, what `rl.loop`
runs): it should cost one SFT step plus the GRPO arithmetic (goal <= 1.05x). The path with a
separate logp_old forward (`make_logp_fn`, for callers taking several steps per batch) is
timed next to it (~4/3 of the step), and so is the update padded to twice its micro-batches
(the padding ones skipped: goal <= 1.15x the update alone). All are measured side by side in
one interleaved loop, like every other row.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mage_jax.bench import lm_step, timing
from mage_jax.bench.results import Row
from mage_jax.models.config import Qwen3Config

CMD = "python -m launch.bench --suite=cpu"


def rl_batch(batch: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
  """The SFT batch with the RL fields: every trained token is a policy token; advantage ±1
  per row; engine log-probs near the model's (a random init is near uniform)."""
  rng = np.random.default_rng(seed)
  mask = batch["loss_mask"]
  vocab_logp = -np.log(float(batch["tokens"].max()) + 1.0)
  out = dict(batch)
  out["advantages"] = (np.where(np.arange(mask.shape[0]) % 2, 1.0, -1.0)[:, None] * mask
                       ).astype(np.float32)
  out["logp_rollout"] = ((vocab_logp + 0.05 * rng.standard_normal(mask.shape)) * mask
                         ).astype(np.float32)
  out["logp_old"] = np.zeros_like(mask)
  return out


def rl_update_vs_sft(cfg: Qwen3Config, *, batch_size: int, seq_len: int, reps: int,
                     loss_chunk_size: int = 1024) -> tuple[list[Row], dict[str, Any]]:
  from flax import nnx   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.rl import objective as obj_lib   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.train import state as state_lib   # the bare GPU image runs this module: each path imports only what it needs
  factory = lm_step.qwen3_factory(cfg)
  sft_batch = lm_step.packed_batch(batch_size, seq_len, None, cfg.vocab_size)
  batch = rl_batch(sft_batch)
  loss_cfg = obj_lib.RLLossConfig()
  sft = lm_step.make_runner(factory, sft_batch, loss_chunk_size=loss_chunk_size)
  rl = lm_step.make_runner(factory, batch, loss_chunk_size=loss_chunk_size,
                           objective=obj_lib.rl_objective(loss_cfg, loss_chunk_size,
                                                          logp_old_in_update=True))
  separate = lm_step.make_runner(factory, batch, loss_chunk_size=loss_chunk_size,
                                 objective=obj_lib.rl_objective(loss_cfg, loss_chunk_size))
  graphdef, _, rest = state_lib.split_model(factory(nnx.Rngs(0)))
  logp_fn = obj_lib.make_logp_fn(graphdef, rest, loss_chunk_size)

  def separate_update():
    separate.batch["logp_old"] = logp_fn(separate.state.params, separate.batch)
    return separate()

  # The same update as an RL update's power-of-two batch with half its micro-batches padding
  # (rl.batch.pack_rl_update puts the bins first; train.step skips micro-batches with no trained
  # token): rows [b0, pad, b1, pad, ...] in 2 micro-batches, micro 0 = the batch, micro 1 = padding.
  padded = {k: np.stack([x for row in v for x in (row, np.zeros_like(row))]) for k, v in batch.items()}
  rl_padded = lm_step.make_runner(factory, padded, loss_chunk_size=loss_chunk_size, grad_accum_steps=2,
                                  objective=obj_lib.rl_objective(loss_cfg, loss_chunk_size,
                                                                 logp_old_in_update=True))
  times = timing.interleaved({"sft_step": sft, "rl_update": rl,
                              "rl_update_separate_logp_old": separate_update,
                              "rl_update_half_padding": rl_padded},
                             reps=reps, warmup=1)
  med = {k: t.median_s for k, t in times.items()}
  m = {k: float(np.asarray(v)) for k, v in rl.last_metrics.items()}
  details = {"timings": {k: t.as_dict() for k, t in times.items()}, "rl_metrics": m,
             "rl_metrics_separate_logp_old": {k: float(np.asarray(v))
                                              for k, v in separate.last_metrics.items()},
             "rl_metrics_half_padding": {k: float(np.asarray(v)) for k, v in rl_padded.last_metrics.items()},
             "batch_size": batch_size, "seq_len": seq_len}
  ratio = med["rl_update"] / med["sft_step"]
  rows = [
      Row("RL: GRPO update (logp_old from the update's forward, median)", med["rl_update"], "s",
          command=CMD, note=f"{batch_size}x{seq_len} tokens, same model as the SFT step; "
                            f"{times['rl_update'].cpu_median_s:.3g} CPU-s"),
      Row("RL: update / SFT step", ratio, "x", goal="<= 1.05", met=bool(ratio <= 1.05),
          command=CMD, note="one optimizer step per batch, as rl.loop runs it"),
      Row("RL: update with a separate logp_old forward / SFT step",
          med["rl_update_separate_logp_old"] / med["sft_step"], "x", command=CMD,
          note="the path for several steps per batch; expected ~4/3"),
      Row("RL: update with as many padding micro-batches as live ones / the update alone",
          med["rl_update_half_padding"] / med["rl_update"], "x", goal="<= 1.15",
          met=bool(med["rl_update_half_padding"] / med["rl_update"] <= 1.15), command=CMD,
          note="padding micro-batches are skipped (computed, it would be ~2x)"),
  ]
  return rows, details
