"""RL batch packing: token-exact layout on a hand-built example, prompt
truncation and skip counting, left-out samples, and errors that name the sample."""
import numpy as np
import pytest

from mage_jax.models.config import PAD_ID
from mage_jax.rl.batch import RL_KEYS, TEXT_KEYS, RLSample, pack_rl_batch


def _sample(prompt, completion, logps, adv, task="t", ep="e"):
  return RLSample(prompt_ids=list(prompt), completion_ids=list(completion),
                  rollout_logprobs=list(logps), advantage=adv, version=0, task_id=task,
                  episode_id=ep)


def test_hand_built_layout_is_token_exact():
  a = _sample([10, 11, 12], [13, 14], [-0.5, -0.25], 1.5, ep="a")     # 5 tokens
  b = _sample([20, 21], [22, 23, 24], [-1.0, -2.0, -3.0], -0.5, ep="b")  # 5 tokens
  c = _sample([30], [31], [-0.125], 2.0, ep="c")                       # 2 tokens
  batch, report = pack_rl_batch([a, b, c], rows=2, seq_len=8)
  assert set(batch) == set(TEXT_KEYS) | set(RL_KEYS)
  assert all(v.shape == (2, 8) for v in batch.values())
  # Best fit, longest first: a -> row 0, b -> row 1, c -> the row with least room that fits (both 3).
  assert report["row_samples"] == [[0, 2], [1]]
  P = PAD_ID
  np.testing.assert_array_equal(batch["tokens"], [[10, 11, 12, 13, 14, 30, 31, P],
                                                  [20, 21, 22, 23, 24, P, P, P]])
  np.testing.assert_array_equal(batch["targets"], [[11, 12, 13, 14, 0, 31, 0, 0],
                                                   [21, 22, 23, 24, 0, 0, 0, 0]])
  np.testing.assert_array_equal(batch["loss_mask"], [[0, 0, 1, 1, 0, 1, 0, 0],
                                                     [0, 1, 1, 1, 0, 0, 0, 0]])
  np.testing.assert_array_equal(batch["segment_ids"], [[1, 1, 1, 1, 1, 2, 2, 0],
                                                       [1, 1, 1, 1, 1, 0, 0, 0]])
  np.testing.assert_array_equal(batch["positions"], [[0, 1, 2, 3, 4, 0, 1, 0],
                                                     [0, 1, 2, 3, 4, 0, 0, 0]])
  np.testing.assert_array_equal(batch["logp_rollout"], [[0, 0, -0.5, -0.25, 0, -0.125, 0, 0],
                                                        [0, -1, -2, -3, 0, 0, 0, 0]])
  np.testing.assert_array_equal(batch["advantages"], [[0, 0, 1.5, 1.5, 0, 2.0, 0, 0],
                                                      [0, -0.5, -0.5, -0.5, 0, 0, 0, 0]])
  assert not batch["logp_old"].any()
  np.testing.assert_array_equal(batch["entropy_weight"], batch["loss_mask"])   # every call parsed
  assert batch["tokens"].dtype == np.int32 and batch["loss_mask"].dtype == np.float32
  assert batch["logp_rollout"].dtype == np.float32
  assert report["packed"] == 3 and report["policy_tokens"] == 6
  assert report["fill"] == pytest.approx(12 / 16)
  assert report["left_out"] == 0 and report["truncated_prompt"] == 0


def test_an_unparsable_calls_tokens_carry_no_entropy_weight():
  ok = _sample([10, 11], [12, 13], [-0.5, -0.25], 0.0, ep="ok")
  broken = _sample([20], [21, 22, 23], [-1.0, -2.0, -3.0], 0.0, ep="broken")
  broken.parsed = False
  batch, report = pack_rl_batch([ok, broken], rows=1, seq_len=8)
  assert report["row_samples"] == [[0, 1]]
  np.testing.assert_array_equal(batch["loss_mask"][0], [0, 1, 1, 0, 1, 1, 1, 0])
  np.testing.assert_array_equal(batch["entropy_weight"][0], [0, 1, 1, 0, 0, 0, 0, 0])


