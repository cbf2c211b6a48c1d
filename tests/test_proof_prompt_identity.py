"""Prompt identity on the GUI chat route (issue 12): for a GUI step with a screenshot, the prompt
ids the embedded engine echoes on its chat route (what RL records in RLSample.prompt_ids) equal
the prompt part of the SFT sample the data path renders for the same state, with the proof's
settings (configs/proof.py: 640x400 screens, one screenshot per prompt, two full responses).
The terminal route's counterpart is test_agent_episode.test_render_prompt_equals_training_sample_up_to_target."""
from __future__ import annotations

import types

import numpy as np
import pytest
from PIL import Image

from mage_jax.data import trajectory as tr


@pytest.mark.timeout(300)
def test_gui_chat_route_echo_equals_sft_sample_prompt(tmp_path):
  from configs import proof
  from mage_jax.agent.episode import EpisodeConfig, PolicyRequest, render_prompt, renderer_for
  from mage_jax.data import render
  from mage_jax.models.config import IMAGE_PAD_ID
  from mage_jax.engine.rollout_client import RolloutClient
  from mage_jax.engine.rollout_server import RolloutServer
  from mage_jax.rl.rollouts import RolloutContext, RolloutPolicy
  from launch.serve import random_init_dir
  sft, rl = proof.get_config("sft,smoke"), proof.get_config("rl,smoke")
  w, h = rl.env.width, rl.env.height
  rng = np.random.default_rng(0)
  steps = []
  for k in (1, 2, 3):   # three screenshots; step 3 also carries a text observation
    shot = str(tmp_path / f"o{k}.png")
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(shot)
    call = tr.ToolCall("computer_use", {"action": "left_click", "coordinate": [100 * k, 500]}) if k < 3 \
        else tr.ToolCall("bash", {"command": "ls"})
    steps.append(tr.Step(tr.Observation(shot, "file.txt" if k == 3 else None),
                         f"I look for button {k}.", f"Click button {k}", call))
  ep = tr.Episode("e", "Click the green button.", steps, screen_size=(w, h), root=str(tmp_path))
  data_renderer = render.Renderer(render.RenderConfig.from_config(sft.data.render))  # pack_job's
  episode_renderer = renderer_for(EpisodeConfig(**rl.episode.to_dict()))            # the runner's
  path = random_init_dir("mage_vl_tiny", 0, str(tmp_path / "hf"))
  checked = 0
  with RolloutServer(path) as server:
    client = RolloutClient(server.url, "mage", timeout=240.0)
    client.wait_ready(60)
    ctx = RolloutContext(client, lambda: 0, max_tokens=1, temperature=1.0, seed=0)
    for t in (1, 2, 3):
      sample = data_renderer.render_step(ep, t)
      cut = int(np.argmax(sample.loss_mask))
      pending = tr.Episode("e", ep.instruction, steps[:t - 1] + [tr.Step(steps[t - 1].observation, "", "", None)],
                           screen_size=(w, h), root=str(tmp_path))
      prompt, images = render_prompt(episode_renderer, pending, t)
      assert len(images) == 1   # visual_turns = 1: the current screenshot only
      pol = RolloutPolicy(ctx, "gui_task", f"e{t}")
      req = PolicyRequest(types.SimpleNamespace(id="gui_task"), t, pending, prompt, images, lambda a: a)
      pol.act(req)
      echoed = pol.samples[0].prompt_ids
      expected = sample.tokens[:cut].tolist()
      assert echoed.count(IMAGE_PAD_ID) == expected.count(IMAGE_PAD_ID) > 0, t
      assert echoed == expected, (t, len(echoed), len(expected))
      assert len(sample.images) == 1 and np.array_equal(pol.samples[0].images[0], sample.images[0])
      checked += 1
  assert checked == 3
