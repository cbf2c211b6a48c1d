"""Prefix reuse for the embedded engine, by rows (vLLM's automatic prefix caching, host side).

An agent's requests repeat themselves: every prompt of an episode starts with the same system turn,
and turn t+1's prompt is turn t's prompt, its completion and the new observation (76% of the proof
evaluation's prefill tokens were such a prefix; docs/results.md, session 40). A cache row whose
slot i holds position i (models/slot_decode.py) can serve any later prompt that starts with the
same sequence: only the rest is prefilled (`slot_decode.extend_slot`).

This module keeps the host's record of what each row holds, as keys: a text token is its id, an
image pad token is a 62-bit digest of its image's pixels and patch positions (negative, so never
an id), so two prompts whose pad runs are equal but whose screenshots differ do not match. A match
never cuts an image in two: the rest of a cut image would need the whole image's vision tower.
Finished requests' rows are copied out and kept, least recently used first out, within a byte
budget; live rows are matched where they sit.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
from typing import Any

import numpy as np

# Below this many shared tokens a plain prefill is as cheap as copying a row and extending it.
MIN_REUSE = 32
DEFAULT_BUDGET_BYTES = 1 << 30


@dataclasses.dataclass
class Prompt:
  """A request's prompt as cache keys, and which image (1-based, 0 = text) each position shows."""
  keys: np.ndarray       # int64 [n]
  image_of: np.ndarray   # int32 [n]


def prompt_keys(prompt: np.ndarray, vision: dict, image_token_id: int | None, merge_group: int) -> Prompt:
  """Keys of a prompt with its images (`vision`: patch_rows, patch_image_ids, patch_positions, each
  with a leading batch axis of 1, as `Policy._vision_inputs` makes them)."""
  prompt = np.asarray(prompt)
  keys = prompt.astype(np.int64)
  image_of = np.zeros(len(prompt), np.int32)
  ids = vision.get("patch_image_ids") if vision else None
  if ids is None or image_token_id is None:
    return Prompt(keys, image_of)
  ids = np.asarray(ids)[0]
  rows, places = np.asarray(vision["patch_rows"])[0], np.asarray(vision["patch_positions"])[0]
  pads = np.flatnonzero(prompt == image_token_id)
  at = 0
  for image in range(1, int(ids.max(initial=0)) + 1):
    mine = ids == image
    count = int(mine.sum()) // merge_group
    digest = hashlib.blake2b(rows[mine].tobytes() + places[mine].tobytes() + str(rows.dtype).encode(),
                             digest_size=8).digest()
    run = pads[at:at + count]
    keys[run] = -1 - (int.from_bytes(digest, "little") >> 2)
    image_of[run] = image
    at += count
  return Prompt(keys, image_of)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
  n = min(len(a), len(b))
  differ = np.flatnonzero(a[:n] != b[:n])
  return int(differ[0]) if differ.size else n


def usable_prefix(prompt: Prompt, shared: int) -> int:
  """How many leading positions of `prompt` to reuse when `shared` of them equal a row's: at least
  one token is left to prefill (its logits give token 0), and an image is never cut."""
  m = min(shared, len(prompt.keys) - 1)
  while 0 < m < len(prompt.keys) and prompt.image_of[m] and prompt.image_of[m - 1] == prompt.image_of[m]:
    m -= 1
  return m


def suffix_vision(vision: dict, prompt: Prompt, start: int) -> dict:
  """The images wholly inside prompt[start:], renumbered from 1 (empty when it has none)."""
  later = prompt.image_of[start:]
  later = later[later > 0]
  if not later.size:
    return {}
  first = int(later[0])
  ids = np.asarray(vision["patch_image_ids"])[0]
  keep = ids >= first
  return {"patch_rows": np.asarray(vision["patch_rows"])[:, keep],
          "patch_image_ids": (ids[keep] - (first - 1))[None].astype(ids.dtype),
          "patch_positions": np.asarray(vision["patch_positions"])[:, keep]}


