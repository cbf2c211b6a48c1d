"""Prefix reuse in the embedded engine (engine/prefix_cache.py, slot_decode.extend_slot): a prompt
that starts like an earlier request's prompt + completion (an agent's next turn), like a live row
(a GRPO group's shared prompt) or only in part (a shared system turn) prefills just the rest, and
its tokens and log-probs equal an engine without reuse and an independent full forward
(`Policy.logits` + a NumPy log-softmax); a screenshot is matched by its pixels, never cut in two,
and a later image in the rest is sliced out of the request's vision inputs."""
from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from mage_jax import api
from mage_jax.engine import generate_batcher as gb
from mage_jax.engine import prefix_cache as pc
from mage_jax.models.config import MageVLConfig, MageViTConfig, Qwen3Config
from mage_jax.models.mage_vl import MageVL
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from tests.test_rl_rollout import TINY, log_softmax
from tests.test_vocab_serving import _perturbed

RNG = np.random.default_rng(0)
IDS = RNG.choice(np.arange(100, 150_000), 400, replace=False).astype(np.int32)


def _ids(n: int, seed: int) -> list[int]:
  return np.random.default_rng(seed).choice(IDS, n).tolist()


@pytest.fixture(scope="module")
def text_policy():
  cfg = Qwen3Config(**{**TINY, "num_hidden_layers": 2})
  return api.Policy(cfg=cfg, model=_perturbed(Qwen3ForCausalLM(cfg, rngs=nnx.Rngs(1)), 1, 0.5))


@pytest.fixture(scope="module")
def vl_policy():
  text = Qwen3Config(**{**TINY, "num_hidden_layers": 2})
  vision = MageViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         out_hidden_size=TINY["hidden_size"])
  cfg = MageVLConfig(text=text, vision=vision)
  return api.Policy(cfg=cfg, model=_perturbed(MageVL(cfg, rngs=nnx.Rngs(2)), 2, 0.5))


def _run(engine, jobs):
  finished = engine.admit(jobs)
  while engine.active:
    finished += engine.step()
  return finished


def _job(prompt, temperature=1.0, seed=0, max_tokens=6, vision=None):
  return gb.Job(np.asarray(prompt, np.int32), max_tokens=max_tokens, temperature=temperature, top_p=1.0,
                seed=seed, vision=vision or {})


def _same_as_without_reuse(policy, job, images=None):
  """The job's tokens equal a no-reuse engine's, and its log-probs an independent full forward's."""
  plain = gb.SlotEngine(1, eos_id=-1, prefix_cache_bytes=0)
  plain.use(policy, "")
  ref_job = _job(job.prompt, job.temperature, job.seed, job.max_tokens, job.vision)
  _run(plain, [ref_job])
  assert plain.prefix.stats()["hits"] == 0
  assert job.tokens == ref_job.tokens
  np.testing.assert_allclose(job.logprobs, ref_job.logprobs, atol=2e-5)
  ref = log_softmax(policy.logits(list(job.prompt) + job.tokens[:-1], images)[-len(job.tokens):])
  np.testing.assert_allclose(job.logprobs, ref[np.arange(len(job.tokens)), job.tokens], atol=1e-4)
  if job.temperature == 0.0:
    assert job.tokens == ref.argmax(-1).tolist()


