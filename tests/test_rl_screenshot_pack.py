"""rl/screenshot_pack.py through a RolloutPolicy's pickling (what Ray does to the finished
episode's policy on its way back from an env host): the screenshots come back pixel-exact, each
distinct one travels once as PNG, and the payload is bounded by the distinct screenshots."""
import pickle

import numpy as np
import pytest

from mage_jax.rl import screenshot_pack
from mage_jax.rl.batch import RLSample
from mage_jax.engine.rollout_client import RolloutClient
from mage_jax.rl.rollouts import RolloutContext, RolloutPolicy

H, W = 800, 1280


def desktop(seed: int) -> np.ndarray:
  """A desktop-like screenshot: flat panels, a window, a few lines of 'text' (dark pixels)."""
  rng = np.random.default_rng(seed)
  im = np.full((H, W, 3), 236, np.uint8)
  im[:32] = (60, 60, 70)                                       # top bar
  y, x = 100 + 20 * seed, 200 + 30 * seed
  im[y:y + 400, x:x + 700] = 255                               # a window
  for row in range(6):                                          # text lines in it
    band = im[y + 40 + 24 * row:y + 52 + 24 * row, x + 20:x + 620]
    band[rng.random(band.shape[:2]) < 0.3] = (20, 20, 20)
  return im


def episode_policy(shots, visual_turns=3):
  """A policy as an env host finished it: call t's prompt shows the last `visual_turns`
  screenshots, each a fresh array (render_prompt reads them from the episode's files), and one
  text-only call."""
  pol = RolloutPolicy(RolloutContext(RolloutClient("http://127.0.0.1:1/v1", "mage"), int), "t", "e0")
  for t in range(len(shots)):
    pol.samples.append(RLSample([1, 2], [3], [-0.5], 0.0, t, episode_id="e0",
                                images=[shots[k].copy() for k in range(max(0, t - visual_turns + 1), t + 1)]))
  pol.samples.append(RLSample([1], [2], [-0.1], 0.0, len(shots), episode_id="e0"))
  return pol


def test_screenshots_come_back_exact_each_distinct_one_once_as_png():
  shots = [desktop(i) for i in range(5)]
  remote = episode_policy(shots)
  raw = sum(im.nbytes for s in remote.samples for im in s.images or [])
  assert raw == 12 * shots[0].nbytes                  # 1 + 2 + 3 + 3 + 3 prompt images
  wire = pickle.dumps(remote)
  pngs = [screenshot_pack.encode_screenshot(s) for s in shots]
  assert len(wire) < sum(len(p) for p in pngs) + 4_000   # 5 PNGs and the samples' ids
  assert len(wire) < raw / 50
  back = pickle.loads(wire)
  driver = RolloutPolicy(remote.ctx, "t", "e0")
  driver.absorb_remote(back)
  assert driver.returned_image_bytes == sum(len(p) for p in pngs)
  assert [s.version for s in driver.samples] == [0, 1, 2, 3, 4, 5] and driver.samples[-1].images is None
  for got, sent in zip(driver.samples, remote.samples):
    assert got.prompt_ids == sent.prompt_ids and len(got.images or []) == len(sent.images or [])
    for a, b in zip(got.images or [], sent.images or []):
      assert a.dtype == np.uint8 and np.array_equal(a, b)
  # one decoded array per distinct screenshot, shared by the prompts that show it
  assert driver.samples[2].images[2] is driver.samples[3].images[1] is driver.samples[4].images[0]
  assert driver.returned_image_bytes == pickle.loads(pickle.dumps(back)).returned_image_bytes


def test_the_payload_is_bounded_by_the_distinct_screenshots_whatever_they_hold():
  """Incompressible pixels: PNG is about the raw size, so the bound is distinct x raw; arrays
  PNG cannot hold exactly (float, 2 channels) travel as they are, once each."""
  rng = np.random.default_rng(0)
  noise = [rng.integers(0, 256, (200, 300, 3), dtype=np.uint8) for _ in range(3)]
  odd = [rng.random((20, 30)).astype(np.float32), rng.integers(0, 256, (20, 30, 2), dtype=np.uint8)]
  remote = episode_policy(noise + odd)
  wire = pickle.dumps(remote)
  distinct = sum(a.nbytes for a in noise + odd)
  assert len(wire) < 1.01 * distinct + 4_000
  back = pickle.loads(wire)
  for got, sent in zip(back.samples, remote.samples):
    for a, b in zip(got.images or [], sent.images or []):
      assert a.dtype == b.dtype and np.array_equal(a, b)


def test_a_policy_without_screenshots_pickles_as_before_and_mismatched_refs_are_refused():
  pol = RolloutPolicy(RolloutContext(RolloutClient("http://127.0.0.1:1/v1", "mage"), int), "t", "e0")
  pol.samples.append(RLSample([1], [2], [-0.1], 0.0, 0))
  back = pickle.loads(pickle.dumps(pol))
  assert back.samples == pol.samples and back.returned_image_bytes == 0
  bare, packed = screenshot_pack.pack(episode_policy([desktop(0)]).samples)
  with pytest.raises(ValueError, match="2 samples' references for 1 samples"):
    screenshot_pack.unpack(bare[:1], packed)
