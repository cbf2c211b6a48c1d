"""Admission control for asynchronous GRPO (DESIGN.md "RL objective").

Rollout workers run ahead of the learner, but by a bounded amount: at most
`max_policy_lag + 1` batches of work (being generated, queued, or being
trained on: a batch counts until its update is applied) may exist at once. Work admitted while the learner is at version v is therefore
trained by update v + max_policy_lag at the latest, so with that window no
sample should be older than the lag bound; the learner still checks every
group with `is_fresh` (a slow episode or a sync that lands mid-group can
break the accounting) and drops stale groups, counting them.

Versions count optimizer updates: the learner's version is the number of
updates applied; a sample's version is the policy version the rollout server
was serving when the sample's call was made.
"""
from __future__ import annotations


class AdmissionWindow:
  """At most (max_policy_lag + 1) batches of work ahead of the learner."""

  def __init__(self, max_policy_lag: int):
    if max_policy_lag < 0:
      raise ValueError(f"max_policy_lag={max_policy_lag} must be >= 0")
    self.max_policy_lag = int(max_policy_lag)
    self.window = self.max_policy_lag + 1   # batches

  def may_admit(self, learner_version: int, batches_in_flight: float) -> bool:
    """Whether one more unit of work may start now.

    `batches_in_flight`: work admitted and not yet consumed by the learner, in
    batches (groups in flight / groups per update; fractional while a batch
    is partly generated). The bound does not depend on `learner_version`
    (it is the same at every version); the argument is checked so a caller
    mixing up the two fails loudly.
    """
    if learner_version < 0 or batches_in_flight < 0:
      raise ValueError(f"may_admit(learner_version={learner_version}, "
                       f"batches_in_flight={batches_in_flight}): both must be >= 0")
    return batches_in_flight < self.window

  def staleness(self, sample_version: int, learner_version: int) -> int:
    """Updates between the policy that generated a sample and the learner's."""
    if sample_version > learner_version:
      raise ValueError(f"sample version {sample_version} is newer than the learner's {learner_version}")
    return learner_version - sample_version

  def is_fresh(self, sample_version: int, learner_version: int) -> bool:
    """learner - sample <= max_policy_lag."""
    return self.staleness(sample_version, learner_version) <= self.max_policy_lag
