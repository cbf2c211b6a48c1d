"""RL batches: policy calls (prompt + completion + engine log-probs) packed into
the fixed-shape layout of docs/ARCHITECTURE.md plus the RL fields.

One RLSample = one policy call of one episode = one packed segment. Inside a
segment, slot i predicts token i+1 (`targets`); `loss_mask` is 1 exactly where
that target is a completion token (what the policy generated), and
`logp_rollout` / `advantages` sit on the same slots: slot prompt_len-1+k holds
the engine's log-prob of completion token k and the sample's advantage.
`logp_old` is zero here; the learner fills it (objective.token_logprobs)
before the update. `entropy_weight` is 1 on the completion slots of a call the harness parsed
and 0 on an unparsable one's: the entropy term (rl.entropy_coeff) acts only where it is 1.
All RL fields are 0 where loss_mask is 0.

GUI / hybrid samples carry their screenshots (`images`, smart-resized, in the
order of the prompt's image blocks; the prompt holds the engine's expanded
`<|image_pad|>` run per image). They are packed exactly as SFT bins are: a
sample becomes a data.packing.Segment (to_segment: patchify, pad-count check,
patch budget), bins respect both budgets (tokens, `patch_budget` patches) and
rows are assembled by data.packing.assemble_from_parts, so the batch carries
`patches`, `patch_image_ids`, `patch_positions` in the SFT layout and the
learner's forward is Mage-VL's. A batch has those keys when a sample has images
(or `image_keys=True`: the loop asks for them always when GUI tasks are on, so
every batch has one shape); text-only batches keep the text layout.

Samples are placed by data/packing.py's best-fit-decreasing; bins beyond
`rows` are left out (their sample indices are reported so a caller can carry
them over). A sample longer than seq_len loses prompt tokens from the left
when its completion still fits after at least one prompt token and the cut
removes no image token; otherwise it is skipped and counted. Note that a left-truncated prompt is not the context
the engine sampled under, so logp_old departs from logp_rollout there; the
truncated importance weight bounds what that can do.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from mage_jax.data.packing import (SkipSample, assemble_from_parts, best_fit_decreasing,
                                   concat_segments, empty_bins, to_segment)
from mage_jax.data.render import Sample
from mage_jax.models.config import IMAGE_PAD_ID, PAD_ID, VISION_START_ID

TEXT_KEYS = ("tokens", "targets", "loss_mask", "segment_ids", "positions")
IMAGE_KEYS = ("patches", "patch_image_ids", "patch_positions")
RL_KEYS = ("logp_rollout", "advantages", "logp_old", "entropy_weight")


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
  # Screenshots of the prompt (uint8 [H, W, 3], smart-resized, in prompt order); None: text only.
  images: list[np.ndarray] | None = None
  # The harness parsed the call into an action (False: a parse error, a step with no action;
  # the learner never reinforces it: rl/loop.py samples_with_advantages keeps its advantage <= 0
  # and the batch's entropy_weight keeps the entropy term off its tokens).
  parsed: bool = True
  # Per completion token advantages (rl.credit "prefix_tree", rl/credit.py); None: every token
  # gets `advantage`. When set, `advantage` is the episode's, for reports only.
  token_advantages: np.ndarray | None = None

  def has_gradient(self) -> bool:
    if self.token_advantages is not None:
      return bool(np.any(self.token_advantages != 0.0))
    return self.advantage != 0.0

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
  if sample.token_advantages is not None:
    adv = np.asarray(sample.token_advantages)
    if adv.shape != (len(sample.completion_ids),):
      raise ValueError(f"{sample.name(index)}: token_advantages of shape {adv.shape} for "
                       f"{len(sample.completion_ids)} completion_ids; they must align one to one")
    if not np.all(np.isfinite(adv)):
      raise ValueError(f"{sample.name(index)}: token_advantages are not all finite")


def _first_image_token(prompt: np.ndarray) -> int:
  """Index of the prompt's first vision token (len(prompt) when it has none)."""
  hits = np.flatnonzero((prompt == VISION_START_ID) | (prompt == IMAGE_PAD_ID))
  return int(hits[0]) if hits.size else len(prompt)


