"""Packing rendered samples into fixed-shape bins under two budgets.

A bin has exactly `seq_len` token slots and `patch_budget` patch slots
(docs/ARCHITECTURE.md, "Packed batch layout"). A sample goes into a bin only if
both its tokens and its image patches fit. Grain's `BestFitPackIterDataset`
packs every feature on its own and has no notion of images inside a segment
(patch_image_ids per image, `<|image_pad|>` = patches / 4), so this module has
its own packer in the same style: an `IterDataset` whose iterator is
checkpointable the way Grain's packers are (state = the parent's state at the
start of the current window + how many of the window's bins were emitted;
restoring re-reads and re-packs the window, which is deterministic).

Algorithm: best-fit-decreasing over a window of `buffer_size` samples: sort by
token length (longest first), put each sample in the open bin with the least
remaining token room that still has room for both its tokens and its patches.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Iterable, Iterator, Sequence

import grain
import numpy as np

from mage_jax.models.config import IMAGE_PAD_ID, PAD_ID

PATCH_DIM = 768  # 3 * 16 * 16
BIN_KEYS = ("tokens", "targets", "loss_mask", "segment_ids", "positions", "patches",
            "patch_image_ids", "patch_positions", "source_ids")


@dataclasses.dataclass
class Segment:
  """A sample made ready to pack: tokens plus its images as patch rows."""
  tokens: np.ndarray           # int32 [L]
  loss_mask: np.ndarray        # bool [L], Sample semantics: token i is trained as a label
  patches: np.ndarray          # uint8 [N, 768], all images in order of appearance
  patch_positions: np.ndarray  # int32 [N, 3] (t, h, w)
  image_patches: list[int]     # patches per image (each image is one attention block)
  source_id: int
  meta: dict

  @property
  def num_tokens(self) -> int:
    return int(self.tokens.shape[0])

  @property
  def num_patches(self) -> int:
    return int(self.patches.shape[0])


class SkipSample(ValueError):
  """A sample that cannot be packed; the message is the counted reason."""


def _default_patchify(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  from mage_jax.data import images  # Pillow lives there; imported only when packing images
  return images.patchify(image)


def to_segment(sample: Any, *, seq_len: int, patch_budget: int,
               source_ids: dict[str, int] | None = None,
               patchify: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
               ) -> Segment:
  """Sample (data/render.py) -> Segment. Raises SkipSample with the reason if it can't be packed."""
  tokens = np.asarray(sample.tokens, dtype=np.int32)
  loss_mask = np.asarray(sample.loss_mask, dtype=bool)
  if tokens.ndim != 1 or tokens.shape != loss_mask.shape:
    raise SkipSample(f"bad sample shapes tokens={tokens.shape} loss_mask={loss_mask.shape}")
  if tokens.shape[0] > seq_len:
    raise SkipSample("longer than seq_len")
  if tokens.shape[0] < 2:
    raise SkipSample("shorter than 2 tokens")
  patchify = patchify or _default_patchify
  rows, positions, counts = [], [], []
  for image in sample.images:
    try:
      r, p = patchify(np.asarray(image))
    except ValueError as e:
      raise SkipSample(f"bad image: {e}") from None
    rows.append(np.asarray(r, dtype=np.uint8))
    positions.append(np.asarray(p, dtype=np.int32))
    counts.append(int(r.shape[0]))
  num_patches = sum(counts)
  if num_patches > patch_budget:
    raise SkipSample("more patches than patch_budget")
  num_pads = int(np.count_nonzero(tokens == IMAGE_PAD_ID))
  if num_pads * 4 != num_patches:
    raise SkipSample("image_pad count != patches / 4")
  meta = dict(sample.meta)
  sid = meta.get("source_id")
  if not isinstance(sid, int):
    sid = (source_ids or {}).get(meta.get("source", ""), 0)
  return Segment(
      tokens=tokens, loss_mask=loss_mask,
      patches=np.concatenate(rows) if rows else np.zeros((0, PATCH_DIM), np.uint8),
      patch_positions=np.concatenate(positions) if positions else np.zeros((0, 3), np.int32),
      image_patches=counts, source_id=int(sid), meta=meta)


