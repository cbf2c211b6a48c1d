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
  assert batch["tokens"].dtype == np.int32 and batch["loss_mask"].dtype == np.float32
  assert batch["logp_rollout"].dtype == np.float32
  assert report["packed"] == 3 and report["policy_tokens"] == 6
  assert report["fill"] == pytest.approx(12 / 16)
  assert report["left_out"] == 0 and report["truncated_prompt"] == 0


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