def test_an_agents_next_turn_prefills_only_what_is_new(text_policy):
  engine = gb.SlotEngine(8, eos_id=-1)
  engine.use(text_policy, "v")
  turn0 = _job(_ids(100, 1), seed=1, max_tokens=8)
  _run(engine, [turn0])
  assert engine.prefix.stats() == dict(hits=0, misses=1, reused_tokens=0, prefilled_tokens=100,
                                       kept_rows=1, kept_bytes=engine.prefix.bytes)
  # turn 1: the prompt, the completion (its last token was never fed: not in the row), new text
  turn1 = _job(list(turn0.prompt) + turn0.tokens + _ids(20, 2), temperature=0.0, max_tokens=8)
  _run(engine, [turn1])
  stats = engine.prefix.stats()
  assert (stats["hits"], stats["reused_tokens"], stats["prefilled_tokens"]) == (1, 107, 100 + 21)
  assert stats["kept_rows"] == 1          # turn 1's row holds turn 0's and more: turn 0's row went
  # a prompt that shares only a first part (a system turn): the row's later entries are dropped
  other = _job(_ids(100, 1)[:60] + _ids(30, 3), seed=4)
  _run(engine, [other])
  assert engine.prefix.stats()["reused_tokens"] == 107 + 60
  for job in (turn0, turn1, other):
    _same_as_without_reuse(text_policy, job)


def test_a_group_sharing_one_prompt_copies_the_first_rows_prefix_while_it_runs(text_policy):
  prompt = _ids(80, 5)
  engine = gb.SlotEngine(8, eos_id=-1)
  engine.use(text_policy, "v")
  group = [_job(prompt, seed=s, max_tokens=10) for s in range(4)]
  finished = engine.admit(group)               # one prefill, three copies of its live row
  assert engine.prefix.stats()["reused_tokens"] == 3 * 79
  finished += engine.step()
  late = _job(prompt + _ids(10, 6), temperature=0.0, max_tokens=5)   # joins the running batch
  finished += engine.admit([late])
  assert engine.prefix.stats()["reused_tokens"] == 3 * 79 + 80
  while engine.active:
    finished += engine.step()
  assert len(finished) == 5 and len({tuple(j.tokens) for j in group}) == 4
  for job in [*group, late]:
    _same_as_without_reuse(text_policy, job)


def test_a_screenshot_is_matched_by_its_pixels_and_a_new_one_in_the_rest_is_sliced(vl_policy):
  cfg = vl_policy.cfg
  shot = lambda seed: (np.random.default_rng(seed).random((56, 84, 3)) * 255).astype(np.uint8)
  x, y, z = shot(1), shot(2), shot(3)
  image = [cfg.vision_start_token_id, cfg.image_token_id, cfg.vision_end_token_id]
  head = _ids(40, 7)
  engine = gb.SlotEngine(8, eos_id=-1)
  engine.use(vl_policy, "v")

  def job(text, images, **kw):
    tokens, vision = vl_policy._vision_inputs(np.asarray(text, np.int32), images)
    return _job(tokens, vision=vision, **kw), images

  first, first_images = job(head + image + [11], [x], seed=1, max_tokens=5)
  _run(engine, [first])
  pads = int((first.prompt == cfg.image_token_id).sum())
  # the next turn: the same screenshot (reused with its run), then a new one in the rest
  turn, turn_images = job(head + image + [11] + first.tokens + _ids(6, 8) + image + [13], [x, y],
                          temperature=0.0)
  _run(engine, [turn])
  assert engine.prefix.stats()["reused_tokens"] == len(first.prompt) + len(first.tokens) - 1
  # the same tokens with another screenshot: the match stops where the pad run starts
  swapped, swapped_images = job(head + image + [11] + first.tokens, [z], seed=3)
  before = engine.prefix.stats()["reused_tokens"]
  _run(engine, [swapped])
  assert engine.prefix.stats()["reused_tokens"] - before == 41 and pads > 1
  for j, images in ((first, first_images), (turn, turn_images), (swapped, swapped_images)):
    _same_as_without_reuse(vl_policy, j, images)


