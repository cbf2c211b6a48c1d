"""GUI / hybrid RL on the tiny Mage-VL (CPU): packed screenshot samples give the learner the
same log-probs as a per-sample Mage-VL forward; RolloutPolicy sends a screenshot prompt
through the embedded rollout server's chat route and the learner's recomputation on the
recorded sample equals the engine's log-probs; an RL update on an image batch moves params."""
from __future__ import annotations

import types

import jax
import numpy as np
import pytest

from mage_jax.data.images import num_image_tokens
from mage_jax.models.config import IMAGE_PAD_ID, VISION_END_ID, VISION_START_ID
from mage_jax.rl import objective as obj
from mage_jax.rl.batch import RLSample, pack_rl_batch
from mage_jax.train import state as state_lib

CHUNK = 16


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
  """A random-init tiny Mage-VL (configs/serve.py tiny_vl's preset) as an HF dir, and its Policy.
  The head is scaled up so next-token distributions are peaked: a plain random init is near
  uniform over 151,936 ids, where every context gives about the same log-probs."""
  from flax import nnx
  from configs import models
  from mage_jax import api
  from mage_jax.weights import hf
  cfg = models.build_model_config(models.get_config("mage_vl_tiny"))
  model = hf.build_model(cfg, nnx.Rngs(0))
  model.lm_head.kernel[...] = model.lm_head.kernel[...] * 20.0
  path = str(tmp_path_factory.mktemp("vl") / "hf")
  hf.save_hf(model, cfg, path)
  return path, api.load(path)


def log_softmax(x: np.ndarray) -> np.ndarray:
  x = x.astype(np.float64) - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def screenshot_prompt(rng, sizes):
  images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
  prompt = [151644, 872, 198]
  for im in images:
    prompt += [VISION_START_ID] + [IMAGE_PAD_ID] * num_image_tokens(*im.shape[:2]) + [VISION_END_ID]
  prompt += rng.integers(1, 5000, 3).tolist() + [151645, 198, 151644, 77091, 198]
  return prompt, images


def reference_logps(policy, prompt, completion, images):
  """log p(completion token k | prefix): the sample alone through api.Policy.logits."""
  logits = policy.logits(prompt + completion[:-1], images=images or None)
  logp = log_softmax(logits[len(prompt) - 1:])
  return logp[np.arange(len(completion)), completion]


def learner_logps(policy, batch):
  graphdef, params, rest = state_lib.split_model(policy.model)
  return np.asarray(obj.make_logp_fn(graphdef, rest, CHUNK)(params, batch))


def test_packed_image_samples_match_per_sample_forward(vl):
  _, policy = vl
  rng = np.random.default_rng(0)
  samples = []
  for i, sizes in enumerate([[(64, 96), (64, 64)], [(64, 64)], []]):
    prompt, images = screenshot_prompt(rng, sizes)
    completion = rng.integers(1, 5000, 4 + i).tolist()
    samples.append(RLSample(prompt_ids=prompt, completion_ids=completion,
                            rollout_logprobs=reference_logps(policy, prompt, completion, images).tolist(),
                            advantage=1.0, version=0, task_id="gui", episode_id=f"e{i}",
                            images=images or None))
  # 2 rows: two segments share a row, so image ids run across segments (1..m per row).
  batch, report = pack_rl_batch(samples, rows=2, seq_len=64, patch_budget=64)
  assert report["row_samples"] == [[0, 1], [2]]
  np.testing.assert_array_equal(batch["patch_image_ids"][0], [1] * 24 + [2] * 16 + [3] * 16 + [0] * 8)
  logp = learner_logps(policy, batch)
  mask = batch["loss_mask"] > 0
  assert mask.sum() == sum(len(s.completion_ids) for s in samples)
  np.testing.assert_allclose(logp[mask], batch["logp_rollout"][mask], atol=2e-5)
  # The screenshots matter: the same batch with blanked patches gives other log-probs.
  blank = dict(batch, patches=np.zeros_like(batch["patches"]))
  image_rows = batch["patch_image_ids"].any(axis=1)
  assert np.abs(learner_logps(policy, blank) - logp)[mask & image_rows[:, None]].max() > 1e-4


