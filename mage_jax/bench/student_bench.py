"""Student update throughput (issue 36): the learning proof's SFT step as configs/proof.py ran it
(the full 151,936-id tied head and embedding) beside the same step on the compact vocabulary
launch.pretrain builds (models/compact_vocab.py), timed interleaved in one run.

Both steps see the same batch shape (the proof's 1,536-token rows, 4 per step) and the same
trained-token share (the assistant turns, ~15% of a row), so samples per step are equal and the
throughput ratio is the step-time ratio. Text tower only: the proof's 2-layer, 64-wide ViT is the
same in both and small beside the head. RL's update (the GRPO objective, one optimizer step) is
timed the same way, full against compact: the RL learner trains the compact vocabulary too.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from mage_jax.bench import lm_step, timing
from mage_jax.bench.results import Row, goal_row
from mage_jax.models.config import Qwen3Config

CMD = "python -m launch.bench --suite=cpu"
PROOF_TEXT = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=32, intermediate_size=384, tie_word_embeddings=True)   # configs/models.py


def _batch(batch_size: int, seq_len: int, vocab_ids: np.ndarray, trained_share: float) -> dict[str, np.ndarray]:
  """Rows of real-vocabulary ids (drawn from `vocab_ids`), loss on the last `trained_share` of each."""
  b = lm_step.packed_batch(batch_size, seq_len, None, len(vocab_ids))
  b["tokens"] = vocab_ids[b["tokens"] % len(vocab_ids)].astype(np.int32)
  b["targets"] = vocab_ids[b["targets"] % len(vocab_ids)].astype(np.int32)
  first = int(seq_len * (1 - trained_share))
  b["loss_mask"][:, :first] = 0.0
  return b


def student_throughput(vocab_ids: np.ndarray, *, batch_size: int = 4, seq_len: int = 1536,
                       trained_share: float = 0.15, reps: int = 5,
                       loss_chunk_size: int = 1024) -> tuple[list[Row], dict[str, Any]]:
  from mage_jax.models.compact_vocab import CompactVocab   # the bare GPU image runs this module: each path imports only what it needs
  full = Qwen3Config(**PROOF_TEXT)
  vocab = CompactVocab.from_token_ids(vocab_ids, full.vocab_size)
  batch = _batch(batch_size, seq_len, vocab.ids, trained_share)
  from mage_jax.bench.rl_bench import rl_batch   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.rl import objective as obj_lib   # the bare GPU image runs this module: each path imports only what it needs
  compact_cfg = vocab.compact_model_config(full)
  # RL's update (rl/loop.py: one optimizer step, logp_old from its own forward) on the same rows,
  # every trained token a policy token; the compact learner since session 20.
  rl_objective = obj_lib.rl_objective(obj_lib.RLLossConfig(), loss_chunk_size, logp_old_in_update=True)
  rl_full = rl_batch(batch)
  runners = {
      "full_vocab": lm_step.make_runner(lm_step.qwen3_factory(full), batch, loss_chunk_size=loss_chunk_size),
      "compact_vocab": lm_step.make_runner(lm_step.qwen3_factory(compact_cfg),
                                           vocab.compact_batch(batch), loss_chunk_size=loss_chunk_size),
      "rl_full_vocab": lm_step.make_runner(lm_step.qwen3_factory(full), rl_full,
                                           loss_chunk_size=loss_chunk_size, objective=rl_objective),
      "rl_compact_vocab": lm_step.make_runner(lm_step.qwen3_factory(compact_cfg),
                                              vocab.compact_batch(rl_full, strict=False),
                                              loss_chunk_size=loss_chunk_size, objective=rl_objective),
  }
  times = timing.interleaved(dict(runners), reps=reps, warmup=1)
  samples_per_step = batch_size   # equal for both: same rows, same packing
  sps = {k: samples_per_step / t.median_s for k, t in times.items()}
  ratio = sps["compact_vocab"] / sps["full_vocab"]
  rl_ratio = sps["rl_compact_vocab"] / sps["rl_full_vocab"]
  note = (f"proof student text tower 4x128, {batch_size}x{seq_len} tokens, {trained_share:.0%} trained; "
          f"compact vocabulary {len(vocab.ids)} ids")
  rows = [Row("student SFT step, full vocabulary", times["full_vocab"].median_s, "s", command=CMD, note=note),
          Row("student SFT step, compact vocabulary", times["compact_vocab"].median_s, "s", command=CMD, note=note),
          goal_row("student update throughput, compact / full (samples/s)", ratio, "x", 4.0, command=CMD,
                   note=note),
          Row("student RL update, full vocabulary", times["rl_full_vocab"].median_s, "s", command=CMD, note=note),
          Row("student RL update, compact vocabulary", times["rl_compact_vocab"].median_s, "s", command=CMD,
              note=note),
          Row("student RL update throughput, compact / full (samples/s)", rl_ratio, "x", command=CMD,
              note=note + "; text tower only (the proof's RL rows also carry screenshots through the ViT)")]
  return rows, {"times": {k: t.as_dict() for k, t in times.items()}, "samples_per_s": sps,
                "vocab_ids": int(len(vocab.ids)), "ratio": ratio, "rl_ratio": rl_ratio}


def proof_vocabulary(samples: int = 1_000) -> np.ndarray:
  """The compact vocabulary configs/pretrain.py builds for the proof family (sampled corpus)."""
  from mage_jax.data import copy_corpus   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.data.tokenizer import Tokenizer   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.runs import proof_base   # the bare GPU image runs this module: each path imports only what it needs
  corpus = copy_corpus.CopyCorpus(Tokenizer(), proof_base.proof_pools(), preambles=proof_base.system_turns(),
                                  preamble_share=0.25)
  return np.array(sorted(corpus.vocabulary(proof_base.family_texts(), samples=samples)), np.int32)
