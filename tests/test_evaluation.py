"""Held-out loss per data source equals a direct per-source computation (model
forward + NumPy log-softmax over every bin of that source)."""
import os

import jax
import numpy as np

from tests._train_helpers import write_bins
from configs import common, stage2_gui_sft
from mage_jax.data import records
from mage_jax.train import evaluation, loop
from mage_jax.train.state import merge_model

SEQ = 64


def _naive(model, bins: list[dict]) -> tuple[float, float]:
  """Token-mean NLL and accuracy over the trained tokens of `bins`, one bin at a time."""
  nll = correct = tokens = 0.0
  head = np.asarray(model.lm_head_kernel(), np.float64)
  for b in bins:
    hidden = model(b["tokens"][None], b["positions"][None], b["segment_ids"][None])
    logits = np.asarray(hidden[0], np.float64) @ head
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    m = b["loss_mask"] > 0
    nll -= logp[m, b["targets"][m]].sum()
    correct += (logits[m].argmax(-1) == b["targets"][m]).sum()
    tokens += m.sum()
  return nll / tokens, correct / tokens


def test_heldout_loss_per_source_matches_naive(tmp_path):
  heldout = tmp_path / "heldout"
  # Both sources were packed on their own, so both store source id 0: the loss must
  # still be attributed by folder. Counts not divisible by the batch (8) exercise padding.
  write_bins(str(heldout / "alpha"), n=5, seq_len=SEQ, seed=1, train_from=0.2)
  write_bins(str(heldout / "beta"), n=3, seq_len=SEQ, seed=2, train_from=0.7)
  c = stage2_gui_sft.get_config("tiny")
  c.model.arch = "qwen3"
  common.set_sources(c, {"alpha": ("unused.jsonl", 1.0, 2), "beta": ("unused.jsonl", 3.0, 2),
                         "gamma": ("unused.jsonl", 1.0, 2)})  # gamma: no held-out folder
  c.data.batch_size = 8
  c.step.loss_chunk_size = 16
  c.eval.heldout_dir = str(heldout)
  c.eval.num_batches = 1
  t = loop.build(c, str(tmp_path / "w"), prepare_data=False)
  params = loop.initial_state(t).params
  got = evaluation.heldout_loss(t, params, c)

  model = merge_model(t.graphdef, jax.device_get(params), t.rest)
  for name in ("alpha", "beta"):
    bins = [records.decode_bin(r) for r in records.read_records(records.shard_paths(str(heldout / name)))]
    loss, acc = _naive(model, bins)
    np.testing.assert_allclose(got[f"heldout_loss/{name}"], loss, rtol=2e-5)
    np.testing.assert_allclose(got[f"heldout_accuracy/{name}"], acc, atol=1e-9)
    assert got[f"heldout_bins/{name}"] == len(bins)
  assert not any("gamma" in k for k in got)
  # eval.num_batches caps the bins read per source.
  c.eval.num_batches = 0
  assert evaluation.heldout_loss(t, params, c)["heldout_bins/alpha"] == 0