def test_rollout_policy_on_the_embedded_server_matches_the_learner(vl):
  from mage_jax.data.tokenizer import load_tokenizer
  from mage_jax.engine.rollout_client import RolloutClient
  from mage_jax.engine.rollout_server import RolloutServer
  from mage_jax.rl.rollouts import RolloutContext, RolloutPolicy
  path, policy = vl
  rng = np.random.default_rng(1)
  image = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)    # smart-resized: 6 merged tokens
  text = ("<|im_start|>user\nClick the OK button.<|vision_start|>" + "<|image_pad|>" * 6 +
          "<|vision_end|><|im_end|>\n<|im_start|>assistant\n")
  prompt = load_tokenizer("").encode(text)
  req = types.SimpleNamespace(task=types.SimpleNamespace(id="gui_click"), t=1, prompt_tokens=np.asarray(prompt),
                              images=[image], episode=types.SimpleNamespace(id="g0-e0"))
  with RolloutServer(path) as server:
    client = RolloutClient(server.url, "mage", timeout=120.0)
    client.wait_ready(30)
    pol = RolloutPolicy(RolloutContext(client, lambda: 0, max_tokens=6, temperature=1.0, seed=3),
                        "gui_click", "g0-e0")
    out = pol.act(req)
  s = pol.samples[0]
  assert s.prompt_ids.count(IMAGE_PAD_ID) == 6 and s.prompt_ids == out.prompt_ids
  assert s.prompt_ids[-3:] == [151644, 77091, 198] and len(s.completion_ids) >= 1
  assert len(s.images) == 1 and np.array_equal(s.images[0], image)
  batch, report = pack_rl_batch(pol.samples, rows=1, seq_len=64, patch_budget=32)
  assert report["packed"] == 1 and report["patches"] == 24
  logp = learner_logps(policy, batch)
  mask = batch["loss_mask"] > 0
  diff = np.abs(logp[mask] - np.asarray(s.rollout_logprobs))
  print(f"engine vs learner log-probs on {mask.sum()} tokens: max |diff| {diff.max():.2e}")
  np.testing.assert_allclose(logp[mask], s.rollout_logprobs, atol=1e-3)


@pytest.mark.slow
def test_rl_update_on_an_image_batch_changes_params(vl):
  from jax.sharding import Mesh
  from mage_jax.train import run_setup
  from mage_jax.train import optimizer as opt_lib
  from mage_jax.train import step as step_lib
  _, policy = vl
  rng = np.random.default_rng(2)
  samples = []
  for e, adv in enumerate([1.0, -1.0]):
    prompt, images = screenshot_prompt(rng, [(64, 64)])
    completion = rng.integers(1, 5000, 4).tolist()
    samples.append(RLSample(prompt_ids=prompt, completion_ids=completion,
                            rollout_logprobs=reference_logps(policy, prompt, completion, images).tolist(),
                            advantage=adv, version=0, task_id="gui", episode_id=f"e{e}", images=images))
  batch, _ = pack_rl_batch(samples, rows=2, seq_len=48, patch_budget=16)
  mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
  factory = run_setup.model_factory(policy.cfg)
  graphdef, params, _ = state_lib.split_model(policy.model)
  tx = opt_lib.make_optimizer(opt_lib.OptimizerConfig(learning_rate=1e-2, warmup_steps=0, total_steps=10,
                                                      weight_decay=0.0, clip_norm=0.0), params)
  graphdef, rest, abstract = state_lib.abstract_state(factory, tx)
  rep = state_lib.replicated(mesh)
  shardings = state_lib.state_shardings(tx, abstract, jax.tree_util.tree_map(lambda _: rep, abstract.params),
                                        mesh)
  state, rest = state_lib.init_state(factory, tx, 0, shardings, params=params)
  batch["logp_old"] = learner_logps(policy, batch)
  step = step_lib.jit_train_step(graphdef, rest, tx, step_lib.StepConfig(loss_chunk_size=CHUNK), mesh,
                                 shardings, batch, objective=obj.rl_objective(obj.RLLossConfig(), CHUNK))
  new, metrics = step(state, batch)
  # Ratio 1 at the first step: loss = -mean over policy tokens of A = 0 (equal token counts).
  assert float(metrics["loss"]) == pytest.approx(0.0, abs=1e-6)
  assert float(metrics["policy_tokens"]) == 8
  before, after = state_lib.flat_paths(params), state_lib.flat_paths(new.params)
  moved = {k for k in before if not np.array_equal(np.asarray(before[k]), np.asarray(after[k]))}
  assert any(k.startswith("visual/") for k in moved), "the ViT got no gradient from the screenshots"
  assert any(k.startswith("language_model/") for k in moved)
  # The positive-advantage sample's completion got likelier, the negative one's less likely.
  logp_new = obj.make_logp_fn(graphdef, rest, CHUNK)(new.params, batch)
  delta = np.asarray(logp_new) - batch["logp_old"]
  mask = batch["loss_mask"] > 0
  adv = batch["advantages"]
  assert delta[mask & (adv > 0)].sum() > 0 > delta[mask & (adv < 0)].sum()
