"""Result rows, the printed table and bench/results.json."""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
from typing import Any


@dataclasses.dataclass
class Row:
  """One figure of the suite: what, how much, the goal, and how to reproduce it."""
  name: str
  value: float
  unit: str
  goal: str = ""            # e.g. ">= 1.2"; empty when the row is informational
  met: bool | None = None   # None when there is no goal
  command: str = ""
  note: str = ""

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def goal_row(name: str, value: float, unit: str, at_least: float, **kw: Any) -> Row:
  return Row(name=name, value=value, unit=unit, goal=f">= {at_least:g}",
             met=bool(value >= at_least), **kw)


def machine_info() -> dict[str, Any]:
  import jax   # the bare GPU image runs this module: each path imports only what it needs
  info = {
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "platform": platform.platform(), "python": platform.python_version(),
      "cpu_count": os.cpu_count(), "jax": jax.__version__,
      "backend": jax.default_backend(),
      "devices": [str(d.device_kind) for d in jax.devices()],
  }
  try:
    import jaxlib   # the bare GPU image runs this module: each path imports only what it needs
    info["jaxlib"] = jaxlib.__version__
  except Exception:  # jaxlib version is informational only
    pass
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          info["cpu_model"] = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  try:
    info["loadavg_at_start"] = os.getloadavg()
  except OSError:
    pass
  return info


def _fmt(v: float) -> str:
  if v == 0 or 1e-3 <= abs(v) < 1e6:
    return f"{v:.4g}"
  return f"{v:.3e}"


def table(rows: list[Row]) -> str:
  header = ("figure", "value", "unit", "goal", "met", "note")
  body = [(r.name, _fmt(r.value), r.unit, r.goal or "-",
           "-" if r.met is None else ("yes" if r.met else "NO"), r.note) for r in rows]
  widths = [max(len(x[i]) for x in [header] + body) for i in range(len(header))]
  line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
  sep = "|-" + "-|-".join("-" * w for w in widths) + "-|"
  return "\n".join([line(header), sep] + [line(b) for b in body])


def write_json(path: str, suite: str, rows: list[Row], details: dict[str, Any],
               machine: dict[str, Any]) -> None:
  """Write atomically (temp file + rename): a run killed mid-write keeps the last whole file."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    json.dump({"suite": suite, "machine": machine, "rows": [r.as_dict() for r in rows],
               "details": details}, f, indent=2, sort_keys=True, default=float)
  os.replace(tmp, path)