def test_too_long_truncates_prompt_from_the_left_or_skips():
  keep = _sample(range(100, 106), [7, 8, 9], [-1.0, -2.0, -3.0], 1.0)   # 9 > 6: keep 3 prompt
  hopeless = _sample([1, 2], range(40, 46), [-0.1] * 6, 1.0)             # completion 6 >= 6
  empty = _sample([1, 2], [], [], 1.0)
  batch, report = pack_rl_batch([keep, hopeless, empty], rows=1, seq_len=6, pad_id=0)
  np.testing.assert_array_equal(batch["tokens"][0], [103, 104, 105, 7, 8, 9])
  np.testing.assert_array_equal(batch["loss_mask"][0], [0, 0, 1, 1, 1, 0])
  np.testing.assert_array_equal(batch["logp_rollout"][0], [0, 0, -1, -2, -3, 0])
  assert report["truncated_prompt"] == 1
  assert report["skipped_too_long"] == 1
  assert report["skipped"] == {"too_long": 1, "empty_completion": 1}
  assert report["packed"] == 1


def test_samples_beyond_rows_are_left_out_and_reported():
  samples = [_sample([1, 2, 3], [4, 5, 6], [-1.0] * 3, 0.5, ep=str(i)) for i in range(5)]
  batch, report = pack_rl_batch(samples, rows=2, seq_len=12, pad_id=0)
  assert report["packed"] == 4 and report["left_out"] == 1 and report["left_out_indices"] == [4]
  assert report["fill"] == 1.0
  assert int(batch["segment_ids"].max()) == 2


def test_nonfinite_rollout_logprobs_are_skipped_and_counted():
  bad = _sample([1, 2], [3, 4], [-1.0, float("nan")], 1.0)
  good = _sample([1, 2], [3, 4], [-1.0, -2.0], 1.0)
  batch, report = pack_rl_batch([bad, good], rows=1, seq_len=8, pad_id=0)
  assert report["skipped"] == {"nonfinite_rollout_logprobs": 1} and report["packed"] == 1
  assert np.isfinite(batch["logp_rollout"]).all()


def test_errors_name_the_sample():
  mismatch = _sample([1, 2], [3, 4, 5], [-1.0, -2.0], 1.0, task="open_calc", ep="ep-17")
  with pytest.raises(ValueError, match=r"#1 \(task_id='open_calc', episode_id='ep-17'\).*2 "
                                       r"rollout_logprobs for 3 completion_ids"):
    pack_rl_batch([_sample([1], [2], [-1.0], 0.0), mismatch], rows=1, seq_len=16)
  with pytest.raises(ValueError, match="episode_id='ep-3'.*empty prompt_ids"):
    pack_rl_batch([_sample([], [2], [-1.0], 0.0, ep="ep-3")], rows=1, seq_len=16)
  with pytest.raises(ValueError, match="episode_id='ep-4'.*advantage nan"):
    pack_rl_batch([_sample([1], [2], [-1.0], float("nan"), ep="ep-4")], rows=1, seq_len=16)
  with pytest.raises(ValueError, match="rows >= 1"):
    pack_rl_batch([], rows=0, seq_len=16)


def _gui_sample(rng, sizes, completion_len, adv, ep):
  """A GUI-like call: text, one smart-resized screenshot block per size, text; a completion."""
  from mage_jax.data.images import num_image_tokens
  from mage_jax.models.config import IMAGE_PAD_ID, VISION_END_ID, VISION_START_ID
  images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
  prompt = [151644, 872, 198]
  for im in images:
    prompt += [VISION_START_ID] + [IMAGE_PAD_ID] * num_image_tokens(*im.shape[:2]) + [VISION_END_ID]
  prompt += [5501, 4205, 151645, 198, 151644, 77091, 198]
  completion = rng.integers(1, 1000, completion_len).tolist()
  return RLSample(prompt_ids=prompt, completion_ids=completion,
                  rollout_logprobs=(-rng.random(completion_len)).tolist(), advantage=adv, version=0,
                  task_id="gui", episode_id=ep, images=images)


