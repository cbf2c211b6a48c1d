"""The scripted reference teacher plays the proof family's instances and the vision stage's click
screens through the real harness (the slot pool and episode loop launch.eval uses: sandbox, Xvfb at
640x400, the Tk apps) and writes what it solved as SFT data. The family and the screens themselves
are task definitions (tasks/proof_family.py, tasks/proof_grounding.py); playing them is a run.

  python -c "from mage_jax.runs import proof_teacher as pt; pt.collect_teacher_data('W/teacher')"
"""
from __future__ import annotations

import collections
import json
import os
from typing import Mapping, Any

from mage_jax.agent import evaluation
from mage_jax.agent.env import EnvConfig, LocalEnv
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.policies import ScriptedPolicy
from mage_jax.agent.slots import make_pool
from mage_jax.data import trajectory as tr
from mage_jax.tasks import proof_family as pf
from mage_jax.tasks import proof_grounding as pg
from mage_jax.tasks.package import TaskPackage


def collect_teacher_data(out_dir: str, seed: int = 0, per_template: int | None = None, workers: int = 2,
                         max_steps: int = 6, family: Mapping[str, Any] | None = None,
                         split: str = "train") -> str:
  """The scripted reference policy plays the TRAIN instances (split="heldout": the held-out ones,
  for the copy probe only, never trained on) through the real harness (the slot pool
  and episode loop launch.eval uses: sandbox, Xvfb at 640x400, the Tk apps); the successful
  episodes go to <out_dir>/episodes.jsonl (trajectory format, screenshots under <out_dir>/shots).
  The same episodes split by kind go to <out_dir>/{terminal,gui,hybrid,grounding}.jsonl, the layout
  `launch.pack --config=configs/data_tiny.py:<out_dir>` reads (grounding stays empty).
  <out_dir>/teacher.json counts episodes per template and the failures with their reasons."""
  tasks = pf.instances(split, seed, per_template, family)
  results = play_reference(tasks, os.path.join(out_dir, "shots"), workers, max_steps)
  kept = [r for r in results if r.success and r.episode is not None]
  path = os.path.join(out_dir, "episodes.jsonl")
  tr.write_episodes(path, [r.episode for r in kept])
  for kind in ("terminal", "gui", "hybrid", "grounding"):  # configs/data_tiny.py:<out_dir> reads these
    tr.write_episodes(os.path.join(out_dir, f"{kind}.jsonl"), [r.episode for r in kept if r.kind == kind])
  report = {"seed": seed, "split": split, f"{split}_instances": len(tasks), "episodes": len(kept),
            "pools": {k: {split: len(v) for split, v in p.items()} for k, p in pf.value_pools(family).items()},
            "per_template": dict(collections.Counter(pf.template_of(r.task_id) for r in kept)),
            "failed": {r.task_id: failure_line(r) for r in results if not r.success}}
  write_report(out_dir, "teacher.json", report,
               f"teacher: {len(kept)}/{len(tasks)} {split} episodes kept {report['per_template']}")
  return path


def play_reference(tasks: list[TaskPackage], shots_dir: str, workers: int = 2, max_steps: int = 6) -> list:
  """The scripted reference policy plays `tasks` through the real harness (the slot pool and
  episode loop launch.eval uses: sandbox, Xvfb at 640x400, the Tk apps); screenshots under
  `shots_dir`. Returns the evaluation results, in task order."""
  env_cfg = EnvConfig(width=pf.SCREEN[0], height=pf.SCREEN[1])
  ep_cfg = EpisodeConfig(out_dir=shots_dir, max_steps=max_steps)
  pool = make_pool("local", lambda: LocalEnv(env_cfg), ep_cfg, workers)
  try:
    return evaluation.evaluate(tasks, lambda t: ScriptedPolicy("reference"), pool)
  finally:
    pool.close()


def failure_line(r) -> str:
  """One line on why a teacher episode is not kept (status, score, the error's first line)."""
  first = (r.error or "").splitlines()[0][:200] if r.error else ""
  return f"{r.status} score={r.score:.2f} {first}".strip()


def collect_grounding(out_dir: str, tasks: list[TaskPackage], workers: int = 2) -> str:
  """The teacher plays `tasks` through the real harness; the click step of each solved one goes to
  <out_dir>/episodes.jsonl with meta.target_box and meta.button_boxes; <out_dir>/grounding.json counts them and names
  every failure."""
  results = play_reference(tasks, os.path.join(out_dir, "shots"), workers)
  boxes = {t.id: pg.target_box(t) for t in tasks}
  by_id = {t.id: t for t in tasks}
  kept = []
  for r in results:
    if r.success and r.episode is not None:
      ep = r.episode
      ep.steps = ep.steps[:1]           # the click
      ep.meta["target_box"] = boxes[r.task_id]
      ep.meta["button_boxes"] = pg.button_boxes(by_id[r.task_id])
      kept.append(ep)
  path = os.path.join(out_dir, "episodes.jsonl")
  tr.write_episodes(path, kept)
  report = {"screens": len(tasks), "episodes": len(kept),
            "buttons": dict(collections.Counter(
                str(len(next(s for s in t.setup if s["type"] == "app")["config"]["places"])) for t in tasks)),
            "failed": {r.task_id: failure_line(r) for r in results if not r.success}}
  write_report(out_dir, "grounding.json", report, f"grounding: {len(kept)}/{len(tasks)} click screens kept -> {path}")
  return path


def write_report(out_dir: str, name: str, report: dict, line: str) -> None:
  """<out_dir>/<name> = `report`; one progress line, naming the failures' count and file."""
  with open(os.path.join(out_dir, name), "w") as f:
    json.dump(report, f, indent=1)
  print(line + (f"; {len(report['failed'])} failed (see {name})" if report["failed"] else ""), flush=True)