@dataclasses.dataclass
class Stored:
  """A finished request's row, copied out of the pool: positions 0..len(keys)-1 are valid."""
  keys: np.ndarray
  row: Any                # a one-row KVCache [1, R]
  nbytes: int

  @property
  def length(self) -> int:
    return int(self.row.segment_ids.shape[1])


@dataclasses.dataclass
class Match:
  shared: int             # positions reused (0: none worth it)
  slot: int | None = None  # a live slot to copy from, or
  stored: Stored | None = None  # a kept row


class PrefixCache:
  """Kept rows of finished requests, least recently used evicted first past `budget_bytes`."""

  def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES):
    if budget_bytes < 0:
      raise ValueError(f"prefix cache budget_bytes={budget_bytes} must be >= 0 (0 turns reuse off)")
    self.budget = budget_bytes
    self.rows: collections.OrderedDict[int, Stored] = collections.OrderedDict()
    self.bytes = 0
    self._next = 0
    self.hits = self.misses = self.reused_tokens = self.prefilled_tokens = 0

  @property
  def enabled(self) -> bool:
    return self.budget > 0

  def clear(self) -> None:
    self.rows.clear()
    self.bytes = 0

  def match(self, prompt: Prompt, live: dict[int, np.ndarray]) -> Match:
    """The row sharing the longest usable prefix with `prompt`: a live slot's (`live`: slot -> the
    keys its row holds) or a kept one's. Ties go to a live slot (no row to insert)."""
    best = Match(0)
    if not self.enabled:
      return best
    for slot, keys in live.items():
      m = usable_prefix(prompt, common_prefix(prompt.keys, keys))
      if m > best.shared:
        best = Match(m, slot=slot)
    for stored in self.rows.values():
      m = usable_prefix(prompt, common_prefix(prompt.keys, stored.keys))
      if m > best.shared:
        best = Match(m, stored=stored)
    if best.shared < MIN_REUSE:
      return Match(0)
    if best.stored is not None:
      for key, stored in self.rows.items():
        if stored is best.stored:
          self.rows.move_to_end(key)
          break
    return best

  def count(self, prompt_len: int, shared: int) -> None:
    self.hits += shared > 0
    self.misses += shared == 0
    self.reused_tokens += shared
    self.prefilled_tokens += prompt_len - shared

  def wants(self, keys: np.ndarray) -> bool:
    """Whether a finished row holding `keys` is worth keeping: not when a kept row already holds
    them and more (that row serves every prompt this one could; it becomes the most recent)."""
    if not self.enabled or len(keys) <= MIN_REUSE:
      return False
    for key, stored in self.rows.items():
      if len(stored.keys) >= len(keys) and common_prefix(keys, stored.keys) == len(keys):
        self.rows.move_to_end(key)
        return False
    return True

  def keep(self, keys: np.ndarray, row: Any) -> None:
    """Keep a finished row (after `wants`); kept rows whose keys are a prefix of these go."""
    for key, stored in list(self.rows.items()):
      if len(stored.keys) <= len(keys) and common_prefix(keys, stored.keys) == len(stored.keys):
        self._drop(key)
    nbytes = sum(int(x.nbytes) for x in (*row.k, *row.v, row.segment_ids, row.positions))
    if nbytes > self.budget:
      return
    self.rows[self._next] = Stored(np.asarray(keys), row, nbytes)
    self._next += 1
    self.bytes += nbytes
    while self.bytes > self.budget:
      self._drop(next(iter(self.rows)))

  def _drop(self, key: int) -> None:
    self.bytes -= self.rows.pop(key).nbytes

  def stats(self) -> dict[str, int]:
    return {"hits": self.hits, "misses": self.misses, "reused_tokens": self.reused_tokens,
            "prefilled_tokens": self.prefilled_tokens, "kept_rows": len(self.rows), "kept_bytes": self.bytes}