def test_gui_sample_packs_to_the_sft_packers_patch_layout():
  from mage_jax.data import images as images_lib
  from mage_jax.data.packing import assemble_bin, to_segment
  from mage_jax.data.render import Sample
  rng = np.random.default_rng(0)
  gui = _gui_sample(rng, [(64, 96), (64, 64)], 4, 0.75, "a")   # 24 + 16 patches
  text = _sample([10, 11, 12], [13, 14], [-0.5, -0.25], -1.0, ep="b")
  seq, budget = 64, 48
  batch, report = pack_rl_batch([gui, text], rows=2, seq_len=seq, patch_budget=budget)
  assert set(batch) == set(TEXT_KEYS) | set(RL_KEYS) | {"patches", "patch_image_ids", "patch_positions"}
  assert batch["patches"].shape == (2, budget, 768) and batch["patches"].dtype == np.uint8
  assert report["row_samples"] == [[0, 1]] and report["patches"] == 40
  # The SFT packer on the same two samples (prompt + completion trained as labels).
  segs = [to_segment(Sample(np.asarray(s.prompt_ids + s.completion_ids, np.int32),
                            np.r_[np.zeros(len(s.prompt_ids), bool), np.ones(len(s.completion_ids), bool)],
                            list(s.images or []), {}), seq_len=seq, patch_budget=budget)
          for s in (gui, text)]
  sft = assemble_bin(segs, seq, budget)
  for k in ("patches", "patch_image_ids", "patch_positions", "tokens", "targets", "loss_mask",
            "segment_ids", "positions"):
    np.testing.assert_array_equal(batch[k][0], sft[k], err_msg=k)
  # ... which is images.patchify per screenshot, one attention block per image, zero padding.
  rows = [images_lib.patchify(im) for im in gui.images]
  np.testing.assert_array_equal(batch["patches"][0, :40], np.concatenate([r for r, _ in rows]))
  np.testing.assert_array_equal(batch["patch_positions"][0, :40], np.concatenate([p for _, p in rows]))
  np.testing.assert_array_equal(batch["patch_image_ids"][0], [1] * 24 + [2] * 16 + [0] * 8)
  assert not batch["patches"][0, 40:].any() and not batch["patches"][1].any()
  # Patch 1 of image 1 (merge-block order): pixel rows 0..15, columns 16..31, as [C, 16, 16].
  np.testing.assert_array_equal(batch["patches"][0, 1], gui.images[0][:16, 16:32].transpose(2, 0, 1).ravel())
  # RL fields sit on the completion slots of each segment.
  first = len(gui.prompt_ids) - 1
  np.testing.assert_allclose(batch["logp_rollout"][0, first:first + 4], gui.rollout_logprobs, rtol=1e-6)
  assert (batch["advantages"][0, first:first + 4] == 0.75).all()
  assert batch["loss_mask"].sum() == report["policy_tokens"] == 6