def test_keys_matching_and_the_kept_rows_budget(text_policy, vl_policy):
  cfg = vl_policy.cfg
  shot = (np.random.default_rng(1).random((28, 56, 3)) * 255).astype(np.uint8)
  tokens, vision = vl_policy._vision_inputs(np.asarray([5, 6, cfg.image_token_id, 7], np.int32), [shot])
  keys = pc.prompt_keys(tokens, vision, cfg.image_token_id, 4)
  run = np.flatnonzero(tokens == cfg.image_token_id)
  assert len(run) > 1 and (keys.keys[run] < 0).all() and len(set(keys.keys[run].tolist())) == 1
  assert (keys.image_of[run] == 1).all() and (keys.keys[:2] == [5, 6]).all()
  other = pc.prompt_keys(tokens, vl_policy._vision_inputs(tokens, [255 - shot])[1], cfg.image_token_id, 4)
  assert (other.keys[run] != keys.keys[run]).all()
  again = pc.prompt_keys(tokens, vl_policy._vision_inputs(tokens, [shot.copy()])[1], cfg.image_token_id, 4)
  np.testing.assert_array_equal(again.keys, keys.keys)
  # never inside an image; always one token left to prefill
  assert pc.usable_prefix(keys, run[0] + 2) == run[0]
  assert pc.usable_prefix(keys, len(tokens)) == len(tokens) - 1
  assert pc.suffix_vision(vision, keys, run[0] + 0)["patch_image_ids"].max() == 1
  assert pc.suffix_vision(vision, keys, len(tokens) - 1) == {}
  with pytest.raises(ValueError, match="budget_bytes"):
    pc.PrefixCache(-1)
  # the budget bounds the kept rows (least recently used out first); 0 turns reuse off
  engine = gb.SlotEngine(8, eos_id=-1)
  engine.use(text_policy, "v")
  _run(engine, [_job(_ids(100, 20), max_tokens=3)])
  one_row = engine.prefix.bytes
  engine.prefix.budget = 2 * one_row
  for seed in (21, 22, 23):
    _run(engine, [_job(_ids(100, seed), max_tokens=3)])
  assert len(engine.prefix.rows) == 2 and engine.prefix.bytes <= 2 * one_row
  last = _job(_ids(100, 23) + [5], max_tokens=2)
  _run(engine, [last])
  assert engine.prefix.stats()["reused_tokens"] == 100
  first_again = _job(_ids(100, 20) + [5], max_tokens=2)       # evicted: prefilled whole
  _run(engine, [first_again])
  assert engine.prefix.stats()["reused_tokens"] == 100
  off = gb.SlotEngine(8, eos_id=-1, prefix_cache_bytes=0)
  off.use(text_policy, "v")
  _run(off, [_job(_ids(100, 20), max_tokens=3)])
  _run(off, [_job(_ids(100, 20) + [5], max_tokens=3)])
  assert off.prefix.stats()["hits"] == 0 and not off.prefix.rows
  # new weights: the kept rows (the old weights' keys and values) go
  engine.use(api.Policy(cfg=text_policy.cfg, model=text_policy.model), "v2")
  assert not engine.prefix.rows


def test_the_servers_reset_prefix_cache_drops_the_kept_rows(tmp_path):
  from mage_jax.engine.rollout_client import RolloutClient
  from mage_jax.engine.rollout_server import RolloutServer
  from tests.test_rl_rollout import make_hf_dir
  prompt = _ids(60, 9)
  with RolloutServer(make_hf_dir(str(tmp_path / "ckpt"), 0)) as server:
    client = RolloutClient(server.url, "mage", timeout=300)
    first = client.complete(prompt, max_tokens=4, temperature=1.0, seed=1)
    again = client.complete(prompt, max_tokens=4, temperature=1.0, seed=1)
    stats = server.batcher.engine.prefix.stats()
    assert (stats["hits"], stats["reused_tokens"]) == (1, 59)
    assert again.token_ids == first.token_ids
    np.testing.assert_allclose(again.logprobs, first.logprobs, atol=1e-5)
    client.reset_prefix_cache()
    client.complete(prompt, max_tokens=4, temperature=1.0, seed=1)
    stats = server.batcher.engine.prefix.stats()
    assert (stats["hits"], stats["misses"]) == (1, 2)
