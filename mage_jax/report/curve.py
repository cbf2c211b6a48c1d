"""The RL learning curve (success and reward over updates) as SVG geometry for the template."""
from __future__ import annotations

from typing import Any

WIDTH, HEIGHT, PAD = 640, 220, 36
SERIES = (("pass_rate", "success (pass rate)"), ("reward_mean", "mean reward"))


def learning_curve(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
  """Polylines over updates on a shared [min(0, lo), max(1, hi)] axis; None without points."""
  rows = sorted(rows, key=lambda r: r["step"])
  if not rows:
    return None
  xs = [float(r["step"]) for r in rows]
  values = [float(r[k]) for r in rows for k, _ in SERIES if isinstance(r.get(k), (int, float))]
  lo, hi = min([0.0] + values), max([1.0] + values)
  x0, x1 = xs[0], max(xs[-1], xs[0] + 1)
  sx = lambda x: PAD + (x - x0) / (x1 - x0) * (WIDTH - 2 * PAD)
  sy = lambda y: HEIGHT - PAD - (y - lo) / (hi - lo) * (HEIGHT - 2 * PAD)
  series = []
  for i, (key, label) in enumerate(SERIES):
    pts = [(sx(float(r["step"])), sy(float(r[key]))) for r in rows if isinstance(r.get(key), (int, float))]
    if pts:
      series.append({"key": key, "label": label, "index": i, "last": float(rows[-1].get(key, 0.0)),
                     "points": " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)})
  yticks = [{"y": sy(v), "label": f"{v:g}"} for v in (lo, (lo + hi) / 2, hi)]
  xticks = [{"x": sx(v), "label": f"{v:g}"} for v in (x0, x1)]
  return {"width": WIDTH, "height": HEIGHT, "pad": PAD, "series": series, "yticks": yticks, "xticks": xticks}
