"""One training run's lifecycle, shared by the SFT loop (train/loop.py) and the RL loop
(rl/loop.py), so the two cannot drift:

  finished_summary   summary.json of a run that already ended (each loop decides whether it is done)
  resume_or_init     the latest checkpoint in <workdir>/checkpoints, else fresh params (or init.from_dir)
  guarded            SIGTERM is caught for the loop's duration; a NonFiniteRun closes the
                     checkpointer and logger (the periodic saves stay; nothing is saved as final)
  save_if_due        every checkpoint.every_steps, or at once on SIGTERM, never on the last step
  stopped            after a SIGTERM save: close everything, the {"stopped": True} result
  finish             the last checkpoint, the final params for the next stage, summary.json
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable, Iterator

import ml_collections

from mage_jax.train import checkpoint as ckpt_lib
from mage_jax.train import guards
from mage_jax.train.run_setup import SUMMARY, Trainer, initial_state


def finished_summary(workdir: str) -> dict | None:
  """summary.json of a run that reached its end, or None."""
  path = os.path.join(workdir, SUMMARY)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


class Run:
  """The lifecycle of one run in `workdir`; `unit` names a step in messages ("step" | "update")
  and `count_key` the result's count field ("steps" | "updates")."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str, t: Trainer, unit: str = "step",
               count_key: str = "steps"):
    self.config, self.workdir, self.t = config, workdir, t
    self.unit, self.count_key = unit, count_key
    self.ckpt = ckpt_lib.Checkpointer(workdir, keep=config.checkpoint.keep,
                                      async_save=config.checkpoint.async_save)
    self.stop = guards.StopSignal()
    self.diverged = guards.NonFiniteGuard(config.train.get("max_nonfinite_steps",
                                                           guards.DEFAULT_MAX_NONFINITE_STEPS), unit)
    self.logger: Any = None   # the loop's metrics logger, closed on every way out

  @property
  def stop_requested(self) -> bool:
    return self.stop.requested

  def resume_or_init(self) -> tuple[Any, Any, int]:
    """(state, the loop's saved data state or None, the step to start from)."""
    restored = self.ckpt.restore(self.t.abstract, self.t.meta)
    if restored is not None:
      print(f"resumed from {self.ckpt.directory}/{restored[2]}", flush=True)
      return restored
    if self.config.init.from_dir:
      print(f"initialised params from {self.config.init.from_dir}", flush=True)
    return initial_state(self.t), None, 0

  @contextlib.contextmanager
  def guarded(self) -> Iterator[None]:
    self.stop.install()
    try:
      yield
    except guards.NonFiniteRun:
      self._close()
      raise
    finally:
      self.stop.uninstall()

  def save_if_due(self, step: int, state: Any, data_state: Callable[[], Any],
                  before_save: Callable[[], Any] | None = None) -> bool:
    """Save at every checkpoint.every_steps and at once on SIGTERM (not on the last step: the
    final save covers it). True when the loop must stop now (SIGTERM)."""
    if step >= self.t.total_steps:
      return False
    if step % self.config.checkpoint.every_steps == 0 or self.stop.requested:
      if before_save is not None:
        before_save()
      self.ckpt.save(step, state, data_state(), self.t.meta, force=self.stop.requested)
    return self.stop.requested

  def save_now(self, step: int, state: Any, data_state: Any) -> None:
    self.ckpt.save(step, state, data_state, self.t.meta, force=True)

  def stopped(self, step: int) -> dict:
    self._close()
    print(f"stopped at {self.unit} {step} on SIGTERM; checkpoint saved", flush=True)
    return {"stopped": True, self.count_key: step}

  def finish(self, step: int, state: Any, data_state: Any, final_params: tuple) -> None:
    """The last checkpoint and the final params (`save_final_params(workdir, *final_params)`)."""
    self.ckpt.save(step, state, data_state, self.t.meta, force=True)
    self.ckpt.close()
    ckpt_lib.save_final_params(self.workdir, *final_params)

  def write_summary(self, summary: dict) -> dict:
    with open(os.path.join(self.workdir, SUMMARY), "w") as f:
      json.dump(summary, f, indent=1)
    return summary

  def _close(self) -> None:
    self.ckpt.close()
    if self.logger is not None:
      self.logger.close()