def best_fit_decreasing(token_lengths: Sequence[int], patch_counts: Sequence[int],
                        seq_len: int, patch_budget: int) -> list[list[int]]:
  """Indices grouped into bins; every bin respects both budgets. Items must fit alone."""
  lengths = np.asarray(token_lengths, dtype=np.int64)
  patches = np.asarray(patch_counts, dtype=np.int64)
  order = np.argsort(-lengths, kind="stable")
  room_tok = np.empty(len(lengths), np.int64)   # preallocated: at most one bin per item
  room_pat = np.empty(len(lengths), np.int64)
  bins: list[list[int]] = []
  for i in order:
    n = len(bins)
    fits = (room_tok[:n] >= lengths[i]) & (room_pat[:n] >= patches[i])
    if fits.any():
      b = int(np.argmin(np.where(fits, room_tok[:n], np.iinfo(np.int64).max)))
      bins[b].append(int(i))
    else:
      b = n
      bins.append([int(i)])
      room_tok[b], room_pat[b] = seq_len, patch_budget
    room_tok[b] -= lengths[i]
    room_pat[b] -= patches[i]
  # Segments in a bin keep their arrival order; bins come out in order of their first sample.
  for b in bins:
    b.sort()
  bins.sort(key=lambda b: b[0])
  return bins


def empty_bins(batch: int, seq_len: int, patch_budget: int) -> dict[str, np.ndarray]:
  """Zeroed [batch, ...] arrays of the bin layout (np.zeros: untouched padding costs nothing)."""
  return dict(tokens=np.zeros((batch, seq_len), np.int32), targets=np.zeros((batch, seq_len), np.int32),
              loss_mask=np.zeros((batch, seq_len), np.float32),
              segment_ids=np.zeros((batch, seq_len), np.int32),
              positions=np.zeros((batch, seq_len), np.int32),
              patches=np.zeros((batch, patch_budget, PATCH_DIM), np.uint8),
              patch_image_ids=np.zeros((batch, patch_budget), np.int32),
              patch_positions=np.zeros((batch, patch_budget, 3), np.int32),
              source_ids=np.zeros((batch, seq_len), np.int32))


def assemble_from_parts(tokens: np.ndarray, label_mask: np.ndarray, seg_lens: np.ndarray,
                        seg_sources: np.ndarray, patches: np.ndarray,
                        patch_positions: np.ndarray, image_patches: np.ndarray,
                        seq_len: int, patch_budget: int,
                        out: dict[str, np.ndarray] | None = None,
                        image_refs: np.ndarray | None = None) -> dict[str, np.ndarray]:
  """Fixed-shape bin from concatenated segment parts (vectorised; also the record decoder).

  tokens/label_mask: the segments' tokens and Sample loss masks, concatenated.
  out: zeroed rows to fill in place (a batch row from `empty_bins`); patch padding is
  left untouched, so it must already be zero.
  image_refs: deduplicated records (data/records.py): patches/patch_positions/
  image_patches then hold each distinct image once, and image_refs[k] is the
  distinct image shown as the bin's k-th image.
  """
  if out is None:
    out = {k: v[0] for k, v in empty_bins(1, seq_len, patch_budget).items()}
  n = int(tokens.shape[0])
  k = int(seg_lens.shape[0])
  starts = np.zeros(k, np.int64)
  np.cumsum(seg_lens[:-1], out=starts[1:])
  ends = starts + seg_lens - 1
  out["tokens"][:n] = tokens
  out["tokens"][n:] = PAD_ID
  targets = out["targets"]
  targets[:n - 1] = tokens[1:]
  targets[n - 1:] = 0
  targets[ends] = 0  # no next token in the last slot of a segment
  loss_mask = out["loss_mask"]
  loss_mask[:n - 1] = label_mask[1:]
  loss_mask[n - 1:] = 0.0
  loss_mask[ends] = 0.0
  out["segment_ids"][:n] = np.repeat(np.arange(1, k + 1, dtype=np.int32), seg_lens)
  out["segment_ids"][n:] = 0
  out["positions"][:n] = np.arange(n, dtype=np.int32) - np.repeat(starts, seg_lens).astype(np.int32)
  out["positions"][n:] = 0
  out["source_ids"][:n] = np.repeat(seg_sources.astype(np.int32), seg_lens)
  out["source_ids"][n:] = -1
  if image_refs is None:
    p = int(patches.shape[0])
    out["patches"][:p] = patches
    out["patch_positions"][:p] = patch_positions
  else:  # one slice copy per image occurrence (a dozen per full-size bin)
    image_starts = np.zeros(len(image_patches), np.int64)
    np.cumsum(image_patches[:-1], out=image_starts[1:])
    refs = np.asarray(image_refs, np.int64)
    image_patches = np.asarray(image_patches)[refs]
    p = 0
    for start, count in zip(image_starts[refs].tolist(), image_patches.tolist()):
      out["patches"][p:p + count] = patches[start:start + count]
      out["patch_positions"][p:p + count] = patch_positions[start:start + count]
      p += count
  out["patch_image_ids"][:p] = np.repeat(np.arange(1, len(image_patches) + 1, dtype=np.int32),
                                         image_patches)
  out["patch_image_ids"][p:] = 0
  out["patch_positions"][p:] = 0
  return out


