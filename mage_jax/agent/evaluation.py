"""Suite evaluation: run every task through a slot pool, aggregate, print a table, write JSON
and the episodes (trajectory JSONL)."""
from __future__ import annotations

import collections
import json
import os
from typing import Any, Callable, Iterable, Sequence

from mage_jax.agent.episode import EpisodeResult, Policy
from mage_jax.agent.spray import mean_of as spray_means
from mage_jax.agent.slots import Job, SlotPool
from mage_jax.tasks.package import TaskPackage
from mage_jax.data import trajectory as tr


def evaluate(tasks: Sequence[TaskPackage], policy_factory: Callable[[TaskPackage], Policy], pool: SlotPool,
             repeats: int = 1, on_result: Callable[[EpisodeResult], None] | None = None,
             skip: Iterable[str] = ()) -> list[EpisodeResult]:
  """Runs every (task, repeat) job whose episode id (`<task>-r<k>`) is not in `skip` (a resumed run)."""
  skip = set(skip)
  jobs = [Job(t, policy_factory(t), f"{t.id}-r{r}") for r in range(repeats) for t in tasks
          if f"{t.id}-r{r}" not in skip]
  results = []
  for res in pool.run(jobs):
    results.append(res)
    if on_result:
      on_result(res)
  order = {j.episode_id.rsplit("-r", 1)[0]: i for i, j in enumerate(jobs)}
  return sorted(results, key=lambda r: order.get(r.task_id, 0))


def _row(name: str, rs: list[EpisodeResult]) -> dict[str, Any]:
  # env_error is only what the workload can't cause (a harness bug, the host out of disk), so it is
  # left out of the rates but counted with its reasons; success_rate_all scores it as a failure,
  # the bound to watch if env errors ever grow. env_lost (the workload killed its environment) is
  # an ordinary scored episode.
  scored = [r for r in rs if r.status != "env_error"]
  reasons = collections.Counter((r.error or "unknown").splitlines()[0][:200] for r in rs if r.status == "env_error")
  gui = sum(r.gui_actions for r in scored)
  term = sum(r.terminal_actions for r in scored)
  extra = sum(r.extra_actions for r in scored)  # a harness variant's extra tools (teacher only)
  n = max(1, len(scored))
  return {"group": name, "episodes": len(rs), "env_errors": len(rs) - len(scored),
          "env_error_reasons": dict(reasons.most_common(5)),
          "env_lost": sum(r.status == "env_lost" for r in rs),
          "success_rate": sum(r.success for r in scored) / n,
          "success_rate_all": sum(r.success for r in scored) / max(1, len(rs)),
          "mean_score": sum(r.score for r in scored) / n,
          "mean_steps": sum(r.steps for r in scored) / n,
          "model_calls_per_task": sum(r.model_calls for r in scored) / n,
          "output_tokens_per_task": sum(r.output_tokens for r in scored) / n,
          "prompt_tokens_per_task": sum(r.prompt_tokens for r in scored) / n,
          "tokens_per_task": sum(r.prompt_tokens + r.output_tokens for r in scored) / n,
          # the endpoint's priced replies; a policy that reports no price has 0 here (priced_calls 0)
          "dollars_per_task": sum(r.dollars for r in scored) / n,
          "priced_calls": sum(r.priced_calls for r in scored),
          "gui_share": gui / max(1, gui + term + extra), "terminal_share": term / max(1, gui + term + extra),
          "extra_share": extra / max(1, gui + term + extra),
          "parse_errors": sum(sum(r.parse_errors.values()) for r in scored),
          "invalid_call_rate": (sum(sum(r.parse_errors.values()) for r in scored)
                                / max(1, sum(r.model_calls for r in scored))),
          "harness": sorted({r.harness for r in rs}),
          **spray_means([r.spray for r in scored]),  # did the policy drift toward spraying?
          "wall_time_per_task": sum(r.wall_time for r in scored) / n}


def summarize(results: Iterable[EpisodeResult]) -> list[dict[str, Any]]:
  results = list(results)
  by_kind = collections.defaultdict(list)
  for r in results:
    by_kind[r.kind].append(r)
  return [_row(k, by_kind[k]) for k in ("terminal", "gui", "hybrid") if k in by_kind] + [_row("all", results)]


def format_table(rows: list[dict[str, Any]]) -> str:
  head = ["group", "episodes", "env_err", "success", "steps", "calls/task", "out_tok/task", "gui", "term"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    lines.append("| " + " | ".join([
        r["group"], str(r["episodes"]), str(r["env_errors"]), f"{r['success_rate']:.1%}",
        f"{r['mean_steps']:.2f}", f"{r['model_calls_per_task']:.2f}", f"{r['output_tokens_per_task']:.1f}",
        f"{r['gui_share']:.1%}", f"{r['terminal_share']:.1%}"]) + " |")
  return "\n".join(lines)


def write_results(out_dir: str, results: list[EpisodeResult], rows: list[dict[str, Any]],
                  config: dict[str, Any] | None = None) -> dict[str, str]:
  os.makedirs(out_dir, exist_ok=True)
  paths = {"results": os.path.join(out_dir, "results.json"),
           "episodes": os.path.join(out_dir, "episodes.jsonl"),
           "steps": os.path.join(out_dir, "steps.jsonl")}
  with open(paths["results"], "w") as f:
    json.dump({"config": config or {}, "summary": rows, "episodes": [r.summary() for r in results]}, f, indent=1)
  tr.write_episodes(paths["episodes"], [r.episode for r in results if r.episode is not None])
  with open(paths["steps"], "w") as f:
    for r in results:
      for rec in r.records:
        f.write(json.dumps({"task_id": r.task_id, **rec}) + "\n")
  return paths
