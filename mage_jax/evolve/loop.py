"""Harness evolution: evaluate a seed variant, propose neighbours, keep the best by the score.

Greedy hill climbing: each generation proposes from the current best (rule-based neighbours,
plus one LLM-authored diff when an author node is given), evaluates the ones not seen yet
(variant ids), and moves to the best variant evaluated so far; it stops when the best stays.
Every evaluated variant is one lineage record: id, name, parent id, diff, source, generation,
metrics, score key. Evaluation is a callable (variant -> (row, failure excerpts)) so the loop is
the same for launch.evolve's slot pool and a test's stub environment.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Sequence

from mage_jax.evolve import heldout as H
from mage_jax.evolve.search import AuthorNode, Proposal, Score, SearchSpace, rule_proposals
from mage_jax.harness.variant import HarnessVariant

Evaluate = Callable[[HarnessVariant], tuple[dict[str, Any], list[str]]]
TABLE_METRICS = ("success_rate", "mean_steps", "output_tokens_per_task", "tokens_per_task", "dollars_per_task",
                 "invalid_call_rate", "gui_share", "terminal_share", "extra_share")


@dataclasses.dataclass
class Record:
  variant: HarnessVariant
  parent: str | None
  diff: dict[str, Any] | None
  source: str                     # seed | rule | llm
  generation: int
  row: dict[str, Any]
  failures: list[str]
  rationale: str = ""

  def to_json(self, score: Score) -> dict[str, Any]:
    return {"id": self.variant.variant_id, "name": self.variant.name, "parent": self.parent,
            "diff": self.diff, "source": self.source, "generation": self.generation,
            "rationale": self.rationale, "metrics": {m: self.row.get(m) for m in TABLE_METRICS},
            "score": list(score.key(self.row)), "config": self.variant.to_dict()}


@dataclasses.dataclass
class EvolveResult:
  records: list[Record]
  best: Record
  rejected: dict[str, int]        # LLM proposals rejected, by reason
  generations: int
  heldout: dict[str, Any] | None = None   # evolve/heldout.compare: the finalists on held-out tasks


def select(records: Sequence[Record], score: Score) -> Record:
  """The best record by `score`; ties go to the earlier one (fewer changes from the seed)."""
  return records[score.select([r.row for r in records])]


def table(records: Sequence[Record], score: Score, best: Record | None = None) -> str:
  head = ["variant", "id", "parent", "source", "gen", "diff"] + list(TABLE_METRICS)
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in records:
    diff = json.dumps(r.diff)[:60] if r.diff else ""
    mark = " *" if best is not None and r is best else ""
    lines.append("| " + " | ".join([r.variant.name + mark, r.variant.variant_id, r.parent or "", r.source,
                                    str(r.generation), diff.replace("|", "/")]
                                   + [_fmt(r.row.get(m)) for m in TABLE_METRICS]) + " |")
  return "\n".join(lines) + f"\n\nscore: {score} (* = selected)"


def _fmt(v: Any) -> str:
  return f"{v:.3f}" if isinstance(v, float) else str(v)


def evolve(seed: HarnessVariant, evaluate: Evaluate, score: Score, space: SearchSpace, *,
           generations: int = 3, max_children: int = 8, author: AuthorNode | None = None,
           log_path: str | None = None, on_record: Callable[[Record], None] | None = None,
           heldout: Callable[[HarnessVariant], tuple[dict[str, Any], dict[str, float]]] | None = None,
           finalists: int = 3) -> EvolveResult:
  """The search (module docstring); with `heldout` (variant -> (row, {episode id: success})), the
  top `finalists` variants and the seed are compared on held-out tasks (evolve/heldout.py)."""
  records: list[Record] = []
  seen: set[str] = set()
  rejected: dict[str, int] = {}

  def run(variant: HarnessVariant, parent: str | None, diff, source: str, gen: int, why: str = "") -> None:
    row, failures = evaluate(variant)
    rec = Record(variant, parent, diff, source, gen, row, failures, why)
    records.append(rec)
    seen.add(variant.variant_id)
    if log_path:
      os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
      with open(log_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec.to_json(score)) + "\n")
    if on_record:
      on_record(rec)

  run(seed, None, None, "seed", 0)
  best, gen = records[0], 0
  for gen in range(1, generations + 1):
    parent = best.variant
    props: list[Proposal] = rule_proposals(parent, space)[:max_children]
    if author is not None:
      p = author.propose(parent, table(records, score, best), best.failures, rejected, seed=gen)
      if p is not None:
        props.append(p)
    fresh = {}
    for p in props:
      if p.variant.variant_id not in seen and p.variant.variant_id not in fresh:
        fresh[p.variant.variant_id] = p
    for k, p in enumerate(fresh.values()):
      child = dataclasses.replace(p.variant, name=f"g{gen}.{k}")
      run(child, parent.variant_id, p.diff, p.source, gen, p.rationale)
    new_best = select(records, score)
    if new_best is best:
      break
    best = new_best
  held = None
  if heldout is not None:
    held = H.compare(records, score, heldout, finalists)
  return EvolveResult(records, best, rejected, gen, held)


def failure_excerpts(results, k: int = 3, chars: int = 300) -> list[str]:
  """Up to `k` failing episodes as short text: task, status, parse errors, the last actions."""
  out = []
  for r in results:
    if r.success or len(out) >= k:
      continue
    steps = r.episode.steps if r.episode is not None else []
    tail = "; ".join(f"{s.tool_call.name} {json.dumps(s.tool_call.arguments)[:80]}" for s in steps[-3:])
    out.append(f"task {r.task_id}: status={r.status} score={r.score} steps={r.steps} "
               f"parse_errors={r.parse_errors} last calls: {tail}"[:chars])
  return out