def assemble_batch(items: Sequence[tuple[dict[str, Any], dict[str, np.ndarray]]]
                   ) -> dict[str, np.ndarray]:
  """Grain batch_fn: [(header, compact parts)] -> [B, ...] bins, filled in place (no stacking copy)."""
  seq_len, patch_budget = items[0][0]["seq_len"], items[0][0]["patch_budget"]
  out = empty_bins(len(items), seq_len, patch_budget)
  for i, (header, parts) in enumerate(items):
    if (header["seq_len"], header["patch_budget"]) != (seq_len, patch_budget):
      raise ValueError(f"bins of different shapes in one batch: {(seq_len, patch_budget)} vs "
                       f"{(header['seq_len'], header['patch_budget'])}")
    assemble_from_parts(**parts, seq_len=seq_len, patch_budget=patch_budget,
                        out={k: v[i] for k, v in out.items()})
  return out


def concat_segments(segments: Sequence[Segment]) -> dict[str, np.ndarray]:
  """The compact parts of a bin (what records store)."""
  return dict(
      tokens=np.concatenate([s.tokens for s in segments]).astype(np.int32),
      label_mask=np.concatenate([s.loss_mask for s in segments]).astype(np.uint8),
      seg_lens=np.array([s.num_tokens for s in segments], np.int64),
      seg_sources=np.array([s.source_id for s in segments], np.int32),
      patches=np.concatenate([s.patches for s in segments]).astype(np.uint8),
      patch_positions=np.concatenate([s.patch_positions for s in segments]).astype(np.int32),
      image_patches=np.array([c for s in segments for c in s.image_patches], np.int64))


def assemble_bin(segments: Sequence[Segment], seq_len: int, patch_budget: int
                 ) -> dict[str, np.ndarray]:
  """The device-batch row for a list of segments (ARCHITECTURE.md layout, exactly)."""
  if sum(s.num_tokens for s in segments) > seq_len:
    raise ValueError("segments exceed seq_len")
  if sum(s.num_patches for s in segments) > patch_budget:
    raise ValueError("segments exceed patch_budget")
  return assemble_from_parts(**concat_segments(segments), seq_len=seq_len,
                             patch_budget=patch_budget)


@dataclasses.dataclass
class PackedBin:
  """A bin before it becomes fixed-shape arrays: its segments (with metadata)."""
  segments: list[Segment]

  @property
  def num_tokens(self) -> int:
    return sum(s.num_tokens for s in self.segments)

  @property
  def num_patches(self) -> int:
    return sum(s.num_patches for s in self.segments)


class PackStats:
  """Counts for the pack manifest: fill and skips by reason."""

  def __init__(self, seq_len: int, patch_budget: int):
    self.seq_len, self.patch_budget = seq_len, patch_budget
    self.bins = self.samples = self.tokens = self.patches = 0
    self.skipped: collections.Counter[str] = collections.Counter()

  def add_bin(self, b: PackedBin) -> None:
    self.bins += 1
    self.samples += len(b.segments)
    self.tokens += b.num_tokens
    self.patches += b.num_patches

  def as_dict(self) -> dict[str, Any]:
    return dict(bins=self.bins, samples=self.samples, tokens=self.tokens, patches=self.patches,
                token_fill=self.tokens / max(1, self.bins * self.seq_len),
                patch_fill=self.patches / max(1, self.bins * self.patch_budget),
                skipped=dict(self.skipped))


def pack_segments(segments: Iterable[Segment], seq_len: int, patch_budget: int,
                  buffer_size: int, stats: PackStats | None = None) -> Iterator[PackedBin]:
  """Windowed best-fit-decreasing over a stream of segments (no Grain; for launch.pack)."""
  window: list[Segment] = []

  def flush():
    groups = best_fit_decreasing([s.num_tokens for s in window],
                                 [s.num_patches for s in window], seq_len, patch_budget)
    for g in groups:
      b = PackedBin([window[i] for i in g])
      if stats is not None:
        stats.add_bin(b)
      yield b

  for s in segments:
    window.append(s)
    if len(window) >= buffer_size:
      yield from flush()
      window = []
  if window:
    yield from flush()


class TwoBudgetPackIterDataset(grain.IterDataset):
  """Grain packer: Samples (or Segments) in, fixed-shape bins (dicts of BIN_KEYS) out.

  Samples that cannot be packed are skipped and counted (`iterator.skipped`).
  With `keep_segments=True` elements are `PackedBin`s instead of arrays.
  """

  def __init__(self, parent: grain.IterDataset, *, seq_len: int, patch_budget: int,
               buffer_size: int = 256, source_ids: dict[str, int] | None = None,
               keep_segments: bool = False,
               patchify: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None):
    super().__init__(parent)
    self._kw = dict(seq_len=seq_len, patch_budget=patch_budget, buffer_size=buffer_size,
                    source_ids=source_ids, keep_segments=keep_segments, patchify=patchify)

  def __iter__(self) -> "TwoBudgetPackIterator":
    return TwoBudgetPackIterator(self._parent.__iter__(), **self._kw)

  def __str__(self) -> str:
    return "TwoBudgetPackIterDataset"


