"""OSWorld's results table: the success rate per OSWorld domain and overall, the mean of N runs.

OSWorld-Verified reports, for each run, the mean episode score (0..1, partial scores count as they
are) over all tasks and per domain (the task's folder: chrome, gimp, libreoffice_calc, ...), and the
headline is the mean of the runs. A run is one repeat of the suite (episode ids `<task>-r<k>`);
domains come from the imported packages' `osworld_domain:<name>` skill tag.
"""
from __future__ import annotations

from typing import Any, Iterable

from mage_jax.tasks.osworld.importer import DOMAIN_SKILL, DOMAINS


def domain_of(skills: Iterable[str]) -> str:
  return next((s[len(DOMAIN_SKILL):] for s in skills if s.startswith(DOMAIN_SKILL)), "other")


def run_of(episode_id: str) -> int:
  head, sep, k = episode_id.rpartition("-r")
  return int(k) if sep and k.isdigit() else 0


def table(results: Iterable[Any]) -> dict[str, Any]:
  """{"runs": n, "domains": {domain: {"tasks", "per_run": [%], "mean": %}}, "overall": {...}} from
  EpisodeResult-like rows (score, skills, episode_id); an episode the harness lost scores 0, as in
  OSWorld."""
  by: dict[tuple[str, int], list[float]] = {}
  for r in results:
    for d in (domain_of(r.skills), "overall"):
      by.setdefault((d, run_of(r.episode_id)), []).append(float(r.score))
  runs = sorted({k for _, k in by})
  out: dict[str, Any] = {"runs": len(runs), "domains": {}}
  names = [d for d in DOMAINS if any((d, k) in by for k in runs)] + sorted(
      {d for d, _ in by} - set(DOMAINS) - {"overall"}) + ["overall"]
  for d in names:
    per_run = [100.0 * sum(by.get((d, k), [])) / len(by[(d, k)]) if by.get((d, k)) else 0.0 for k in runs]
    row = {"tasks": len(by.get((d, runs[0]), [])) if runs else 0, "per_run": per_run,
           "mean": sum(per_run) / len(per_run) if per_run else 0.0}
    if d == "overall":
      out["overall"] = row
    else:
      out["domains"][d] = row
  return out


def format_table(t: dict[str, Any]) -> str:
  """The leaderboard's shape: one row per domain, then the overall figure, success rate in %."""
  lines = [f"OSWorld success rate (%), mean of {t['runs']} run(s)",
           f"{'domain':22s} {'tasks':>5s} {'mean':>7s}  per run"]
  for d, row in list(t["domains"].items()) + [("overall", t.get("overall", {"tasks": 0, "mean": 0.0, "per_run": []}))]:
    lines.append(f"{d:22s} {row['tasks']:5d} {row['mean']:7.2f}  " + " ".join(f"{x:.2f}" for x in row["per_run"]))
  return "\n".join(lines)
