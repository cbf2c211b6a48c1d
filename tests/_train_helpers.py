"""Shared helpers for the trainer tests: tiny packed bins on disk and the
environment of training subprocesses (one CPU device, a shared compilation cache)."""
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_bins(directory: str, n: int, seq_len: int, seed: int = 0, source_id: int = 0,
               vocab: int = 2000, train_from: float = 0.5) -> None:
  """n text-only bins of two random segments each into <directory> (ArrayRecord shards);
  the loss mask trains each segment from `train_from` of its length on. The two
  segments fill the row exactly, so no pad token (id 151643) appears and a model
  with a small vocabulary (> `vocab`) can train on the bins."""
  from mage_jax.data import packing, records
  rng = np.random.default_rng(seed)
  bins = []
  for i in range(n):
    segs = []
    first = int(rng.integers(seq_len // 4, 3 * seq_len // 4))
    for j, length in enumerate((first, seq_len - first)):
      toks = rng.integers(0, vocab, length).astype(np.int32)
      mask = np.zeros(length, bool)
      mask[int(length * train_from):] = True
      segs.append(packing.Segment(tokens=toks, loss_mask=mask,
                                  patches=np.zeros((0, 768), np.uint8),
                                  patch_positions=np.zeros((0, 3), np.int32), image_patches=[],
                                  source_id=source_id, meta={"episode_id": f"b{seed}-{i}-{j}"}))
    bins.append(packing.PackedBin(segs))
  records.write_bins(bins, directory, seq_len, 4, 8)


def subprocess_env(cache_dir: str | None = None) -> dict[str, str]:
  """One CPU device (like a laptop; conftest gives this process 8) and, when
  given, a persistent compilation cache the test's subprocesses share, so only
  the first one pays for compiling the step."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)
  if cache_dir:
    env.update(JAX_COMPILATION_CACHE_DIR=cache_dir, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  return env
