"""RL batches: policy calls (prompt + completion + engine log-probs) packed into
the fixed-shape layout of docs/ARCHITECTURE.md plus the RL fields.

One RLSample = one policy call of one episode = one packed segment. Inside a
segment, slot i predicts token i+1 (`targets`); `loss_mask` is 1 exactly where
that target is a completion token (what the policy generated), and
`logp_rollout` / `advantages` sit on the same slots: slot prompt_len-1+k holds
the engine's log-prob of completion token k and the sample's advantage.
`logp_old` is zero here; the learner fills it (objective.token_logprobs)
before the update. All RL fields are 0 where loss_mask is 0.

Samples are placed by data/packing.py's best-fit-decreasing; bins beyond
`rows` are left out (their sample indices are reported so a caller can carry
them over). A sample longer than seq_len loses prompt tokens from the left
when its completion still fits after at least one prompt token; otherwise it
is skipped and counted. Note that a left-truncated prompt is not the context
the engine sampled under, so logp_old departs from logp_rollout there; the
truncated importance weight bounds what that can do.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from mage_jax.data.packing import assemble_from_parts, best_fit_decreasing, empty_bins
from mage_jax.models.config import PAD_ID

TEXT_KEYS = ("tokens", "targets", "loss_mask", "segment_ids", "positions")
RL_KEYS = ("logp_rollout", "advantages", "logp_old")


@dataclasses.dataclass
class RLSample:
  """One policy call of one episode (one packed segment)."""
  prompt_ids: list[int]
  completion_ids: list[int]
  rollout_logprobs: list[float]   # engine log-prob of each completion token
  advantage: float
  version: int                    # policy version that generated it
  task_id: str = ""
  episode_id: str = ""

  def name(self, index: int) -> str:
    return f"RLSample #{index} (task_id={self.task_id!r}, episode_id={self.episode_id!r})"


def _check(sample: RLSample, index: int) -> None:
  """Errors a caller must fix (a broken rollout record), naming the sample."""
  if len(sample.rollout_logprobs) != len(sample.completion_ids):
    raise ValueError(f"{sample.name(index)}: {len(sample.rollout_logprobs)} rollout_logprobs for "
                     f"{len(sample.completion_ids)} completion_ids; they must align one to one")
  if not sample.prompt_ids:
    raise ValueError(f"{sample.name(index)}: empty prompt_ids (the first completion token "
                     "needs a preceding token to be predicted from)")
  if not math.isfinite(float(sample.advantage)):
    raise ValueError(f"{sample.name(index)}: advantage {sample.advantage} is not finite")


def pack_rl_batch(samples: Sequence[RLSample], *, rows: int, seq_len: int,
                  pad_id: int = PAD_ID) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """Best-fit pack `samples` into `rows` rows of `seq_len` slots.

  Returns (batch, report). batch: TEXT_KEYS + RL_KEYS, all [rows, seq_len]
  (int32 ids/positions, float32 mask and RL fields). pad_id fills padding
  slots (a tiny test model with a small vocabulary passes an id it has).
  report: packed, truncated_prompt, skipped (reason -> count),
  skipped_too_long, left_out (packed nowhere for lack of rows),
  left_out_indices, row_samples (sample indices per row), policy_tokens, fill.
  """
  if rows < 1 or seq_len < 2:
    raise ValueError(f"pack_rl_batch needs rows >= 1 and seq_len >= 2, got rows={rows}, "
                     f"seq_len={seq_len}")
  skipped: collections.Counter[str] = collections.Counter()
  truncated = 0
  kept: list[int] = []
  prompts: dict[int, np.ndarray] = {}
  for i, s in enumerate(samples):
    _check(s, i)
    completion = len(s.completion_ids)
    if completion == 0:
      skipped["empty_completion"] += 1
      continue
    if not np.all(np.isfinite(np.asarray(s.rollout_logprobs, np.float64))):
      skipped["nonfinite_rollout_logprobs"] += 1
      continue
    prompt = np.asarray(s.prompt_ids, np.int32)
    if len(prompt) + completion > seq_len:
      if completion >= seq_len:  # not even one prompt token would remain
        skipped["too_long"] += 1
        continue
      prompt = prompt[len(prompt) + completion - seq_len:]
      truncated += 1
    prompts[i] = prompt
    kept.append(i)

  lengths = [len(prompts[i]) + len(samples[i].completion_ids) for i in kept]
  bins = best_fit_decreasing(lengths, [0] * len(kept), seq_len, 0)
  row_samples = [[kept[j] for j in b] for b in bins[:rows]]
  left_out = sorted(kept[j] for b in bins[rows:] for j in b)

  out = empty_bins(rows, seq_len, 0)
  batch = {k: out[k] for k in TEXT_KEYS}
  batch.update({k: np.zeros((rows, seq_len), np.float32) for k in RL_KEYS})
  for r, members in enumerate(row_samples):
    _fill_row(r, [samples[i] for i in members], [prompts[i] for i in members], out, batch,
              seq_len)
  batch["tokens"][batch["segment_ids"] == 0] = pad_id

  packed = sum(len(m) for m in row_samples)
  tokens_used = int((batch["segment_ids"] > 0).sum())
  report = dict(
      packed=packed, truncated_prompt=truncated, skipped=dict(skipped),
      skipped_too_long=skipped["too_long"], left_out=len(left_out),
      left_out_indices=left_out, row_samples=row_samples,
      policy_tokens=int(batch["loss_mask"].sum()), fill=tokens_used / (rows * seq_len))
  return batch, report


def _fill_row(r: int, members: Sequence[RLSample], prompts: Sequence[np.ndarray],
              out: dict[str, np.ndarray], batch: dict[str, np.ndarray], seq_len: int) -> None:
  """Row r: the packed layout via packing.assemble_from_parts (label = completion token),
  then the engine log-probs and advantages on the slots that predict completion tokens."""
  tokens = np.concatenate([np.concatenate([p, np.asarray(s.completion_ids, np.int32)])
                           for s, p in zip(members, prompts)])
  labels = np.concatenate([np.concatenate([np.zeros(len(p), np.uint8),
                                           np.ones(len(s.completion_ids), np.uint8)])
                           for s, p in zip(members, prompts)])
  seg_lens = np.array([len(p) + len(s.completion_ids) for s, p in zip(members, prompts)],
                      np.int64)
  assemble_from_parts(tokens, labels, seg_lens, np.zeros(len(members), np.int32),
                      np.zeros((0, 768), np.uint8), np.zeros((0, 3), np.int32),
                      np.zeros(0, np.int64), seq_len, 0, out={k: v[r] for k, v in out.items()})
  start = 0
  for s, p in zip(members, prompts):
    first = start + len(p) - 1           # slot whose target is completion token 0
    n = len(s.completion_ids)
    batch["logp_rollout"][r, first:first + n] = np.asarray(s.rollout_logprobs, np.float32)
    batch["advantages"][r, first:first + n] = float(s.advantage)
    start += len(p) + n
