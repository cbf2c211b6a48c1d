"""What stops a training loop (SFT and RL alike) between steps.

  StopSignal        SIGTERM: finish the current step, save a checkpoint, exit 0
  NonFiniteGuard    `train.max_nonfinite_steps` consecutive non-finite steps: stop with an error
                    and save nothing as final (the step skips a non-finite update, so without
                    this a diverged run would finish "successfully" with its last finite params)
"""
from __future__ import annotations

import signal

DEFAULT_MAX_NONFINITE_STEPS = 10


class StopSignal:
  def __init__(self):
    self.requested = False
    self._old = None

  def install(self) -> None:
    def handler(signum, frame):  # noqa: ARG001
      print(f"signal {signum}: saving a checkpoint and exiting after this step", flush=True)
      self.requested = True
    try:
      self._old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. notebooks): no handler
      self._old = None

  def uninstall(self) -> None:
    if self._old is not None:
      signal.signal(signal.SIGTERM, self._old)


class NonFiniteRun(FloatingPointError):
  """The loss stayed non-finite: the launchers print it in one line and exit non-zero."""


class NonFiniteGuard:
  """Counts consecutive steps whose `nonfinite` metric is set; raises NonFiniteRun at `limit`."""

  def __init__(self, limit: int, what: str = "step"):
    self.limit = int(limit)
    self.what = what
    self.run = 0

  def update(self, step: int, metrics: dict) -> None:
    if not int(metrics.get("nonfinite", 0)):
      self.run = 0
      return
    self.run += 1
    if self.run >= self.limit:
      raise NonFiniteRun(
          f"{self.what}s {step - self.run + 1}..{step}: {self.run} consecutive non-finite "
          f"losses or gradients (last loss {float(metrics.get('loss', float('nan')))}; "
          f"config.train.max_nonfinite_steps={self.limit}); stopped, no final params saved")
