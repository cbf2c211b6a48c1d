"""Finalists of a harness search compared on held-out tasks, with intervals.

The search picks on its own tasks, so its best variant's margin is biased upward (the winner's
curse). The top `k` variants by the score (and the seed, the baseline) are run again on tasks
the search never saw; each gets its held-out success with a 95% Wilson interval, and the paired
difference to the seed over the same (task, repeat) episodes with a 95% bootstrap interval
(agent/success_stats). The held-out pick is the score's choice among the finalists' held-out rows.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

from mage_jax.agent.success_stats import paired_bootstrap, wilson_interval

# variant -> (its held-out evaluation row, {episode id: success 0/1})
EvaluateHeldout = Callable[[Any], tuple[dict[str, Any], dict[str, float]]]


def split_tasks(tasks: Sequence[Any], share: float, salt: str = "heldout") -> tuple[list, list]:
  """(search tasks, held-out tasks): a task is held out when a hash of its id falls below `share`,
  so the split is stable across runs and suites."""
  if not 0 <= share < 1:
    raise ValueError(f"evolve.heldout_share={share}: expected a share in [0, 1)")
  def u(t):
    return int(hashlib.sha256(f"{salt}:{t.id}".encode()).hexdigest()[:8], 16) / 16 ** 8
  held = [t for t in tasks if u(t) < share]
  return [t for t in tasks if u(t) >= share], held


def finalists(records: Sequence[Any], score: Any, k: int) -> list[Any]:
  """The top `k` records by the score (repeated selection), plus the seed if not among them."""
  left, out = list(records), []
  while left and len(out) < k:
    pick = left[score.select([r.row for r in left])]
    out.append(pick)
    left.remove(pick)
  if records and records[0] not in out:
    out.append(records[0])
  return out


def compare(records: Sequence[Any], score: Any, evaluate_heldout: EvaluateHeldout, k: int = 3) -> dict[str, Any]:
  """Held-out rows of the finalists (see the module docstring); records[0] is the seed."""
  fins = finalists(records, score, k)
  runs = [(r, *evaluate_heldout(r.variant)) for r in fins]
  base = next(o for r, _, o in runs if r is records[0])
  rows = []
  for r, row, outcomes in runs:
    n, wins = len(outcomes), int(sum(outcomes.values()))
    lo, hi = wilson_interval(wins, n) if n else (0.0, 0.0)
    common = sorted(set(outcomes) & set(base))
    paired = (paired_bootstrap([base[e] for e in common], [outcomes[e] for e in common])
              if common else {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p_value": 1.0})
    rows.append({"id": r.variant.variant_id, "name": r.variant.name, "search_score": list(score.key(r.row)),
                 "episodes": n, "success": wins / max(1, n), "success_ci95": [round(lo, 4), round(hi, 4)],
                 "vs_seed": {k2: round(v, 4) for k2, v in paired.items()},
                 "row": {m: row.get(m) for m in ("success_rate", "mean_steps", "tokens_per_task",
                                                 "dollars_per_task", "extra_share")}})
  pick = fins[score.select([row for _, row, _ in runs])]
  return {"finalists": rows, "selected": pick.variant.variant_id, "selected_record": pick}


def table(result: dict[str, Any]) -> str:
  head = ["finalist", "id", "held-out episodes", "success [95% CI]", "vs seed (paired) [95% CI]",
          "tokens/task", "$/task"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for f in result["finalists"]:
    v = f["vs_seed"]
    mark = " *" if f["id"] == result["selected"] else ""
    lines.append("| " + " | ".join([
        f["name"] + mark, f["id"], str(f["episodes"]),
        f"{f['success']:.1%} [{f['success_ci95'][0]:.1%}, {f['success_ci95'][1]:.1%}]",
        f"{v['diff']:+.1%} [{v['lo']:+.1%}, {v['hi']:+.1%}]",
        f"{f['row']['tokens_per_task'] or 0:.0f}", f"{f['row']['dollars_per_task'] or 0:.5f}"]) + " |")
  return "\n".join(lines) + "\n\n(* = held-out pick by the score)"
