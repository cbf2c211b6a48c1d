"""The proof's eval_init serves the compact student's random init (configs/proof.py): built on the
base's compact vocabulary and exported expanded to the full one, so every id outside the vocabulary
has the rest row (what lets the engine decode it on its rows), while eval_sft and eval_rl load the
trained stages' full-vocabulary params as before."""
import json
import os

import numpy as np
from safetensors.numpy import load_file

from configs import proof
from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.runs import curriculum, proof_steps


def test_eval_init_is_the_compact_students_init_and_the_others_are_not(tmp_path):
  top = proof.get_config(None)
  top.shared_dir = str(tmp_path / "shared")
  synth = str(tmp_path / "w" / "synth")
  vocab = str(tmp_path / "w" / "base" / "vocab.json")
  init = curriculum.stage_config(top, top.stages.eval_init, "", synth)
  assert (init.model.compact_vocab, init.proof.params) == (vocab, "init")
  for name in ("eval_sft", "eval_rl"):
    stage = curriculum.stage_config(top, top.stages[name], "", synth)
    assert not stage.model.get("compact_vocab", "") and stage.proof.params == "previous"


def test_a_compact_random_init_is_served_full_with_one_rest_row(tmp_path):
  cfg = proof.get_config("eval,smoke")
  cfg.data.batch_size = 8   # the test run's 8 host devices are one fsdp axis
  kept = np.concatenate([np.arange(0, 3000, 3), np.arange(151643, 151669)])   # + the special ids
  vocab = CompactVocab.from_token_ids(kept, cfg.model.text.vocab_size)
  vocab.save(str(tmp_path / "vocab.json"))
  cfg.model.compact_vocab = str(tmp_path / "vocab.json")
  path, probe = proof_steps.served_weights(cfg, "", str(tmp_path / "weights"))
  assert probe is None
  with open(os.path.join(path, "config.json")) as f:
    full = json.load(f)
  text = full.get("text_config", full)
  assert text["vocab_size"] == cfg.model.text.vocab_size   # full ids, as HF / vLLM load them
  tensors = load_file(os.path.join(path, "model.safetensors"))
  emb = next(v for k, v in tensors.items() if k.endswith("embed_tokens.weight")).astype(np.float32)
  assert emb.shape[0] == cfg.model.text.vocab_size
  rest = np.ones(len(emb), bool)
  rest[kept] = False
  assert np.all(emb[rest] == emb[np.flatnonzero(rest)[0]])        # one rest row for the others
  assert len(np.unique(emb[kept], axis=0)) == len(kept)             # each kept id its own row
  assert not np.any(np.all(emb[kept] == emb[np.flatnonzero(rest)[0]], axis=1))
