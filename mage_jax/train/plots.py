"""PNG loss / throughput curves of a run, or of every stage of a curriculum
(the logic of launch.plot).

Reads <workdir>/metrics.jsonl, or <workdir>/<stage>/metrics.jsonl for each stage
of a curriculum workdir, and writes <workdir>/plots/{loss,throughput}.png.
"""
from __future__ import annotations

import os

from mage_jax.train.metrics import read_metrics


def runs(workdir: str) -> dict[str, list[dict]]:
  if os.path.exists(os.path.join(workdir, "metrics.jsonl")):
    return {os.path.basename(os.path.normpath(workdir)): read_metrics(workdir)}
  out = {}
  for name in sorted(os.listdir(workdir)):
    if os.path.exists(os.path.join(workdir, name, "metrics.jsonl")):
      out[name] = read_metrics(os.path.join(workdir, name))
  return out


def _per_step(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
  by_step = {r["step"]: r[key] for r in rows if key in r and "step" in r}
  steps = sorted(by_step)
  return steps, [by_step[s] for s in steps]


def plot(workdir: str) -> list[str]:
  """Writes the PNGs; returns their paths."""
  import matplotlib   # matplotlib only when plotting (slow import)
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt   # matplotlib only when plotting (slow import)
  data = runs(workdir)
  if not data:
    raise FileNotFoundError(f"no metrics.jsonl under {workdir}")
  out_dir = os.path.join(workdir, "plots")
  os.makedirs(out_dir, exist_ok=True)
  written = []
  for key, ylabel, fname in (("loss", "train loss", "loss.png"),
                             ("train/tokens_per_s", "tokens/s", "throughput.png")):
    fig, ax = plt.subplots(figsize=(8, 4))
    offset = 0
    for name, rows in data.items():
      steps, values = _per_step(rows, key)
      if steps:
        ax.plot([offset + s for s in steps], values, marker=".", label=name)
        offset += max(steps)
    ax.set_xlabel("step (stages concatenated)" if len(data) > 1 else "step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(out_dir, fname)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
  return written