def pack_rl_batch(samples: Sequence[RLSample], *, rows: int, seq_len: int, patch_budget: int = 0,
                  image_keys: bool | None = None, pad_id: int = PAD_ID
                  ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """Best-fit pack `samples` into `rows` rows of `seq_len` token and `patch_budget` patch slots.

  Returns (batch, report). batch: TEXT_KEYS + RL_KEYS, all [rows, seq_len]
  (int32 ids/positions, float32 mask and RL fields), plus IMAGE_KEYS
  ([rows, patch_budget, 768] uint8, [rows, patch_budget] int32,
  [rows, patch_budget, 3] int32) when `image_keys` is True, or (None) when
  any sample has images. pad_id fills padding slots (a tiny test model with
  a small vocabulary passes an id it has).
  report: packed, truncated_prompt, skipped (reason -> count),
  skipped_too_long, left_out (packed nowhere for lack of rows),
  left_out_indices, row_samples (sample indices per row), policy_tokens,
  fill, patches, patch_fill.
  """
  if rows < 1 or seq_len < 2:
    raise ValueError(f"pack_rl_batch needs rows >= 1 and seq_len >= 2, got rows={rows}, "
                     f"seq_len={seq_len}")
  has_images = any(s.images for s in samples)
  if image_keys is None:
    image_keys = has_images
  if has_images and (not image_keys or patch_budget < 1):
    first = next(i for i, s in enumerate(samples) if s.images)
    raise ValueError(f"{samples[first].name(first)} has {len(samples[first].images)} screenshot(s) "
                     f"but the batch has no patch slots (patch_budget={patch_budget}, "
                     f"image_keys={image_keys}); set data.patch_budget for GUI/hybrid RL")
  skipped: collections.Counter[str] = collections.Counter()
  truncated = 0
  kept: list[int] = []
  segments: dict[int, Any] = {}
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
      cut = len(prompt) + completion - seq_len
      if completion >= seq_len:  # not even one prompt token would remain
        skipped["too_long"] += 1
        continue
      if cut > _first_image_token(prompt):  # a screenshot's tokens would be cut off its patches
        skipped["too_long_with_images"] += 1
        continue
      prompt = prompt[cut:]
      truncated += 1
    tokens = np.concatenate([prompt, np.asarray(s.completion_ids, np.int32)])
    labels = np.concatenate([np.zeros(len(prompt), bool), np.ones(completion, bool)])
    try:  # the SFT packer's segment: patchify, <|image_pad|> = patches / 4, patch budget
      segments[i] = to_segment(Sample(tokens, labels, list(s.images or []), {"source_id": 0}),
                               seq_len=seq_len, patch_budget=patch_budget)
    except SkipSample as e:
      skipped[str(e)] += 1
      continue
    kept.append(i)

  bins = best_fit_decreasing([segments[i].num_tokens for i in kept],
                             [segments[i].num_patches for i in kept], seq_len, patch_budget)
  row_samples = [[kept[j] for j in b] for b in bins[:rows]]
  left_out = sorted(kept[j] for b in bins[rows:] for j in b)

  out = empty_bins(rows, seq_len, patch_budget if image_keys else 0)
  batch = {k: out[k] for k in TEXT_KEYS + (IMAGE_KEYS if image_keys else ())}
  batch.update({k: np.zeros((rows, seq_len), np.float32) for k in RL_KEYS})
  for r, members in enumerate(row_samples):
    assemble_from_parts(**concat_segments([segments[i] for i in members]), seq_len=seq_len,
                        patch_budget=patch_budget, out={k: v[r] for k, v in out.items()})
    _fill_rl_fields(r, [samples[i] for i in members], [segments[i] for i in members], batch)
  batch["tokens"][batch["segment_ids"] == 0] = pad_id

  packed = sum(len(m) for m in row_samples)
  tokens_used = int((batch["segment_ids"] > 0).sum())
  patches_used = sum(segments[i].num_patches for m in row_samples for i in m)
  report = dict(
      packed=packed, truncated_prompt=truncated, skipped=dict(skipped),
      skipped_too_long=skipped["too_long"] + skipped["too_long_with_images"],
      left_out=len(left_out), left_out_indices=left_out, row_samples=row_samples,
      policy_tokens=int(batch["loss_mask"].sum()), fill=tokens_used / (rows * seq_len),
      patches=patches_used, patch_fill=patches_used / max(1, rows * patch_budget))
  return batch, report


def _fill_rl_fields(r: int, members: Sequence[RLSample], segments: Sequence[Any],
                    batch: dict[str, np.ndarray]) -> None:
  """Row r's engine log-probs and advantages on the slots that predict completion tokens
  (the layout itself is packing.assemble_from_parts', label = completion token)."""
  start = 0
  for s, seg in zip(members, segments):
    n = len(s.completion_ids)
    first = start + seg.num_tokens - n - 1   # slot whose target is completion token 0
    batch["logp_rollout"][r, first:first + n] = np.asarray(s.rollout_logprobs, np.float32)
    batch["advantages"][r, first:first + n] = (float(s.advantage) if s.token_advantages is None
                                               else np.asarray(s.token_advantages, np.float32))
    batch["entropy_weight"][r, first:first + n] = float(s.parsed)
    start += seg.num_tokens


def pack_rl_update(samples: Sequence[RLSample], *, rows: int, max_micro_batches: int, seq_len: int,
                   patch_budget: int = 0, image_keys: bool | None = None, pad_id: int = PAD_ID
                   ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """One RL update's batch: `pack_rl_batch` into up to `max_micro_batches` micro-batches of `rows`
  rows each, so the update trains on every sample that fits instead of the first `rows` rows' worth.

  The batch is cut to micro x rows rows, micro being the smallest power of two (capped at
  max_micro_batches) whose rows hold every packed bin: few distinct shapes, so few compiles of the
  accumulating step. The bins fill the first report["live_micro_batches"] micro-batches (in
  train.step's strided split) and the rest are padding the step skips; report["row_samples"] is
  per row of the returned batch ([] on padding). report["micro_batches"] = micro; fill and
  patch_fill are over the rows kept;
  left_out counts only the samples beyond max_micro_batches x rows rows. Why: with one row per
  screenshot call, a 4-row batch trained 4-6 of an update's ~60 samples, and the 4 it kept (the
  largest bins first) often came from groups with zero advantage (docs/rl.md)."""
  if max_micro_batches < 1:
    raise ValueError(f"rl.max_micro_batches={max_micro_batches} must be >= 1")
  batch, report = pack_rl_batch(samples, rows=rows * max_micro_batches, seq_len=seq_len,
                                patch_budget=patch_budget, image_keys=image_keys, pad_id=pad_id)
  used = len(report["row_samples"])   # bins fill rows from the first; the rest are padding
  micro = 1
  while micro * rows < used and micro < max_micro_batches:
    micro *= 2
  micro = min(micro, max_micro_batches)
  n = micro * rows
  # train.step's micro-batch j is rows j, j+micro, j+2*micro, ...; bin k goes to micro-batch
  # k // rows, so the packed bins fill the first micro-batches whole and the rest are all padding,
  # which the step skips (a power-of-two count of 16 for 9 micro-batches' worth of bins computed
  # 16 before, 9 now).
  order = [(r % micro) * rows + r // micro for r in range(n)]
  batch = {k: v[order] for k, v in batch.items()}
  bins = report["row_samples"]
  report = dict(report, micro_batches=micro, live_micro_batches=-(-used // rows),
                row_samples=[bins[k] if k < used else [] for k in order],
                fill=int((batch["segment_ids"] > 0).sum()) / (n * seq_len),
                patch_fill=report["patches"] / max(1, n * patch_budget))
  return batch, report

