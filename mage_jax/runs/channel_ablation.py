"""The channel ablation: one policy, the same tasks and desktop, GUI-only vs hybrid (issue 14).

For every task with both a GUI-only and a hybrid reference, `run` resets one `LocalEnv` per
channel and plays the scripted policy (`reference:gui` under toolset "gui", `reference:hybrid`
under toolset "hybrid") through the episode loop, so both channels pay the same harness costs
(screenshots, prompt rendering, the settle after each GUI action). Reset (app start-up) time is
recorded apart from the episode's wall time. Any other policy factory can be passed in (a served
model, a checkpoint) to run it both ways on the same suite.

The paper's side-by-side (the Calc banner task): hybrid 6 steps / 0:39, GUI-only 39 steps / 9:56,
i.e. 6.5x steps and 15.3x wall time.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Callable

from mage_jax.agent.env import LocalEnv
from mage_jax.agent.episode import EpisodeConfig, run_episode
from mage_jax.agent.policies import ScriptedPolicy

PAPER = {"steps_ratio": 6.5, "wall_ratio": 15.3, "task": "Calc: merge two banner ranges, label them, "
         "add a bar chart, save as .xlsx", "hybrid": {"steps": 6, "wall_s": 39}, "gui": {"steps": 39, "wall_s": 596}}
CHANNELS = ("gui", "hybrid")


def ablation_tasks(packages) -> list:
  """The tasks that have both a GUI-only and a hybrid reference."""
  return [p for p in packages if all(p.reference_for(c) is not None for c in CHANNELS)]


def run(packages, policy_for: Callable[[str], object] | None = None, env_factory=None,
        out_dir: str | None = None, log=print) -> dict:
  """Runs every package both ways; returns {"rows": [...], "totals": {...}, "paper": PAPER}."""
  policy_for = policy_for or (lambda ch: ScriptedPolicy(f"reference:{ch}"))
  env = (env_factory or LocalEnv)()
  out_dir = out_dir or tempfile.mkdtemp(prefix="channel_ablation_")
  rows = []
  try:
    for pkg in packages:
      row = {"task": pkg.id, "apps": list(pkg.apps)}
      for ch in CHANNELS:
        t0 = time.monotonic()
        obs = env.reset(pkg)
        reset_s = time.monotonic() - t0
        cfg = EpisodeConfig(toolset=ch, out_dir=os.path.join(out_dir, ch))
        res = run_episode(env, pkg, policy_for(ch), cfg, first_observation=obs)
        row[ch] = {"success": res.score == 1.0, "score": res.score, "steps": res.steps,
                   "gui_actions": res.gui_actions, "terminal_actions": res.terminal_actions,
                   "wall_s": round(res.wall_time, 2), "reset_s": round(reset_s, 2), "status": res.status}
        log(f"{pkg.id:24s} {ch:6s} score {res.score:.2f} steps {res.steps:3d} wall {res.wall_time:6.1f} s "
            f"(reset {reset_s:.1f} s)")
      rows.append(row)
  finally:
    env.close()
  return {"rows": rows, "totals": totals(rows), "paper": PAPER}


def totals(rows: list[dict]) -> dict:
  out = {}
  for ch in CHANNELS:
    out[ch] = {"success": sum(r[ch]["success"] for r in rows), "tasks": len(rows),
               "steps": sum(r[ch]["steps"] for r in rows), "wall_s": round(sum(r[ch]["wall_s"] for r in rows), 2),
               "reset_s": round(sum(r[ch]["reset_s"] for r in rows), 2)}
  h, g = out["hybrid"], out["gui"]
  out["steps_ratio"] = round(g["steps"] / h["steps"], 2) if h["steps"] else None
  out["wall_ratio"] = round(g["wall_s"] / h["wall_s"], 2) if h["wall_s"] else None
  return out


def table(result: dict) -> str:
  """A Markdown table: per task and in total, with the ratios beside the paper's."""
  lines = ["| task | GUI ok | GUI steps | GUI wall s | hybrid ok | hybrid steps | hybrid wall s | steps x | wall x |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in result["rows"]:
    g, h = r["gui"], r["hybrid"]
    lines.append(f"| {r['task']} | {int(g['success'])} | {g['steps']} | {g['wall_s']:.1f} | {int(h['success'])} | "
                 f"{h['steps']} | {h['wall_s']:.1f} | {g['steps'] / max(1, h['steps']):.1f} | "
                 f"{g['wall_s'] / max(1e-9, h['wall_s']):.1f} |")
  t = result["totals"]
  lines.append(f"| **total** ({t['gui']['tasks']} tasks) | {t['gui']['success']} | {t['gui']['steps']} | "
               f"{t['gui']['wall_s']:.1f} | {t['hybrid']['success']} | {t['hybrid']['steps']} | "
               f"{t['hybrid']['wall_s']:.1f} | {t['steps_ratio']} | {t['wall_ratio']} |")
  lines.append(f"| paper (Calc banner task) | 1 | 39 | 596 | 1 | 6 | 39 | {PAPER['steps_ratio']} | {PAPER['wall_ratio']} |")
  return "\n".join(lines)


def write(result: dict, path: str) -> None:
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