class TwoBudgetPackIterator(grain.DatasetIterator):

  def __init__(self, parent: grain.DatasetIterator, *, seq_len: int, patch_budget: int,
               buffer_size: int, source_ids: dict[str, int] | None, keep_segments: bool,
               patchify: Callable | None):
    super().__init__(parent)
    self._seq_len, self._patch_budget, self._buffer_size = seq_len, patch_budget, buffer_size
    self._source_ids, self._keep_segments, self._patchify = source_ids, keep_segments, patchify
    self.skipped: collections.Counter[str] = collections.Counter()
    self._reset(parent.get_state(), 0)

  def _reset(self, window_start_state: Any, emitted: int) -> None:
    self._window_start_state = window_start_state
    self._emitted = emitted
    self._bins: list[PackedBin] | None = None
    self._skipped_at_window_start = collections.Counter(self.skipped)

  def _fill_window(self) -> None:
    window: list[Segment] = []
    while len(window) < self._buffer_size:
      try:
        item = next(self._parent)
      except StopIteration:
        break
      if isinstance(item, Segment):
        window.append(item)
        continue
      try:
        window.append(to_segment(item, seq_len=self._seq_len, patch_budget=self._patch_budget,
                                 source_ids=self._source_ids, patchify=self._patchify))
      except SkipSample as e:
        self.skipped[str(e)] += 1
    groups = best_fit_decreasing([s.num_tokens for s in window],
                                 [s.num_patches for s in window],
                                 self._seq_len, self._patch_budget)
    self._bins = [PackedBin([window[i] for i in g]) for g in groups]

  def __next__(self):
    while True:
      if self._bins is None:
        self._fill_window()
        if not self._bins:
          raise StopIteration
      if self._emitted < len(self._bins):
        b = self._bins[self._emitted]
        self._emitted += 1
        if self._keep_segments:
          return b
        return assemble_bin(b.segments, self._seq_len, self._patch_budget)
      self._reset(self._parent.get_state(), 0)

  def get_state(self) -> dict[str, Any]:
    return {"parent": self._window_start_state, "emitted": self._emitted,
            "skipped": dict(self._skipped_at_window_start)}

  def set_state(self, state: dict[str, Any]) -> None:
    self._parent.set_state(state["parent"])
    # Re-reading the window recounts its skips, so restore the count from its start.
    self.skipped = collections.Counter(state.get("skipped", {}))
    self._reset(state["parent"], state["emitted"])


# --- fill benchmark ---------------------------------------------------------------------------

STAGE4_IMAGE_TOKENS = (1280 // 32) * (704 // 32)  # 1280x720 -> 1280x704 -> 880 merged tokens


def stage4_like_lengths(num_samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """(token lengths, patch counts) of the fixed stage-4-like distribution (issue 3).

  Log-normal lengths with mean 7,500 and sigma_log 0.5 clipped to [800, 32,000];
  2-4 screenshots of 880 image tokens each (3,520 patches), counted inside the length.
  """
  rng = np.random.default_rng(seed)
  sigma = 0.5
  mu = np.log(7_500) - sigma ** 2 / 2  # so that E[length] = 7,500
  lengths = np.clip(rng.lognormal(mu, sigma, num_samples), 800, 32_000).astype(np.int64)
  num_images = rng.integers(2, 5, num_samples)
  image_tokens = num_images * (STAGE4_IMAGE_TOKENS + 2)  # + vision_start/vision_end
  lengths = np.maximum(lengths, image_tokens + 64)  # the text around the images
  return lengths, num_images * STAGE4_IMAGE_TOKENS * 4


def measure_fill(num_samples: int = 20_000, seed: int = 0, seq_len: int = 32_768,
                 patch_budget: int = 98_304, buffer_size: int = 2_048) -> dict[str, float]:
  """Token and patch fill of windowed best-fit-decreasing on the stage-4-like distribution."""
  lengths, patches = stage4_like_lengths(num_samples, seed)
  bins = tokens = pat = 0
  for start in range(0, num_samples, buffer_size):
    sl = slice(start, start + buffer_size)
    groups = best_fit_decreasing(lengths[sl], patches[sl], seq_len, patch_budget)
    bins += len(groups)
  tokens, pat = int(lengths.sum()), int(patches.sum())
  return dict(samples=num_samples, bins=bins, samples_per_bin=num_samples / bins,
              token_fill=tokens / (bins * seq_len), patch_fill=pat / (bins * patch_budget))
