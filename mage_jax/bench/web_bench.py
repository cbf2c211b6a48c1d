"""Web-episode start-up (`python -m launch.bench --suite=web`, BENCHMARKS.md "Web replicas").

Times each phase of `LocalEnv.reset` for a web task (web_forum_reply_arm): sandbox + Xvfb + shell,
the replica's server on a fresh database, Chromium to a settled window (openbox included), and
the whole reset. A fresh profile each episode, so every start is Chromium's first run. The
goal is <= 15 s per episode on the 2-core machine. Needs root-or-user sandboxing, a writable cgroup
and chromium.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any

from mage_jax.bench.results import Row

STARTUP_GOAL_S = 15.0
TASK = os.path.join(os.path.dirname(os.path.dirname(__file__)), "tasks", "web", "tasks", "web_forum_reply_arm.json")


def run(reps: int = 3) -> dict[str, float]:
  """Medians of each phase, in the order LocalEnv.reset runs them for a web task."""
  import dataclasses   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.agent.env import LocalEnv   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.tasks.package import load_package   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.tasks.web import browser, replica   # the bare GPU image runs this module: each path imports only what it needs
  pkg = load_package(TASK)
  bare = dataclasses.replace(pkg, setup=[])          # the episode without its web setup
  app, url = pkg.setup[0]["app"], pkg.setup[1]["url"]
  phases: dict[str, list[float]] = {"sandbox_desktop_s": [], "server_s": [], "browser_s": []}
  for _ in range(reps):
    env = LocalEnv()
    try:
      t0 = time.perf_counter()
      env.reset(bare)
      t1 = time.perf_counter()
      replica.start(env.sandbox, app)
      t2 = time.perf_counter()
      browser.launch(env.desktop, url, title=pkg.setup[1].get("title"))
      t3 = time.perf_counter()
    finally:
      env.close()
    for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
      phases[k].append(v)
  fig = {k: statistics.median(v) for k, v in phases.items()}
  fig["reset_s"] = sum(fig.values())
  fig["reps"] = reps
  return fig


def run_suite(reps: int = 3) -> tuple[list[Row], dict[str, Any]]:
  fig = run(reps=max(1, reps))
  cmd = "python -m launch.bench --suite=web"
  return [Row("web episode start-up", fig["reset_s"], "s", goal=f"<= {STARTUP_GOAL_S:g}",
              met=fig["reset_s"] <= STARTUP_GOAL_S, command=cmd,
              note=(f"median of {fig['reps']}: sandbox+Xvfb+shell {fig['sandbox_desktop_s']:.1f} s, server "
                    f"{fig['server_s']:.2f} s, Chromium (first run) {fig['browser_s']:.1f} s"))], {"web": fig}


if __name__ == "__main__":
  print(run())
