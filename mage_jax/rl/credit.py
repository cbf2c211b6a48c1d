"""Per-token credit from the prefixes a group's episodes share (rl.credit = "prefix_tree").

GRPO gives every token of an episode the episode's advantage (r - mean_g) / std_g. The N
episodes of a group start from the same prompt, and a policy that is nearly deterministic
samples long identical stretches: in the learning proof a failed episode is the same ~120
tokens as its group's successes but for one slipped value token, and GRPO pushes down all
~120 (docs/results.md, session 26). Here the group's token sequences form a tree; a node's
value V is the mean reward of the episodes through it, and the token that leads from node u
to node v gets (V(v) - V(u)) / (std_g + eps). Along an episode these telescope to GRPO's
advantage, (r - mean_g) / (std_g + eps), less what the environment decided (below); where
every episode took the same token it is exactly 0, so the gradient falls on the tokens where
the episodes parted, weighted by how the parting changed their mean reward (the Monte Carlo
value estimate of TreeRL-style tree advantages, from the group's own samples, no extra
rollouts).

An episode's sequence is, per policy call, a marker for the call's whole prompt (so two
episodes share a node only while they saw the same observations) and then the call's
completion tokens. A marker's value step is the environment's, not the policy's, and is
credited to no token.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def prefix_tree_advantages(episodes: Sequence[Sequence[tuple[Sequence[int], Sequence[int]]]],
                           rewards: Sequence[float], eps: float) -> list[list[np.ndarray]]:
  """episodes[i] = [(prompt_ids, completion_ids) per call]; rewards[i] its reward.
  Returns advantages[i][j]: float32 [len(completion_ids)] of episode i's call j.

  A group whose rewards are all equal gets zeros (as group_advantages: exact equality decides)."""
  if len(episodes) != len(rewards):
    raise ValueError(f"{len(episodes)} episodes but {len(rewards)} rewards")
  r = np.asarray(rewards, np.float64)
  zeros = [[np.zeros(len(c), np.float32) for _, c in ep] for ep in episodes]
  if r.size == 0 or np.all(r == r[0]):
    return zeros
  std = float(np.sqrt(np.mean(np.square(r - r.mean()))))
  if std <= 0:
    return zeros
  # Node ids: a node is (parent id, key); ids are assigned in first-seen order.
  ids: dict[tuple[int, object], int] = {}
  paths: list[list[int]] = []        # per episode, node id after each key
  is_token: list[list[bool]] = []    # whether that key is a completion token
  for ep in episodes:
    node, path, tok = -1, [], []
    for prompt, completion in ep:
      keys = [("prompt", tuple(int(t) for t in prompt))] + [int(t) for t in completion]
      for k, key in enumerate(keys):
        node = ids.setdefault((node, key), len(ids))
        path.append(node)
        tok.append(k > 0)
    paths.append(path)
    is_token.append(tok)
  total = np.zeros(len(ids) + 1)     # the last slot is the root (id -1)
  count = np.zeros(len(ids) + 1)
  for path, reward in zip(paths, r):
    for node in [-1] + path:
      total[node] += reward
      count[node] += 1
  value = total / np.maximum(count, 1)
  out = []
  for ep, path, tok in zip(episodes, paths, is_token):
    steps = value[np.asarray(path, np.int64)] - value[np.asarray([-1] + path[:-1], np.int64)]
    steps = (steps / (std + eps))[np.asarray(tok, bool)].astype(np.float32)
    calls, start = [], 0
    for _, completion in ep:
      calls.append(steps[start:start + len(completion)])
      start += len(completion)
    out.append(calls)
  return out
