"""sync_weights against the embedded rollout server on loopback (tiny random-init checkpoints)."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from mage_jax.engine.rollout_client import RolloutClient
from mage_jax.engine.rollout_server import RolloutServer
from mage_jax.engine.weight_sync import WeightSyncError, model_logprobs_fn, sync_weights
from tests.test_rl_rollout import PROMPT, log_softmax, make_hf_dir, tiny_cfg, tiny_model


class StaleServer(RolloutServer):
  """Acknowledges reload_weights and reports the new path, but keeps serving the old weights."""

  def reload_weights(self, path: str) -> None:
    self._path = os.path.abspath(path)


class NoOpServer(RolloutServer):
  """Acknowledges reload_weights and changes nothing at all."""

  def reload_weights(self, path: str) -> None:
    pass


@pytest.fixture(scope="module")
def start_ckpt(tmp_path_factory):
  return make_hf_dir(str(tmp_path_factory.mktemp("sync_start") / "a"), 0)


@pytest.fixture(scope="module")
def learner():
  return tiny_model(1)  # different weights from what the server starts with


def _sync(server, learner, out_root, version, **kw):
  client = RolloutClient(server.url, "mage", timeout=120)
  return sync_weights(client, learner, tiny_cfg(), out_root=out_root, version=version, probe_tokens=PROMPT,
                      learner_logprobs_fn=model_logprobs_fn(learner, tiny_cfg()), **kw), client


def test_sync_makes_the_learner_weights_live_and_prunes(start_ckpt, learner, tmp_path):
  out_root = str(tmp_path / "sync")
  with RolloutServer(start_ckpt) as server:
    client = RolloutClient(server.url, "mage", timeout=120)
    before = client.complete(PROMPT, max_tokens=4, temperature=0.0)
    report, client = _sync(server, learner, out_root, 1)
    assert report.path == os.path.join(out_root, "v1") and client.served_weights() == report.path
    assert report.probe_max_abs_diff <= 0.05 and report.seconds > 0 and report.version == 1
    assert not client.is_paused()
    # The engine now answers with the learner's distribution (bf16 export vs fp32 learner).
    after = client.complete(PROMPT, max_tokens=4, temperature=0.0)
    logp = log_softmax(np.asarray(learner.logits(learner(*_inputs(PROMPT + after.token_ids[:-1])))[0]))
    np.testing.assert_allclose(after.logprobs, logp[len(PROMPT) - 1:][np.arange(4), after.token_ids], atol=0.05)
    assert np.max(np.abs(np.asarray(after.logprobs) - before.logprobs)) > 0.1 or after.token_ids != before.token_ids
    for v in (2, 3):
      _sync(server, learner, out_root, v, keep=2)
    assert sorted(os.listdir(out_root)) == ["v2", "v3"]


def _inputs(tokens):
  import jax.numpy as jnp
  t = len(tokens)
  return (jnp.asarray(tokens, jnp.int32)[None], jnp.arange(t, dtype=jnp.int32)[None],
          jnp.ones((1, t), jnp.int32))


def test_stale_weights_fail_the_probe(start_ckpt, learner, tmp_path):
  """The error names the probe, both figures and the likely cause; only probe=False (a run's
  explicit config.rl.sync_probe=False) lets the same stale engine through, reporting no figure."""
  with StaleServer(start_ckpt) as server:
    with pytest.raises(WeightSyncError) as err:
      _sync(server, learner, str(tmp_path / "sync"), 7)
    assert not server.paused
    figure = re.search(r"post-sync probe failed: max \|engine - learner\| log-prob ([0-9.e+-]+) > "
                       r"tolerance 0.05, over the greedy completion of the \d+-token probe prompt on "
                       r"http://\S+; likely cause: ", str(err.value))
    assert figure, str(err.value)
    cause = "other weights than the export" if float(figure.group(1)) > 1.0 else "lower precision"
    assert cause in str(err.value)
    report, _ = _sync(server, learner, str(tmp_path / "unchecked"), 8, probe=False)
    assert report.probe_max_abs_diff is None and report.version == 8


def test_a_one_step_update_is_seen_against_the_exported_weights(start_ckpt, tmp_path):
  """The learner is the engine's weights plus one small sign step (about what one Adam step
  does): against the bf16-rounded reference a stale engine fails a tight tolerance while a
  fresh one passes it. (Against the fp32 master copy the fresh engine was already 0.009 away.)"""
  import jax
  from flax import nnx
  from mage_jax import api
  base = api.load(start_ckpt).model       # exactly what the engine serves at the start
  graphdef, state = nnx.split(base)
  step = jax.tree_util.tree_map(lambda x: x + 2e-3 * jax.numpy.sign(
      jax.random.normal(jax.random.key(3), x.shape)), state)
  learner = nnx.merge(graphdef, step)
  with RolloutServer(start_ckpt) as server:
    report, _ = _sync(server, learner, str(tmp_path / "fresh"), 1, tolerance=1e-3)
    assert report.probe_max_abs_diff < 1e-4
  with StaleServer(start_ckpt) as server:
    with pytest.raises(WeightSyncError, match=r"post-sync probe failed: .* > tolerance 0.001"):
      _sync(server, learner, str(tmp_path / "stale"), 1, tolerance=1e-3)


def test_ignored_reload_fails_on_the_served_path(start_ckpt, learner, tmp_path):
  with NoOpServer(start_ckpt) as server:
    with pytest.raises(WeightSyncError, match=r"serves .*/a, not .*/v4"):
      _sync(server, learner, str(tmp_path / "sync"), 4)


def test_failed_reload_raises_and_leaves_the_engine_running(start_ckpt, learner, tmp_path):
  with RolloutServer(start_ckpt) as server:
    def broken(path):
      from mage_jax.engine.rollout_server import RequestError
      raise RequestError(f"reload_weights({path}) failed: disk full", status=500)
    server.reload_weights = broken
    with pytest.raises(WeightSyncError, match=r"sync v5 .*HTTP 500.*disk full"):
      _sync(server, learner, str(tmp_path / "sync"), 5)
    assert not server.paused and RolloutClient(server.url, "mage").served_weights() == start_ckpt


def test_learner_logprobs_fn_too_short_is_an_error(start_ckpt, learner, tmp_path):
  with RolloutServer(start_ckpt) as server:
    client = RolloutClient(server.url, "mage", timeout=120)
    with pytest.raises(WeightSyncError, match="returned 1 log-probs"):
      sync_weights(client, learner, tiny_cfg(), out_root=str(tmp_path / "s"), version=1, probe_tokens=PROMPT,
                   learner_logprobs_fn=lambda tokens: np.zeros(1))
