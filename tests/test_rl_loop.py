"""The async GRPO loop: rollout policy and group plumbing (fast), train_rl end to end on a tiny
model against the embedded rollout server with a toy rollout_fn, and launch.rl with real
terminal tasks of the built-in suite (slow)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from mage_jax.engine.rollout_client import Completion, RolloutClient, RolloutError
from mage_jax.rl.rollouts import (EpisodeSamples, RolloutContext, RolloutGroup, RolloutPolicy,
                                  group_from_results)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
GOOD_BELOW = 151_936 // 2   # toy reward: fraction of completion ids below this


class FakeClient:
  base_url = "http://fake/v1"

  def __init__(self):
    self.calls = []

  def complete(self, prompt_token_ids, *, max_tokens, temperature=1.0, top_p=1.0, seed=None):
    self.calls.append((list(prompt_token_ids), seed))
    ids = [5, 6, 151645][:max_tokens]
    return Completion(text="hi", token_ids=ids, logprobs=[-0.5] * len(ids),
                      prompt_token_ids=list(prompt_token_ids), finish_reason="stop")

  def chat(self, messages, *, max_tokens, temperature=1.0, top_p=1.0, seed=None):
    """Echoes an engine prompt with `self.chat_pads` image pads (set by the test)."""
    self.calls.append((messages, seed))
    ids = [7, 151645][:max_tokens]
    engine_prompt = [151644, 872, 198, 151652] + [151655] * self.chat_pads + [151653, 151645]
    return Completion(text="ok", token_ids=ids, logprobs=[-0.25] * len(ids),
                      prompt_token_ids=engine_prompt, finish_reason="stop")


def request(task_id="t", episode_id="t-e0", prompt=PROMPT, images=(), t=1):
  return types.SimpleNamespace(task=types.SimpleNamespace(id=task_id), prompt_tokens=np.asarray(prompt),
                               images=list(images), episode=types.SimpleNamespace(id=episode_id), t=t)


def test_rollout_policy_is_token_in_token_out_and_stamps_the_served_version():
  version = [4]
  client = FakeClient()
  pol = RolloutPolicy(RolloutContext(client, lambda: version[0], max_tokens=3, seed=1), "t", "t-e0")
  out = pol.act(request())
  version[0] = 5
  pol.act(request(prompt=PROMPT + [5, 6]))
  assert client.calls[0][0] == PROMPT and client.calls[1][0] == PROMPT + [5, 6]
  assert client.calls[0][1] != client.calls[1][1]            # a fresh seed per call
  assert out.prompt_ids == PROMPT and out.completion_ids == [5, 6, 151645] and out.logprobs == [-0.5] * 3
  assert [(s.version, s.prompt_ids, s.episode_id) for s in pol.samples] == [
      (4, PROMPT, "t-e0"), (5, PROMPT + [5, 6], "t-e0")]



def test_a_sync_between_two_calls_of_one_episode_stamps_each_call_with_its_own_version(tmp_path):
  """The harness over the local pool and a loopback engine: a weight sync (its label step, as
  weight_sync does it) lands while call 1 is in flight. Call 1 keeps the version read before it
  (0, conservative), call 2 gets 1; the learner's counter never moved, so both come from the
  engine. The group's version is the older one and the lag accounting counts each sample's own."""
  from mage_jax.agent.episode import EpisodeConfig
  from mage_jax.tasks.builtin import builtin_packages
  from mage_jax.bench.fleet_sim import WaitEnv
  from mage_jax.rl.admission import AdmissionWindow
  from mage_jax.rl.loop import rollout_stats
  from mage_jax.rl.rollouts import HarnessRollouts, ServedVersion
  from tests._engine_stub import TERMINATE, WAIT, ScriptedEngine
  task = builtin_packages()[0]
  learner_counter = [0]
  with ScriptedEngine([WAIT, TERMINATE]) as engine:
    client = RolloutClient(engine.url, "mage", timeout=30)
    engine.on_call = lambda i: i == 0 and client.update_weight_version("1")
    ctx = RolloutContext(client, ServedVersion(client, lambda: learner_counter[0]), max_tokens=3)
    rollouts = HarnessRollouts([task], WaitEnv, EpisodeConfig(out_dir=str(tmp_path), score_settle=0,
                                                               max_steps=2), 1, group_queue="shared")
    try:
      group = rollouts(ctx, task.id, 1, "g0")
    finally:
      rollouts.close()
  samples = group.episodes[0].samples
  assert [s.version for s in samples] == [0, 1] and group.version == 0 and engine.calls == 2
  stats = rollout_stats([group], samples, version=1, lag=3)   # stamps frozen at 0: 0 and 2
  assert (stats["staleness_0"], stats["staleness_1"], stats["max_staleness"]) == (1.0, 1.0, 1.0)
  # stale by its oldest call: at learner version 4 the group (version 0) is refused, at 3 admitted
  assert not AdmissionWindow(3).is_fresh(group.version, 4) and AdmissionWindow(3).is_fresh(group.version, 3)


def test_the_engines_per_choice_weight_versions_stamp_the_call_exactly():
  """vLLM 0.33 says which weights sampled the tokens: that wins over the pre-call read (the sync
  landed before call 1 was sampled, so call 1 is version 1 too); a non-integer label is refused."""
  from mage_jax.rl.rollouts import ServedVersion
  from tests._engine_stub import WAIT, ScriptedEngine
  with ScriptedEngine([WAIT], spans=True) as engine:
    client = RolloutClient(engine.url, "mage", timeout=30)
    engine.on_call = lambda i: i == 0 and client.update_weight_version("1")
    pol = RolloutPolicy(RolloutContext(client, ServedVersion(client, lambda: 0), max_tokens=3), "t", "t-e0")
    pol.act(request())
    assert pol.samples[0].version == 1
    client.update_weight_version("v2")
    with pytest.raises(RolloutError, match=r"weight_info: weight version label 'v2' is not an integer"):
      pol.act(request())


def test_rollout_policy_sends_screenshots_through_chat_and_checks_the_pad_count():
  # A rendered user turn with one 64x96 screenshot: (64/16)(96/16)/4 = 6 merged tokens.
  image = np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8)
  prompt = [151644, 872, 198, 151652] + [151655] * 6 + [151653, 151645, 198, 151644, 77091, 198]
  client = FakeClient()
  pol = RolloutPolicy(RolloutContext(client, lambda: 2, max_tokens=4), "gui_t", "gui_t-e0")
  client.chat_pads = 6
  out = pol.act(request("gui_t", "gui_t-e0", prompt, [image]))
  messages = client.calls[0][0]
  parts = messages[0]["content"]
  assert messages[0]["role"] == "user" and [p["type"] for p in parts] == ["image_url"]
  assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
  engine_prompt = [151644, 872, 198, 151652] + [151655] * 6 + [151653, 151645]
  s = pol.samples[0]
  assert s.prompt_ids == engine_prompt and out.prompt_ids == engine_prompt   # the engine's ids
  assert s.completion_ids == [7, 151645] and s.rollout_logprobs == [-0.25, -0.25] and s.version == 2
  assert len(s.images) == 1 and s.images[0] is not None and np.array_equal(s.images[0], image)
  client.chat_pads = 5   # the engine resized the screenshot differently
  with pytest.raises(RolloutError, match=r"task 'gui_t' step 3: .*5 <\|image_pad\|>.*\[6\]"):
    pol.act(request("gui_t", "gui_t-e0", prompt, [image], t=3))
  assert pol.error is not None and len(pol.samples) == 1


def test_dead_server_is_a_clear_error_not_an_env_error():
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]          # closed again: nothing listens there
  client = RolloutClient(f"http://127.0.0.1:{port}/v1", "mage", timeout=5, retries=0)
  pol = RolloutPolicy(RolloutContext(client, lambda: 0, max_tokens=4), "t", "g0-e0")
  with pytest.raises(RolloutError, match=str(port)):
    pol.act(request())
  # The slot pool turns any exception into an env_error result; the group runner re-raises it.
  res = types.SimpleNamespace(status="env_error", model_calls=1, episode=None, records=[])
  with pytest.raises(RolloutError, match="group g0"):
    group_from_results("t", "g0", [res], [pol])


def test_group_from_results_maps_episodes_and_leaves_env_errors_out():
  client = FakeClient()
  pols = [RolloutPolicy(RolloutContext(client, lambda: 2, max_tokens=3), "t", f"g1-e{i}") for i in range(3)]
  for i, p in enumerate(pols):
    p.act(request(episode_id=f"g1-e{i}"))
  ok = lambda i, score: types.SimpleNamespace(  # noqa: E731
      status="terminated", model_calls=1, score=score, parse_errors={"no_tool_call": i},
      spray={"clicks_per_step": float(i)}, episode=types.SimpleNamespace(id=f"g1-e{i}"),
      records=[{"parse_error": "no_tool_call" if i else ""}])   # one per call, as run_episode writes
  crashed = types.SimpleNamespace(status="env_error", error_reason="deadline", model_calls=1,
                                  episode=None, records=[])
  g = group_from_results("t", "g1", [ok(2, 1.0), crashed, ok(0, 0.0)], pols)
  assert [e.episode_id for e in g.episodes] == ["g1-e2", "g1-e0"]
  np.testing.assert_array_equal(g.rewards, [1.0, 0.0])
  assert g.env_errors == 1 and g.deadline_episodes == 1 and g.version == 2 and g.num_samples == 2
  assert [e.parse_errors for e in g.episodes] == [2, 0]
  assert [e.spray for e in g.episodes] == [{"clicks_per_step": 2.0}, {"clicks_per_step": 0.0}]
  # each call's sample says whether the harness parsed it (from the episode's record of that call)
  assert [[s.parsed for s in e.samples] for e in g.episodes] == [[False], [True]]
  # a record per call is what ties samples to calls: a mismatch is an error, not a guess
  pols[1].act(request(episode_id="g1-e1"))
  with pytest.raises(RolloutError, match="recorded 1 calls, its policy 2 samples"):
    group_from_results("t", "g2", [ok(1, 1.0)], pols)


def test_samples_get_their_groups_relative_advantage():
  from mage_jax.rl.batch import RLSample
  from mage_jax.rl.loop import samples_with_advantages

  def ep(reward, n_calls):
    return EpisodeSamples("e", reward, [RLSample([1], [2], [-1.0], 0.0, 0) for _ in range(n_calls)])
  groups = [RolloutGroup("a", "g0", [ep(1.0, 2), ep(0.0, 1), ep(0.5, 1)]),
            RolloutGroup("b", "g1", [ep(1.0, 1), ep(1.0, 1)])]
  samples, flat = samples_with_advantages(groups, eps=1e-6)
  r = np.array([1.0, 0.0, 0.5])
  a = (r - r.mean()) / (r.std() + 1e-6)     # population std, per group (DESIGN.md)
  np.testing.assert_allclose([s.advantage for s in samples], [a[0], a[0], a[1], a[2], 0.0, 0.0],
                             rtol=1e-5, atol=1e-6)
  assert flat == 1
  # the flat group's samples (and the one at the mean of its group) carry no gradient: not packed
  from mage_jax.rl.loop import samples_with_gradient
  kept, left_out = samples_with_gradient(samples)
  assert left_out == 3 and [s.advantage for s in kept] == [s.advantage for s in samples[:3]]


def test_a_call_the_harness_could_not_parse_is_never_reinforced():
  """An episode can succeed after a parse error (the step budget has room): its broken call gets
  min(A, 0), so a success does not push it up, and a failure still pushes it down."""
  from mage_jax.rl.batch import RLSample
  from mage_jax.rl.loop import samples_with_advantages, samples_with_gradient

  def ep(reward, parsed):
    return EpisodeSamples("e", reward, [RLSample([1], [2], [-1.0], 0.0, 0, parsed=p) for p in parsed])
  groups = [RolloutGroup("a", "g0", [ep(1.0, [True, False, True]), ep(0.0, [False, True]), ep(1.0, [True])])]
  samples, flat = samples_with_advantages(groups, eps=1e-6)
  r = np.array([1.0, 0.0, 1.0])
  a = (r - r.mean()) / (r.std() + 1e-6)
  assert a[0] > 0 > a[1]
  np.testing.assert_allclose([s.advantage for s in samples], [a[0], 0.0, a[0], a[1], a[1], a[2]],
                             rtol=1e-5, atol=1e-6)
  assert flat == 0
  kept, left_out = samples_with_gradient(samples)
  assert left_out == 1 and [s.parsed for s in kept] == [True, True, False, True, True]


# --- end to end ----------------------------------------------------------------------------------


def tiny_rl_config(updates: int = 3):
  from configs import models, stage5_rl
  c = stage5_rl.get_config("tiny")
  c.model = models.get_config("qwen3_tiny")
  c.model.text.update(compute_dtype="float32", param_dtype="float32", remat_policy="none",
                      attention_backend="xla")
  c.data.seq_len, c.data.batch_size = 64, 8          # 8 rows: one per fake device
  c.step.loss_chunk_size = 64
  c.rl.update(total_updates=updates, groups_per_update=2, episodes_per_group=4, max_policy_lag=1,
              admission_window=2, rollout_workers=2, tasks="t0,t1,t2", max_tokens=6,
              group_timeout_s=300.0)
  c.episode.context_len = c.data.seq_len - c.rl.max_tokens
  c.optimizer.learning_rate = 3e-3
  c.log.tensorboard = False
  c.checkpoint.update(every_steps=1, async_save=False)
  return c


class ToyRollouts:
  """One policy call per episode on a per-task prompt; reward = fraction of the completion's
  ids below GOOD_BELOW. The second group ever started is stamped 5 versions old (forced stale)."""

  def __init__(self):
    self.lock = threading.Lock()
    self.calls = []        # (stamped version, engine's served weights path)

  def __call__(self, ctx, task_id, episodes, group_id):
    eps = []
    for i in range(episodes):
      version = ctx.version()
      served = ctx.client.served_weights()
      c = ctx.client.complete(PROMPT[:3] + [100 + int(task_id[1:])] + PROMPT[4:],
                              max_tokens=ctx.max_tokens, temperature=1.0, seed=hash((group_id, i)) % 2**31)
      with self.lock:
        self.calls.append((version, served))
      if group_id.endswith("g00001"):
        version -= 5
      reward = float(np.mean(np.asarray(c.token_ids) < GOOD_BELOW))
      from mage_jax.rl.batch import RLSample
      s = RLSample(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), 0.0, version,
                   task_id, f"{group_id}-e{i}")
      eps.append(EpisodeSamples(f"{group_id}-e{i}", reward, [s]))
    return RolloutGroup(task_id, group_id, eps)


@pytest.mark.slow
def test_several_epochs_per_update_step_from_the_policy_that_sampled(tmp_path):
  """rl.epochs_per_update = 3: three optimizer steps per update over its batch, the ratio taken
  against the log-probs from before the first (so the later steps see ratio != 1 and the clip
  can act), the LR schedule over 3 x updates optimizer steps."""
  from mage_jax.rl import loop
  from mage_jax.train import checkpoint as ckpt_lib
  from mage_jax.train import metrics as metrics_lib
  config = tiny_rl_config(2)
  config.rl.epochs_per_update = 3
  workdir = str(tmp_path / "rl")
  assert loop.train_rl(config, workdir, rollout_fn=ToyRollouts())["updates"] == 2
  rows = [r for r in metrics_lib.read_metrics(workdir) if "reward_mean" in r]
  assert [r["version"] for r in rows] == [1, 2]
  # one step from logp_old has ratio exactly 1 (test_rl_step); the third is two steps away
  assert all(abs(r["mean_ratio"] - 1.0) > 1e-5 and r["approx_kl"] > 0 for r in rows), rows
  assert all(np.isfinite(r["first_epoch_loss"]) and r["first_epoch_loss"] != r["loss"] for r in rows)
  t = loop.build(config, workdir)
  assert t.total_steps == 2
  ck = ckpt_lib.Checkpointer(workdir, async_save=False)
  state, _, step = ck.restore(t.abstract, t.meta)
  ck.close()
  assert step == 2 and int(state.step) == 6   # checkpoints count updates, the optimizer its steps
  lrs = [r["lr"] for r in metrics_lib.read_metrics(workdir) if "lr" in r]
  assert lrs and lrs[0] == pytest.approx(config.optimizer.learning_rate)   # warmup 0: the peak


@pytest.mark.slow
def test_train_rl_end_to_end_with_the_embedded_server(tmp_path):
  from mage_jax.rl import loop
  from mage_jax.train import checkpoint as ckpt_lib
  from mage_jax.train import metrics as metrics_lib
  config = tiny_rl_config(3)
  toy = ToyRollouts()
  workdir = str(tmp_path / "rl")
  summary = loop.train_rl(config, workdir, rollout_fn=toy)
  assert summary["updates"] == 3

  rows = [r for r in metrics_lib.read_metrics(workdir) if "reward_mean" in r]
  assert [r["version"] for r in rows] == [1, 2, 3]
  assert [r["served_version"] for r in rows] == [1, 2, 3]          # synced after every update
  assert all(r["max_staleness"] <= 1 for r in rows)                # lag bound
  assert all(sum(r[f"staleness_{k}"] for k in (0, 1)) == r["samples"] for r in rows)
  assert sum(r["dropped_stale_groups"] for r in rows) == 1 == summary["totals"]["dropped_stale_groups"]
  for k in ("loss", "clip_frac", "tis_trunc_frac", "sync_seconds", "pass_rate", "grad_norm"):
    assert all(np.isfinite(r[k]) for r in rows), k
  assert any(r["update_norm"] > 0 for r in rows)                   # rewards differ: real updates
  assert any("train/tokens_per_s" in r for r in metrics_lib.read_metrics(workdir))

  # The engine served each new version: every call ran on the stamped version or the next one
  # (a sync may land between reading the version and the call), and new versions were used.
  served = [int(os.path.basename(p)[1:]) for _, p in toy.calls]
  assert all(s in (v, v + 1) for (v, _), s in zip(toy.calls, served))
  assert max(v for v, _ in toy.calls) >= 1
  assert summary["served_weights"].endswith("/weights/v3")
  assert sorted(os.listdir(os.path.join(workdir, "weights"))) == ["v2", "v3"]   # keep_exports=2

  # The checkpoint restores: state at update 3, version and sampler counts, the final params.
  t = loop.build(config, workdir)
  ck = ckpt_lib.Checkpointer(workdir, async_save=False)
  state, data_state, step = ck.restore(t.abstract, t.meta)
  ck.close()
  assert step == 3 and int(state.step) == 3 and data_state["version"] == 3
  assert sum(data_state["sampler"]["attempts"]) >= 4 * 4          # >= 4 groups of 4 episodes
  final = ckpt_lib.load_final_params(workdir, t.abstract.params, t.meta)
  import jax
  for a, b in zip(jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(final)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  # The post-sync probe ran after every update, and the manifest says so.
  assert all(0 <= r["probe_max_abs_diff"] <= config.rl.sync_tolerance for r in rows)
  with open(os.path.join(workdir, "manifest.json")) as f:
    assert json.load(f)["sync_probe"] == {"enabled": True, "tolerance": config.rl.sync_tolerance}

  # A finished run is not redone; a larger total_updates resumes from the checkpoint (state,
  # version, sampler, counters) and serves the restored weights before rolling out. The resumed
  # run turns the probe off explicitly: its manifest records that and its update has no figure.
  assert loop.train_rl(config, workdir, rollout_fn=toy)["updates"] == 3
  unchecked = tiny_rl_config(4)
  unchecked.rl.sync_probe = False
  more = loop.train_rl(unchecked, workdir, rollout_fn=toy)
  # The resumed run's forced-stale group (r3g00001) is counted only when it finishes before the
  # run's one update ends (2 fresh groups may come first): 1 restored + 0 or 1 more. Seen both ways
  # at load 2-8 after the fleet-wide group queue (5831da2).
  assert more["updates"] == 4 and more["totals"]["dropped_stale_groups"] in (1, 2)
  rows = [r for r in metrics_lib.read_metrics(workdir) if "reward_mean" in r]
  assert [r["version"] for r in rows] == [1, 2, 3, 4]
  assert ["probe_max_abs_diff" in r for r in rows] == [True, True, True, False]
  with open(os.path.join(workdir, "manifest.json")) as f:
    assert json.load(f)["sync_probe"]["enabled"] is False


def test_config_kinds_need_mage_vl_and_patch_slots():
  from configs import stage5_rl
  from mage_jax.rl import loop
  full = stage5_rl.get_config()
  assert full.rl.kinds == "terminal,gui,hybrid" and full.data.patch_budget > 0
  loop.validate(full)
  assert loop.screenshot_kinds("") and loop.screenshot_kinds("terminal,hybrid")
  assert not loop.screenshot_kinds("terminal")
  c = stage5_rl.get_config("tiny")
  c.rl.kinds = "terminal,gui"
  loop.validate(c)
  c.data.patch_budget = 0
  with pytest.raises(loop.ConfigError, match="patch_budget=0"):
    loop.validate(c)
  with pytest.raises(loop.ConfigError, match="Mage-VL"):
    loop.validate(_with(tiny_rl_config(), kinds="gui"))      # tiny_rl_config runs qwen3_tiny
  with pytest.raises(loop.ConfigError, match="unknown kinds"):
    loop.validate(_with(stage5_rl.get_config("tiny"), kinds="terminal,web"))


def _with(config, **rl):
  config.rl.update(rl)
  return config


class ToyGuiRollouts:
  """Screenshot episodes through RolloutPolicy (the chat route): one call per episode on a
  per-task prompt with one 64x64 screenshot; reward = fraction of completion ids below GOOD_BELOW."""

  def __init__(self):
    self.samples = []

  def __call__(self, ctx, task_id, episodes, group_id):
    from mage_jax.models.config import IMAGE_PAD_ID, VISION_END_ID, VISION_START_ID
    image = np.random.default_rng(int(task_id[1:])).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    prompt = ([151644, 872, 198, 100 + int(task_id[1:]), VISION_START_ID] + [IMAGE_PAD_ID] * 4 +
              [VISION_END_ID, 151645, 198, 151644, 77091, 198])
    eps = []
    for i in range(episodes):
      pol = RolloutPolicy(ctx, task_id, f"{group_id}-e{i}")
      out = pol.act(request(task_id, f"{group_id}-e{i}", prompt, [image]))
      self.samples += pol.samples
      eps.append(EpisodeSamples(f"{group_id}-e{i}", float(np.mean(np.asarray(out.completion_ids) < GOOD_BELOW)),
                                pol.samples))
    return RolloutGroup(task_id, group_id, eps)


@pytest.mark.slow
def test_train_rl_on_screenshot_samples_with_the_tiny_mage_vl(tmp_path):
  """kinds with gui: batches carry patch slots, the learner runs Mage-VL on the screenshots,
  the update moves params and the synced engine serves them."""
  from configs import models
  from mage_jax.rl import loop
  from mage_jax.train import metrics as metrics_lib
  config = tiny_rl_config(1)
  config.model = models.get_config("mage_vl_tiny")
  for tower in ("text", "vision"):
    config.model[tower].update(compute_dtype="float32", param_dtype="float32", remat_policy="none",
                               attention_backend="xla")
  # 16 patch slots per row: one screenshot (16 patches) per row, so the update's 12 samples need
  # 12 of 8-row micro-batches' rows: two micro-batches, every sample trained (none left out)
  config.data.patch_budget = 16
  config.rl.update(kinds="terminal,gui", groups_per_update=2, episodes_per_group=6, rollout_workers=1,
                   max_micro_batches=2)
  toy = ToyGuiRollouts()
  summary = loop.train_rl(config, str(tmp_path / "rl"), rollout_fn=toy)
  assert summary["updates"] == 1
  assert toy.samples and all(s.images and s.prompt_ids.count(151655) == 4 for s in toy.samples)
  row = [r for r in metrics_lib.read_metrics(str(tmp_path / "rl")) if "reward_mean" in r][0]
  assert row["micro_batches"] == 2 and row["left_out_samples"] == 0
  assert row["image_samples"] == row["packed_samples"] == 12 and row["patch_fill"] == 12 / 16
  assert row["served_version"] == 1 and np.isfinite(row["loss"])
  # Ratio 1 at the first micro-step: the engine's log-probs are the learner's (w = 1, no truncation).
  assert row["tis_trunc_frac"] == 0 and abs(row["mean_ratio"] - 1) < 1e-5


@pytest.mark.slow
def test_launch_rl_tiny_on_real_terminal_tasks(tmp_path):
  from mage_jax.machine import sandbox
  try:
    sandbox.check_available()
  except sandbox.SandboxUnavailable as e:
    pytest.skip(f"sandbox unavailable: {e}")
  workdir = tmp_path / "rl_tiny"
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}   # one CPU device: 8 rows fit it
  proc = subprocess.run(
      [sys.executable, "-m", "launch.rl", "--config=configs/stage5_rl.py:tiny", f"--workdir={workdir}",
       "--config.rl.total_updates=1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["updates"] == 1
  row = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()
         if '"reward_mean"' in line][0]
  # 2 groups x 4 episodes of real sandboxed terminal tasks, every policy call trained or, with
  # advantage 0 (a group of equal rewards: the random policy's are all 0), counted and not packed.
  assert row["episodes"] == 8 and row["env_errors"] == 0
  assert row["samples"] == row["packed_samples"] and row["left_out_samples"] == 0
  assert row["packed_samples"] + row["zero_advantage_samples"] >= 8
  assert row["served_version"] == 1 and row["probe_max_abs_diff"] <= 0.05
  assert (workdir / "checkpoints").is_dir() and (workdir / "final_params.meta.json").exists()


def test_rollout_policy_rejects_an_aborted_completion():
  client = FakeClient()
  aborted = Completion(text="h", token_ids=[5], logprobs=[-0.5], prompt_token_ids=list(PROMPT),
                       finish_reason="abort")
  client.complete = lambda *a, **k: aborted
  pol = RolloutPolicy(RolloutContext(client, lambda: 0, max_tokens=4), "t", "t-e0")
  with pytest.raises(RolloutError, match="aborted"):
    pol.act(request())
  assert pol.samples == []          # a cut-off completion is never trained


def _workers(rollout_fn, *, groups_per_update=1):
  from mage_jax.rl.admission import AdmissionWindow
  from mage_jax.rl.workers import RolloutWorkers
  from mage_jax.rl.sampler import FrontierSampler
  ctx = RolloutContext(FakeClient(), lambda: 0, max_tokens=4)
  return RolloutWorkers(rollout_fn, ctx, FrontierSampler(["t"], seed=0), AdmissionWindow(1),
                        groups_per_update=groups_per_update, episodes_per_group=2, num_workers=1,
                        learner_version=0, group_prefix="x")


def _group(task_id, group_id):
  from mage_jax.rl.batch import RLSample
  eps = [EpisodeSamples(f"{group_id}-e{i}", float(i), [RLSample(PROMPT, [5], [-0.5], 0.0, 0, task_id)])
         for i in range(2)]
  return RolloutGroup(task_id, group_id, eps)


def test_a_failed_group_is_dropped_and_counted_and_three_in_a_row_stop_the_run():
  from mage_jax.rl.workers import MAX_FAILED_GROUPS_IN_A_ROW
  outcomes = iter(["fail", "ok", "fail", "fail", "fail", "ok"])

  def flaky(ctx, task_id, n, group_id):
    if next(outcomes) == "fail":
      raise RolloutError(f"POST http://fake/v1/completions: HTTP 500 ({group_id})")
    return _group(task_id, group_id)

  workers = _workers(flaky).start()
  try:
    first = workers.take(30.0)                 # the group after the failed one
    assert first.group_id == "xg00001" and workers.failed_groups >= 1
    workers.release(1)
    with pytest.raises(RolloutError, match="HTTP 500"):
      workers.take(30.0)                       # three failures in a row: the engine is gone
    assert workers.failed_groups == MAX_FAILED_GROUPS_IN_A_ROW + 1
  finally:
    workers.close(5.0)


def test_take_returns_none_once_stop_is_requested():
  release = threading.Event()

  def slow(ctx, task_id, n, group_id):
    release.wait(10.0)
    return _group(task_id, group_id)

  workers = _workers(slow).start()
  try:
    asked = []
    assert workers.take(30.0, stop=lambda: asked.append(1) or len(asked) > 2) is None
  finally:
    release.set()
    workers.close(5.0)


def test_config_rejects_biased_sampling_and_rows_too_short_for_prompt_plus_completion():
  from configs import stage5_rl
  from mage_jax.rl import loop
  from mage_jax.train.loop import ConfigError
  for override, match in ((dict(temperature=0.7), "temperature"), (dict(top_p=0.9), "top_p"),
                          (dict(task_sampling="uniform"), "frontier")):
    c = stage5_rl.get_config("tiny")
    c.rl.update(**override)
    with pytest.raises(ConfigError, match=match):
      loop.validate(c)
  c = stage5_rl.get_config("tiny")
  loop.validate(c)
  # A tolerance too wide to see wrong weights is refused; the probe goes off only by name.
  c.rl.sync_tolerance = 2 * loop.MAX_SYNC_TOLERANCE
  with pytest.raises(ConfigError, match=r"config.rl.sync_tolerance=2.0: .*config.rl.sync_probe=False"):
    loop.validate(c)
  c.rl.sync_probe = False
  loop.validate(c)
  c = stage5_rl.get_config("tiny")
  c.episode.context_len = c.data.seq_len
  with pytest.raises(ConfigError, match="exceeds config.data.seq_len"):
    loop.validate(c)


def test_a_group_failing_after_stop_is_abandoned_quietly_not_dropped(capsys):
  # The RL stage stops its server after workers.stop(): an episode still in flight then fails.
  # That is the run ending, not an engine fault: no "dropped" line, no failed-group count.
  in_call, release = threading.Event(), threading.Event()

  def cut_off(ctx, task_id, n, group_id):
    in_call.set()
    release.wait(10.0)
    raise RolloutError("POST http://fake/v1/completions: HTTP 500: the rollout server stopped")

  workers = _workers(cut_off).start()
  assert in_call.wait(10.0)
  workers.stop()
  release.set()
  workers.close(10.0)
  assert not any(t.is_alive() for t in workers.threads)
  assert workers.failed_groups == 0 and workers.abandoned_groups == 1 and workers.in_flight == 0
  assert "dropped" not in capsys.readouterr().out


def test_advantages_are_scaled_by_their_signs_weight():
  """rl.positive/negative_advantage_weight (p, n): A > 0 becomes p * A, A < 0 n * A; with (1, 0) only
  the calls of episodes that beat their group carry a gradient, with (0, 1) only those below it; a
  broken call in a success gets 0 either way."""
  from mage_jax.rl.batch import RLSample
  from mage_jax.rl.loop import samples_with_advantages, samples_with_gradient

  def ep(reward, parsed):
    return EpisodeSamples("e", reward, [RLSample([1], [2], [-1.0], 0.0, 0, parsed=p) for p in parsed])
  groups = [RolloutGroup("a", "g0", [ep(1.0, [True, False]), ep(0.0, [True]), ep(0.25, [True])])]
  r = np.array([1.0, 0.0, 0.25])
  a = (r - r.mean()) / (r.std() + 1e-6)
  assert a[0] > 0 > a[2] > a[1]
  for p, n in ((1.0, 1.0), (1.0, 0.3), (0.5, 1.0), (1.0, 0.0), (0.0, 1.0)):
    samples, _ = samples_with_advantages(groups, eps=1e-6, weights=(p, n))
    np.testing.assert_allclose([s.advantage for s in samples], [p * a[0], 0.0, n * a[1], n * a[2]],
                               rtol=1e-5, atol=1e-7)
  kept, left_out = samples_with_gradient(samples)       # (0, 1): the two below the mean
  assert left_out == 2 and [s.advantage < 0 for s in kept] == [True, True]
  kept, _ = samples_with_gradient(samples_with_advantages(groups, eps=1e-6, weights=(1.0, 0.0))[0])
  assert len(kept) == 1 and kept[0].advantage > 0
  with pytest.raises(ValueError, match=r"\(1.0, 1.5\)"):
    samples_with_advantages(groups, eps=1e-6, weights=(1.0, 1.5))


def test_a_broken_call_is_pushed_down_even_when_its_episode_succeeds():
  """rl.parse_error_advantage c: an unparsable call gets min(A, c) (then the sign's weight), so in
  an episode that succeeded anyway it is pushed down at c, not left at 0; parsed calls keep A."""
  from mage_jax.rl.batch import RLSample
  from mage_jax.rl.loop import samples_with_advantages, samples_with_gradient

  def ep(reward, parsed):
    return EpisodeSamples("e", reward, [RLSample([1], [2], [-1.0], 0.0, 0, parsed=p) for p in parsed])
  groups = [RolloutGroup("a", "g0", [ep(1.0, [True, False]), ep(0.0, [False]), ep(0.0, [True])])]
  r = np.array([1.0, 0.0, 0.0])
  a = (r - r.mean()) / (r.std() + 1e-6)   # [1.41, -0.71, -0.71]
  for c, n in ((0.0, 1.0), (-1.0, 1.0), (-0.5, 1.0), (-1.0, 0.5)):
    samples, _ = samples_with_advantages(groups, eps=1e-6, weights=(1.0, n), parse_error_advantage=c)
    np.testing.assert_allclose([s.advantage for s in samples],
                               [a[0], n * min(0.0, c), n * min(a[1], c), n * a[2]], rtol=1e-5, atol=1e-7)
  # a flat group (every episode failed): its broken call still carries the push
  flat_group = [RolloutGroup("b", "g1", [ep(0.0, [True, False]), ep(0.0, [True])])]
  samples, flat = samples_with_advantages(flat_group, eps=1e-6, parse_error_advantage=-1.0)
  kept, left_out = samples_with_gradient(samples)
  assert flat == 1 and left_out == 2 and [s.advantage for s in kept] == [-1.0] and not kept[0].parsed
  with pytest.raises(ValueError, match=r"parse_error_advantage=0.5"):
    samples_with_advantages(groups, eps=1e-6, parse_error_advantage=0.5)


def test_the_config_rejects_advantage_weights_outside_0_1():
  from mage_jax.rl import loop as rl_loop
  from mage_jax.train.run_setup import ConfigError
  import configs.stage5_rl as stage5
  c = stage5.get_config("tiny")
  for field in ("negative_advantage_weight", "positive_advantage_weight", "parse_error_advantage"):
    c = stage5.get_config("tiny")
    c.rl[field] = -1.5
    with pytest.raises(ConfigError, match=field):
      rl_loop.validate(c)
  c = stage5.get_config("tiny")
  c.rl.parse_error_advantage = 0.25
  with pytest.raises(ConfigError, match="parse_error_advantage"):
    rl_loop.validate(c)
