"""The index page's numbers, from the episode rows (one source for every table)."""
from __future__ import annotations

import collections
import math
from typing import Any, Iterable

from mage_jax.report.load import EpisodeRow


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
  """95% Wilson score interval of a binomial rate (sound at 0/n and n/n, unlike the normal one)."""
  if n == 0:
    return 0.0, 0.0
  p = successes / n
  centre = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return max(0.0, centre - half), min(1.0, centre + half)


def group_stats(name: str, rows: list[EpisodeRow]) -> dict[str, Any]:
  """Rates over scored episodes; env_error episodes (not the policy's doing) are counted apart."""
  scored = [r for r in rows if r.status != "env_error"]
  n = len(scored)
  ok = sum(r.success for r in scored)
  lo, hi = wilson(ok, n)
  gui, term = sum(r.gui_actions for r in scored), sum(r.terminal_actions for r in scored)
  mean = lambda f: sum(f(r) for r in scored) / n if n else 0.0
  return {"name": name, "episodes": len(rows), "scored": n, "successes": ok,
          "success_rate": ok / n if n else 0.0, "ci_low": lo, "ci_high": hi,
          "env_errors": len(rows) - n, "mean_score": mean(lambda r: r.score),
          "mean_steps": mean(lambda r: r.steps), "mean_calls": mean(lambda r: r.model_calls),
          "mean_output_tokens": mean(lambda r: r.output_tokens),
          "gui_share": gui / (gui + term) if gui + term else 0.0,
          "terminal_share": term / (gui + term) if gui + term else 0.0,
          "wall_time": sum(r.wall_time for r in rows)}


def _grouped(rows: Iterable[EpisodeRow], key) -> list[dict[str, Any]]:
  by = collections.defaultdict(list)
  for r in rows:
    by[key(r)].append(r)
  return [group_stats(k, by[k]) for k in sorted(by)]


def summary(rows: list[EpisodeRow]) -> dict[str, Any]:
  errors = collections.Counter((r.error or "unknown").splitlines()[0][:300] if (r.error or "").strip()
                               else "unknown" for r in rows if r.status == "env_error")
  return {"all": group_stats("all", rows), "families": _grouped(rows, lambda r: r.kind),
          "tasks": _grouped(rows, lambda r: r.task_id), "env_error_reasons": errors.most_common()}


def compare(rows_a: list[EpisodeRow], rows_b: list[EpisodeRow]) -> list[dict[str, Any]]:
  """Per task in either run: success in A and B; tasks whose majority outcome flipped come first."""
  a = {s["name"]: s for s in _grouped(rows_a, lambda r: r.task_id)}
  b = {s["name"]: s for s in _grouped(rows_b, lambda r: r.task_id)}
  out = []
  for task in sorted(set(a) | set(b)):
    ra = a[task]["success_rate"] if task in a and a[task]["scored"] else None
    rb = b[task]["success_rate"] if task in b and b[task]["scored"] else None
    flip = ""
    if ra is not None and rb is not None and (ra >= 0.5) != (rb >= 0.5):
      flip = "gained" if rb >= 0.5 else "lost"
    out.append({"task": task, "a": ra, "b": rb, "flip": flip,
                "delta": (rb - ra) if ra is not None and rb is not None else None})
  return sorted(out, key=lambda r: (r["flip"] == "", r["task"]))