def test_image_samples_respect_the_patch_budget_and_never_lose_image_tokens():
  rng = np.random.default_rng(1)
  a = _gui_sample(rng, [(64, 96)], 3, 1.0, "a")        # 24 patches
  b = _gui_sample(rng, [(64, 96)], 3, 1.0, "b")        # 24 patches: a and b can't share a 32-patch row
  big = _gui_sample(rng, [(64, 96), (64, 96)], 3, 1.0, "big")   # 48 > 32 patches
  batch, report = pack_rl_batch([a, b, big], rows=2, seq_len=128, patch_budget=32)
  assert report["row_samples"] == [[0], [1]] and report["skipped"] == {"more patches than patch_budget": 1}
  # Too long: the left cut may drop text before the first image, never image tokens.
  n = len(a.prompt_ids) + 3
  batch, report = pack_rl_batch([a], rows=1, seq_len=n - 3, patch_budget=32)   # cuts 3 text tokens
  assert report["truncated_prompt"] == 1 and batch["tokens"][0, 0] == a.prompt_ids[3]
  _, report = pack_rl_batch([a], rows=1, seq_len=n - 4, patch_budget=32)      # would cut vision_start
  assert report["skipped"] == {"too_long_with_images": 1} and report["skipped_too_long"] == 1
  # Text-only batches keep the text layout; image_keys=True gives the image keys anyway (empty).
  t = _sample([1, 2], [3], [-0.1], 1.0)
  assert "patches" not in pack_rl_batch([t], rows=1, seq_len=8)[0]
  batch, _ = pack_rl_batch([t], rows=1, seq_len=8, patch_budget=4, image_keys=True)
  assert batch["patches"].shape == (1, 4, 768) and not batch["patch_image_ids"].any()
  with pytest.raises(ValueError, match=r"RLSample #0 .*'a'.*patch_budget=0"):
    pack_rl_batch([a], rows=1, seq_len=128)


def test_an_update_packs_every_sample_into_power_of_two_micro_batches():
  from mage_jax.rl.batch import pack_rl_update
  samples = [_sample([1, 2, 3], [4, 5, 6], [-1.0] * 3, 0.5, ep=str(i)) for i in range(5)]
  # one sample per 6-slot row: 5 rows needed, 2 rows per micro-batch -> 4 micro-batches (8 rows)
  batch, report = pack_rl_update(samples, rows=2, max_micro_batches=4, seq_len=6, pad_id=0)
  assert report["micro_batches"] == 4 and batch["tokens"].shape == (8, 6)
  assert report["packed"] == 5 and report["left_out"] == 0
  assert sorted(i for r in report["row_samples"] for i in r) == [0, 1, 2, 3, 4]
  assert report["fill"] == 5 / 8
  # the bins fill the first micro-batches of train.step's strided split (micro j = rows j, j+4):
  # micro-batches 0-1 hold two bins each, 2 holds the fifth and padding, 3 is all padding (skipped)
  from mage_jax.train.step import split_micro
  micro_mask = split_micro({"m": batch["loss_mask"]}, 4)["m"].sum(axis=(1, 2))
  assert micro_mask.tolist() == [6, 6, 3, 0] and report["live_micro_batches"] == 3
  assert [len(r) for r in report["row_samples"]] == [1, 1, 1, 0, 1, 1, 0, 0]
  for r, members in enumerate(report["row_samples"]):   # row_samples is per row of the batch
    assert batch["loss_mask"][r].sum() == 3 * len(members)
  # capped: 2 micro-batches hold 4 rows, the fifth sample is left out and counted
  batch, report = pack_rl_update(samples, rows=2, max_micro_batches=2, seq_len=6, pad_id=0)
  assert report["micro_batches"] == 2 and batch["tokens"].shape == (4, 6)
  assert report["packed"] == 4 and report["left_out"] == 1 and report["left_out_indices"] == [4]
  # a cap that is no power of two is used as it is
  batch, report = pack_rl_update(samples, rows=2, max_micro_batches=3, seq_len=6, pad_id=0)
  assert report["micro_batches"] == 3 and batch["tokens"].shape == (6, 6) and report["packed"] == 5
  # few samples: one micro-batch, the same batch as pack_rl_batch's
  one, r1 = pack_rl_update(samples[:2], rows=2, max_micro_batches=4, seq_len=6, pad_id=0)
  ref, r2 = pack_rl_batch(samples[:2], rows=2, seq_len=6, pad_id=0)
  assert r1["micro_batches"] == 1 and r1["fill"] == r2["fill"] == 1.0
  for k in ref:
    np.testing.assert_array_equal(one[k], ref[k], err_msg=k)
  with pytest.raises(ValueError, match="rl.max_micro_batches=0"):
    pack_rl_update(samples, rows=2, max_micro_batches=0, seq_len=6, pad_id=0)
