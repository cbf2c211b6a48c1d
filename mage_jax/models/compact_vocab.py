"""A compact vocabulary: train on the few thousand token ids a corpus uses instead of all 151,936,
and expand to the full vocabulary exactly when the params leave training.

The full-vocabulary model a compact one stands for has, for every id outside the compact set, the
same embedding row r (the compact table's last row, "rest"), so those ids all get the same logit
h.r. Their total probability mass is (V - n) exp(h.r); the compact model gives its rest row the
logit h.r + log(V - n) (Qwen3Config.rest_ids = V - n), so

    log softmax_compact(h)[i] == log softmax_full(h)[ids[i]]   for every kept id,

exactly, and `expand_params` writes that full model (a plain Qwen3 / Mage-VL checkpoint HF
transformers and vLLM load). A tied head stays tied; an untied head expands its columns the same
way. Why: on 2 CPU cores the 151,936-row head and embedding were ~95% of the proof student's step
(4 layers x 128 wide) and all of its optimizer state.

  vocab = CompactVocab.from_token_ids(ids_used, full_size=151936)
  batch = vocab.compact_batch(batch)                 # tokens / targets: full ids -> rows
  cfg = vocab.compact_model_config(full_cfg)         # vocab_size n + 1, rest_ids V - n
  full_params = vocab.expand_params(params)          # pure dict, full-vocabulary rows
  vocab.save(path); CompactVocab.load(path)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Iterable

import numpy as np

from mage_jax.models.config import MageVLConfig, Qwen3Config

TOKEN_KEYS = ("tokens", "targets")


@dataclasses.dataclass(frozen=True, eq=False)
class CompactVocab:
  ids: np.ndarray      # [n] int32, sorted full-vocabulary ids; compact row i is ids[i], row n is "rest"
  full_size: int

  def __post_init__(self):
    ids = np.asarray(self.ids)
    if ids.ndim != 1 or not len(ids):
      raise ValueError("a compact vocabulary needs a non-empty 1-D list of token ids")
    if np.any(np.diff(ids) <= 0):
      raise ValueError("compact vocabulary ids must be sorted and unique")
    if ids[0] < 0 or ids[-1] >= self.full_size:
      raise ValueError(f"compact vocabulary ids must lie in [0, {self.full_size}); got "
                       f"{int(ids[0])}..{int(ids[-1])}")
    if len(ids) >= self.full_size:
      raise ValueError("a compact vocabulary must leave out at least one id (it has a rest row)")

  @classmethod
  def from_token_ids(cls, token_ids: Iterable[int], full_size: int) -> "CompactVocab":
    return cls(np.unique(np.fromiter((int(t) for t in token_ids), np.int64)).astype(np.int32), full_size)

  # --- sizes and maps ---
  @property
  def size(self) -> int:
    """Rows of the compact embedding: the kept ids and the rest row."""
    return len(self.ids) + 1

  @property
  def rest_ids(self) -> int:
    return self.full_size - len(self.ids)

  @property
  def rest_row(self) -> int:
    return len(self.ids)

  @property
  def table(self) -> np.ndarray:
    """[full_size] int32: the compact row of every full id (the rest row for ids not kept)."""
    t = np.full((self.full_size,), self.rest_row, np.int32)
    t[self.ids] = np.arange(len(self.ids), dtype=np.int32)
    return t

  def fingerprint(self) -> str:
    h = hashlib.sha256(np.asarray(self.ids, np.int32).tobytes())
    h.update(str(self.full_size).encode())
    return h.hexdigest()[:16]

  def to_compact(self, token_ids: np.ndarray, *, strict: bool = True, where: str = "") -> np.ndarray:
    """Full ids -> compact rows. strict: an id outside the vocabulary is an error (a model trained
    without it could never predict it); otherwise it maps to the rest row."""
    x = np.asarray(token_ids)
    out = self.table[x]
    if strict:
      bad = out == self.rest_row
      if bad.any():
        missing = sorted(set(int(v) for v in x[bad]))[:10]
        raise ValueError(f"{where or 'tokens'}: {int(bad.sum())} token(s) outside the compact "
                         f"vocabulary ({len(self.ids)} ids), e.g. ids {missing}")
    return out.astype(np.int32)

  def to_full(self, rows: np.ndarray) -> np.ndarray:
    """Compact rows -> full ids; the rest row (no single id) -> -1."""
    r = np.asarray(rows)
    return np.where(r < len(self.ids), self.ids[np.minimum(r, len(self.ids) - 1)], -1).astype(np.int32)

  def compact_batch(self, batch: dict[str, np.ndarray], *, strict: bool = True) -> dict[str, np.ndarray]:
    """A packed batch with `tokens` and `targets` mapped to compact rows (other keys as they are).
    An input id outside the vocabulary (e.g. in a tool's output) reads the rest row, exactly as the
    expanded model reads it; a *trained* target outside it is an error under `strict` (the model
    could never predict it), an untrained one maps to the rest row."""
    out = dict(batch)
    out["tokens"] = self.to_compact(batch["tokens"], strict=False)
    targets = np.asarray(batch["targets"])
    if strict and "loss_mask" in batch:   # only trained targets must be in the vocabulary
      trained = np.asarray(batch["loss_mask"]) > 0
      self.to_compact(targets[trained], strict=True, where="batch targets (trained)")
    out["targets"] = self.to_compact(targets, strict=False)
    return out

  # --- configs ---
  def compact_model_config(self, cfg: Qwen3Config | MageVLConfig) -> Qwen3Config | MageVLConfig:
    """The same architecture on the compact vocabulary (Mage-VL's image/vision token ids mapped)."""
    if isinstance(cfg, MageVLConfig):
      self._check_full(cfg.text)
      return dataclasses.replace(
          cfg, text=self.compact_model_config(cfg.text),
          image_token_id=int(self.to_compact(np.array([cfg.image_token_id]), where="image_token_id")[0]),
          vision_start_token_id=int(self.to_compact(np.array([cfg.vision_start_token_id]), where="vision_start_token_id")[0]),
          vision_end_token_id=int(self.to_compact(np.array([cfg.vision_end_token_id]), where="vision_end_token_id")[0]))
    self._check_full(cfg)
    return dataclasses.replace(cfg, vocab_size=self.size, rest_ids=self.rest_ids)

  def full_model_config(self, cfg: Qwen3Config | MageVLConfig,
                        like: Qwen3Config | MageVLConfig) -> Qwen3Config | MageVLConfig:
    """The full-vocabulary config a compact `cfg` expands to (`like`: the full config's token ids)."""
    if isinstance(cfg, MageVLConfig):
      return dataclasses.replace(
          cfg, text=self.full_model_config(cfg.text, like.text), image_token_id=like.image_token_id,
          vision_start_token_id=like.vision_start_token_id, vision_end_token_id=like.vision_end_token_id)
    return dataclasses.replace(cfg, vocab_size=self.full_size, rest_ids=0)

  def _check_full(self, text: Qwen3Config) -> None:
    if text.rest_ids or text.vocab_size != self.full_size:
      raise ValueError(f"expected a full-vocabulary config ({self.full_size} ids), got vocab_size="
                       f"{text.vocab_size} rest_ids={text.rest_ids}")

  # --- params (pure dicts: nnx.to_pure_dict) ---
  def expand_params(self, params: dict[str, Any]) -> dict[str, Any]:
    """Full-vocabulary params of a compact model: every embedding row / head column of an id
    outside the vocabulary is the rest row's."""
    return _map_vocab(params, lambda rows: np.asarray(rows)[self.table], self.size)

  def compact_params(self, params: dict[str, Any]) -> dict[str, Any]:
    """Compact params from full-vocabulary ones: the kept rows, and as the rest row the mean of the
    others (exact only when those are all equal, as after expand_params)."""
    rest = np.ones((self.full_size,), bool)
    rest[self.ids] = False

    def take(rows):
      rows = np.asarray(rows)
      return np.concatenate([rows[self.ids], rows[rest].mean(0, keepdims=True).astype(rows.dtype)])
    return _map_vocab(params, take, self.full_size)

  @classmethod
  def of_repeated_rows(cls, params: dict[str, Any], *, keep: Iterable[int] = (),
                       min_share: float = 0.5) -> "CompactVocab | None":
    """The compact vocabulary a full-vocabulary model already is: the ids whose embedding row (and,
    untied, head column) is one shared row are its rest; `keep` ids stay rows of their own. None
    when fewer than `min_share` of the ids share a row (a random init: every row differs). Exact
    by construction (equal rows give equal logits), so no file has to say which ids were trained:
    the params of a compact stage after `expand_params` come back to its vocabulary."""
    emb = np.asarray(_tower(params)["embed_tokens"]["embedding"])
    head = params.get("lm_head")
    cols = np.asarray(head["kernel"]).T if head else None
    v = emb.shape[0]
    sample = np.linspace(0, v - 1, 101).astype(np.int64)   # a row shared by most ids is among them
    best = max(sample, key=lambda i: int(np.sum(np.all(emb[sample] == emb[i], axis=1))))
    same = np.all(emb == emb[best], axis=1)
    if cols is not None:
      same &= np.all(cols == cols[best], axis=1)
    same[np.asarray(list(keep), np.int64)] = False
    if same.sum() < min_share * v:
      return None
    return cls(np.flatnonzero(~same).astype(np.int32), v)

  def serving_params(self, params: dict[str, Any]) -> dict[str, Any]:
    """Compact params of a model whose left-out rows are all equal (`of_repeated_rows`): the kept
    rows and, as the rest row, the first left-out id's own row (bit for bit, where
    `compact_params`'s mean may round)."""
    first_rest = int(np.flatnonzero(self.table == self.rest_row)[0])
    return _map_vocab(params, lambda rows: np.asarray(rows)[np.append(self.ids, first_rest)], self.full_size)

  def rest_logit(self) -> float:
    return math.log(self.rest_ids)

  # --- files ---
  def save(self, path: str) -> None:
    with open(path, "w") as f:
      json.dump({"full_size": self.full_size, "fingerprint": self.fingerprint(),
                 "ids": [int(i) for i in self.ids]}, f)

  @classmethod
  def load(cls, path: str) -> "CompactVocab":
    with open(path) as f:
      d = json.load(f)
    for key in ("full_size", "ids"):
      if key not in d:
        raise ValueError(f"{path}: compact vocabulary file has no `{key}` field")
    v = cls(np.asarray(d["ids"], np.int32), int(d["full_size"]))
    if d.get("fingerprint") and d["fingerprint"] != v.fingerprint():
      raise ValueError(f"{path}: fingerprint {d['fingerprint']} does not match its ids ({v.fingerprint()})")
    return v


def _tower(params: dict[str, Any]) -> dict[str, Any]:
  towers = [t for t in (params.get("model"), params.get("language_model")) if t is not None]
  if len(towers) != 1:
    raise ValueError("params hold no `model` or `language_model` tower with embed_tokens")
  return towers[0]


def _map_vocab(params: dict[str, Any], rows_fn, expect_rows: int) -> dict[str, Any]:
  """Apply rows_fn to the vocabulary axis of the embedding [V, D] and of an untied head [D, V]."""
  out = _copy_dicts(params)
  found = 0
  for tower in (out.get("model"), out.get("language_model")):   # Qwen3ForCausalLM / Mage-VL
    if tower is not None:
      emb = tower["embed_tokens"]["embedding"]
      if np.shape(emb)[0] != expect_rows:
        raise ValueError(f"embedding has {np.shape(emb)[0]} rows, expected {expect_rows}")
      tower["embed_tokens"]["embedding"] = rows_fn(emb)
      found += 1
  if found != 1:
    raise ValueError("params hold no `model` or `language_model` tower with embed_tokens")
  head = out.get("lm_head")
  if head:
    head["kernel"] = rows_fn(np.asarray(head["kernel"]).T).T
  return out


def _copy_dicts(d: Any) -> Any:
  return {k: _copy_dicts(v) for k, v in d.items()} if isinstance(d, dict) else d
