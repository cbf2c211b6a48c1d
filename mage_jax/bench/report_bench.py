"""Report figures: build time and size of the episode viewer for 100 episodes × 15 steps
(`python -m mage_jax.bench.report_bench`, BENCHMARKS.md "Report"; `run_suite` gives launch.bench rows).

The run is synthetic but shaped like launch.eval's output: 1280×800 PNG screenshots with window
chrome, text and a photo-like noisy region (so JPEG sizes are not flattered by flat colours), one
per step; bash outputs of ~2 KB; the response text of every call. 40 distinct screenshots are copied
to the 1,500 paths (the report decodes each path). Build time is wall clock on all cores.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from mage_jax.bench.results import Row

EPISODES, STEPS = 100, 15
SCREEN = (1280, 800)
BUILD_GOAL_S, SIZE_GOAL_MB = 30.0, 50.0


def _screenshot(rng: np.random.Generator) -> Image.Image:
  im = Image.new("RGB", SCREEN, tuple(int(v) for v in rng.integers(180, 240, 3)))
  d = ImageDraw.Draw(im)
  for _ in range(6):  # windows with title bars and lines of text
    x, y = int(rng.integers(0, 900)), int(rng.integers(0, 500))
    w, h = int(rng.integers(200, 500)), int(rng.integers(150, 300))
    d.rectangle([x, y, x + w, y + h], fill=(250, 250, 250), outline=(80, 80, 80))
    d.rectangle([x, y, x + w, y + 22], fill=tuple(int(v) for v in rng.integers(40, 120, 3)))
    for line in range(1, h // 16):
      d.text((x + 6, y + 10 + 14 * line), "lorem ipsum %d dolor sit amet" % rng.integers(1e6), fill=(20, 20, 20))
  # a photo-like region: smooth blobs plus grain (pure per-pixel noise would be a worst case no
  # desktop shows; flat colours alone would flatter JPEG)
  blobs = Image.fromarray(rng.integers(0, 255, (25, 40, 3), dtype=np.uint8)).resize((640, 400), Image.BICUBIC)
  grain = rng.integers(-12, 12, (400, 640, 3))
  im.paste(Image.fromarray(np.clip(np.asarray(blobs, np.int16) + grain, 0, 255).astype(np.uint8)), (600, 350))
  return im


def make_run(root: str, seed: int = 0) -> str:
  rng = np.random.default_rng(seed)
  pool = os.path.join(root, "pool")
  os.makedirs(pool)
  sources = []
  for i in range(40):
    sources.append(os.path.join(pool, f"s{i}.png"))
    _screenshot(rng).save(sources[-1])
  episodes, records, results = [], [], []
  for e in range(EPISODES):
    ep_id, task = f"task{e % 25:02d}-r{e // 25}", f"task{e % 25:02d}"
    steps = []
    for t in range(1, STEPS + 1):
      shot = f"shots/{ep_id}/o{t:03d}.png"
      os.makedirs(os.path.join(root, os.path.dirname(shot)), exist_ok=True)
      shutil.copyfile(sources[int(rng.integers(len(sources)))], os.path.join(root, shot))
      bash = t % 3 == 0
      call = ({"name": "bash", "arguments": {"command": f"ls -la /tmp/dir{t}"}} if bash else
              {"name": "computer_use", "arguments": {"action": "left_click",
                                                     "coordinate": [int(v) for v in rng.integers(0, 1000, 2)]}})
      steps.append({"observation": {"screenshot": shot, "text": ("total 0\n" + "-rw-r--r-- 1 u u 0 f\n" * 100)
                                    if t > 1 and (t - 1) % 3 == 0 else None},
                    "think": "I look at the screen. " * 10, "action": f"Step {t}", "tool_call": call})
      records.append({"episode_id": ep_id, "task_id": task, "t": t, "step": t, "output_tokens": 120,
                      "response": "<think>\n" + "I look at the screen. " * 10 + "\n</think>\nAction: Step\n"
                                  "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"})
    episodes.append({"id": ep_id, "instruction": f"Do task {task}.", "screen_size": list(SCREEN), "steps": steps,
                     "source": "rollout", "outcome": "success" if e % 2 else "failure", "reward": float(e % 2),
                     "meta": {"task_id": task, "kind": "hybrid", "status": "terminated"}})
    results.append({"episode_id": ep_id, "task_id": task, "kind": "hybrid", "score": float(e % 2),
                    "status": "terminated", "steps": STEPS, "model_calls": STEPS, "output_tokens": 120 * STEPS,
                    "gui_actions": 10, "terminal_actions": 5, "wall_time": 60.0, "success": bool(e % 2)})
  shutil.rmtree(pool)
  with open(os.path.join(root, "episodes.jsonl"), "w") as f:
    f.write("".join(json.dumps(e) + "\n" for e in episodes))
  with open(os.path.join(root, "steps.jsonl"), "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in records))
  with open(os.path.join(root, "results.json"), "w") as f:
    json.dump({"config": {}, "episodes": results}, f)
  return root


def run(progress: bool = True) -> dict[str, Any]:
  from mage_jax.report.build import build_report   # the bare GPU image runs this module: each path imports only what it needs
  with tempfile.TemporaryDirectory() as tmp:
    make_run(tmp)
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    out = build_report(tmp, progress=progress)
    seconds = time.perf_counter() - t0
    return {"build_s": seconds, "cpu_s": _cpu_seconds() - cpu0, "report_mb": out["bytes"] / 1e6,
            "episodes": out["episodes"], "screenshots": out["screenshots"], "cpus": os.cpu_count(),
            "loadavg": os.getloadavg()[0]}


def _cpu_seconds() -> float:
  """User + system CPU of this process and its reaped children (the thumbnail workers): on a
  shared machine wall time measures the neighbours, CPU seconds / cores is what the build costs."""
  own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_suite(reps: int = 1) -> tuple[list[Row], dict[str, Any]]:
  figs = [run() for _ in range(max(1, min(reps, 3)))]
  fig = min(figs, key=lambda f: f["build_s"])
  cmd = "python -m mage_jax.bench.report_bench"
  note = (f"{EPISODES} episodes x {STEPS} steps, {fig['screenshots']} 1280x800 screenshots, {fig['cpus']} cores, "
          f"{fig['cpu_s']:.1f} CPU-s, load {fig['loadavg']:.1f}")
  rows = [Row("report build", fig["build_s"], "s", goal=f"<= {BUILD_GOAL_S:g}", met=fig["build_s"] <= BUILD_GOAL_S,
              command=cmd, note=note + f"; best of {len(figs)}"),
          Row("report size", fig["report_mb"], "MB", goal=f"<= {SIZE_GOAL_MB:g}", met=fig["report_mb"] <= SIZE_GOAL_MB,
              command=cmd, note="JPEG thumbnails + pages; full PNGs linked, not copied")]
  return rows, {"report": figs}


if __name__ == "__main__":
  for row in run_suite()[0]:
    print(f"{row.name}: {row.value:.2f} {row.unit} (goal {row.goal}, {'met' if row.met else 'NOT met'}; {row.note})")
