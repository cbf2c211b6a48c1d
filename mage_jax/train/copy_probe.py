"""The copy probe of an agent model (issue 36): how well it reproduces held-out values that its
prompt names, measured as the mean NLL (and top-1 accuracy) of those value tokens in the
scripted teacher's responses to held-out task instances.

The teacher's held-out episodes (proof_teacher.collect_teacher_data(split="heldout"); never
trained on) are rendered exactly as SFT renders training episodes (data/render.py), so each
sample is the prompt the model sees plus the response it should give. Only the trained
tokens (the response) that spell a held-out value count: `value_mask` finds every occurrence
of a value in the trained text and marks the tokens that overlap it. A model that copies the
value out of the instruction scores ~0 nats; one that guesses from the values it was trained
on scores about log(pool size) per value.

The same figure for the pretrained base is pretrain.py's probe (held-out values in an
instruction -> response document of the base's corpus).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import jax
import numpy as np

from mage_jax.data import packing, render
from mage_jax.train import step as step_lib

_WORD_CHAR = r"A-Za-z0-9_"


def value_mask(tok: Any, tokens: np.ndarray, loss_mask: np.ndarray, values: Iterable[str]) -> np.ndarray:
  """bool [L]: the trained tokens (loss_mask) that overlap an occurrence of one of `values` in the
  trained text (an occurrence is the whole value, not part of a longer word)."""
  values = sorted({v for v in values if v}, key=len, reverse=True)
  mask = np.zeros(len(tokens), bool)
  if not values:
    return mask
  pattern = re.compile(rf"(?<![{_WORD_CHAR}])(?:{'|'.join(map(re.escape, values))})(?![{_WORD_CHAR}])")
  trained = np.flatnonzero(np.asarray(loss_mask, bool))
  for span in np.split(trained, np.flatnonzero(np.diff(trained) != 1) + 1) if trained.size else ():
    pieces = [tok.decode([int(t)]) for t in np.asarray(tokens)[span]]
    ends = np.cumsum([len(p) for p in pieces])
    starts = ends - np.asarray([len(p) for p in pieces])
    for m in pattern.finditer("".join(pieces)):
      mask[span[(starts < m.end()) & (ends > m.start())]] = True
  return mask


def probe_segments(episodes: Sequence[Any], values: Iterable[str], render_cfg: render.RenderConfig,
                   seq_len: int, patch_budget: int) -> tuple[list[packing.Segment], dict[str, int]]:
  """Render the episodes as SFT does; keep each sample's value tokens as its only trained tokens.
  Returns the segments and counts (samples, kept, skipped by reason)."""
  renderer = render.Renderer(render_cfg)
  values = list(values)
  counts = {"samples": 0, "kept": 0, "no_value_tokens": 0, "skipped": 0}
  segments = []
  report = render.RenderReport()
  for sample in render.render_episodes(episodes, renderer, report):
    counts["samples"] += 1
    sample.loss_mask = value_mask(renderer.tok, sample.tokens, sample.loss_mask, values)
    if not sample.loss_mask.any():
      counts["no_value_tokens"] += 1
      continue
    try:
      segments.append(packing.to_segment(sample, seq_len=seq_len, patch_budget=patch_budget))
    except packing.SkipSample:
      counts["skipped"] += 1
      continue
    counts["kept"] += 1
  counts["skipped"] += sum(report.skipped.values())
  return segments, counts


def measure(t: Any, params: Any, segments: Sequence[packing.Segment], loss_chunk_size: int) -> dict[str, float]:
  """Mean NLL and accuracy over the segments' trained tokens, one segment per bin, through the
  trainer `t`'s (run_setup.Trainer) jitted eval step."""
  if not segments:
    raise ValueError("copy probe: no sample holds a held-out value token")
  scfg = step_lib.StepConfig(loss_chunk_size=loss_chunk_size)
  fn = jax.jit(lambda p, b: step_lib.eval_step(t.graphdef, t.rest, scfg, p, b, 1))
  seq_len, patch_budget, per = t.data.seq_len, t.data.patch_budget, t.data.batch_size
  nll = correct = tokens = 0.0
  for i in range(0, len(segments), per):
    rows = [packing.assemble_bin([s], seq_len, patch_budget) for s in segments[i:i + per]]
    while len(rows) < per:   # an empty bin trains no token
      rows.append({k: np.zeros_like(v) for k, v in rows[0].items()})
    batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    batch["source_ids"] = np.where(batch["segment_ids"] > 0, 0, -1).astype(np.int32)
    with jax.set_mesh(t.mesh):
      out = jax.device_get(fn(params, t.device_batch(batch)))
    nll += float(out["nll_sum"][0])
    correct += float(out["correct_sum"][0])
    tokens += float(out["tokens"][0])
  return {"nll": nll / tokens, "accuracy": correct / tokens, "value_tokens": int(tokens),
          "samples": len(segments)}
