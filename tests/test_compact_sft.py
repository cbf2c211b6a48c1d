"""SFT on a compact vocabulary (config.model.compact_vocab): started from a full-vocabulary HF base
that launch.pretrain would write, the compact run's first-step loss equals the full-vocabulary
run's (the two models are the same function), and its final params come out full-vocabulary."""
import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

from configs import stage2_gui_sft
from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import Qwen3Config
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from mage_jax.train import checkpoint as ckpt_lib
from mage_jax.train import loop, run_setup
from mage_jax.weights.hf import save_hf
from tests._train_helpers import write_bins

SEQ, FULL = 64, 4096
KEPT = np.arange(2000)   # write_bins draws ids < 2000


def _config(tmp_path, packed: str, **extra):
  c = stage2_gui_sft.get_config("tiny")
  c.synth.enabled = False
  c.data.packed_dir = packed
  c.data.seq_len = SEQ
  c.data.patch_budget = 4
  c.data.batch_size = 8
  c.model.arch = "qwen3"
  c.model.text.vocab_size = FULL
  c.model.text.tie_word_embeddings = True
  c.train.total_steps = 2
  c.checkpoint.update(every_steps=100, async_save=False)
  c.log.every_steps = 1
  c.log.tensorboard = False
  c.log.peak_tflops_per_device = 1.0
  c.eval.click_jsonl = ""
  c.step.loss_chunk_size = 32
  c.optimizer.warmup_steps = 0
  for k, v in extra.items():
    section, field = k.split("__")
    c[section][field] = v
  return c


def _base(tmp_path, cfg: Qwen3Config, vocab: CompactVocab) -> str:
  """A full-vocabulary HF checkpoint expanded from a random compact model (what pretraining writes)."""
  small = Qwen3ForCausalLM(vocab.compact_model_config(cfg), rngs=nnx.Rngs(3))
  pure = vocab.expand_params(jax.tree_util.tree_map(np.asarray, nnx.to_pure_dict(nnx.state(small, nnx.Param))))
  state = nnx.state(nnx.eval_shape(lambda: Qwen3ForCausalLM(cfg, rngs=nnx.Rngs(0))), nnx.Param)
  nnx.replace_by_pure_dict(state, pure)
  out = str(tmp_path / "base_hf")
  save_hf(state, cfg, out, dtype="float32")
  return out


def _first_loss(workdir: str) -> float:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return next(r["loss"] for r in rows if r.get("step") == 1 and "loss" in r)


def test_compact_sft_equals_full_vocabulary_and_hands_on_full_params(tmp_path):
  packed = str(tmp_path / "packed")
  write_bins(os.path.join(packed, "gui"), n=16, seq_len=SEQ)
  vocab = CompactVocab.from_token_ids(KEPT, FULL)
  vocab_file = str(tmp_path / "vocab.json")
  vocab.save(vocab_file)
  probe = _config(tmp_path, packed)
  full_cfg = Qwen3Config(**probe.model.text.to_dict())
  base = _base(tmp_path, full_cfg, vocab)

  full_run = str(tmp_path / "full")
  loop.train(_config(tmp_path, packed, init__from_dir=base), full_run)
  compact_run = str(tmp_path / "compact")
  summary = loop.train(_config(tmp_path, packed, init__from_dir=base, model__compact_vocab=vocab_file),
                       compact_run)
  assert summary["steps"] == 2
  np.testing.assert_allclose(_first_loss(compact_run), _first_loss(full_run), rtol=1e-5)

  # the stage hands on full-vocabulary params: the full model's abstract params load them
  t = loop.build(_config(tmp_path, packed), str(tmp_path / "reader"), prepare_data=False)
  params = ckpt_lib.load_final_params(compact_run, t.abstract.params, t.meta)
  emb = np.asarray(jax.device_get(params["model"]["embed_tokens"]["embedding"][...]))
  assert emb.shape == (FULL, full_cfg.hidden_size)
  left_out = emb[2000:]
  np.testing.assert_array_equal(left_out, np.broadcast_to(left_out[0], left_out.shape))  # the rest row

  # a next stage may start from that stage dir on the compact vocabulary again (the proof's sft after
  # its vision stage): the same function as starting from it on the full vocabulary
  next_full = str(tmp_path / "next_full")
  loop.train(_config(tmp_path, packed, init__from_dir=compact_run), next_full)
  next_compact = str(tmp_path / "next_compact")
  loop.train(_config(tmp_path, packed, init__from_dir=compact_run, model__compact_vocab=vocab_file), next_compact)
  np.testing.assert_allclose(_first_loss(next_compact), _first_loss(next_full), rtol=1e-5)
  assert _first_loss(next_compact) < _first_loss(compact_run)   # it did start from the trained params


def test_compact_rows_map_back_to_full_ids():
  vocab = CompactVocab.from_token_ids([7, 3, 11], 20)
  rows = vocab.to_compact(np.array([3, 7, 11, 5]), strict=False)
  np.testing.assert_array_equal(vocab.to_full(rows), [3, 7, 11, -1])   # 5 reads the rest row


def test_compact_vocab_config_errors(tmp_path):
  packed = str(tmp_path / "packed")
  with pytest.raises(run_setup.ConfigError, match="compact_vocab.*no such file"):
    run_setup.check_init(_config(tmp_path, packed, model__compact_vocab=str(tmp_path / "missing.json")))
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps({"full_size": FULL}))
  with pytest.raises(run_setup.ConfigError, match="no `ids` field"):
    run_setup.compact_vocab(_config(tmp_path, packed, model__compact_vocab=str(bad)))
