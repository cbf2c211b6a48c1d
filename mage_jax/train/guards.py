"""What stops a training loop (SFT and RL alike) between steps.

  StopSignal        SIGTERM: finish the current step, save a checkpoint, exit 0
  NonFiniteGuard    `train.max_nonfinite_steps` consecutive non-finite steps: stop with an error
                    and save nothing as final (the step skips a non-finite update, so without
                    this a diverged run would finish "successfully" with its last finite params)
"""
from __future__ import annotations

import signal


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
