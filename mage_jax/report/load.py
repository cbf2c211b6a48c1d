"""A run's files -> what the report shows. Nothing here raises on bad data: a line that cannot be
read is a `Skip` (file:line and why), shown and counted on the index page.

Eval workdir (launch.eval): results.json (summary + one row per episode), episodes.jsonl (trajectory
format, screenshots under shots/), steps.jsonl (one record per model call), tasks.json (each task's
checker spec). RL workdir (launch.rl): metrics.jsonl (one row per update) and groups.jsonl (one row
per rollout group, `rl_record`). Step records are matched to episodes by `episode_id`; records
written before it existed are matched by task id in file order.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Any, Iterator

from mage_jax.data import trajectory as tr

RUN_FILES = ("results.json", "episodes.jsonl", "groups.jsonl", "metrics.jsonl")


@dataclasses.dataclass
class Skip:
  path: str
  line: int          # 0: the whole file
  reason: str

  def __str__(self) -> str:
    return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"


@dataclasses.dataclass
class Call:
  """One model call: a trajectory step, or an invalid response that consumed a step of the budget."""
  t: int
  step: tr.Step | None               # the trajectory step this call produced (None: parse error)
  observation: tr.Observation        # what the model saw
  response: str | None               # the assistant text as produced (None: not recorded)
  parse_error: str | None
  output_tokens: int | None
  output_text: str | None = None     # a bash call's output: the next observation's text


@dataclasses.dataclass
class EpisodeRow:
  """One episode of the run (from results.json, else from episodes.jsonl)."""
  episode_id: str
  task_id: str
  kind: str
  status: str
  score: float
  success: bool
  steps: int
  model_calls: int = 0
  output_tokens: int = 0
  gui_actions: int = 0
  terminal_actions: int = 0
  wall_time: float = 0.0
  error: str | None = None
  episode: tr.Episode | None = None
  calls: list[Call] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Run:
  workdir: str
  rows: list[EpisodeRow]
  skips: list[Skip]
  config: dict[str, Any]
  tasks: dict[str, dict[str, Any]]   # task id -> {"kind", "instruction", "checker"}
  groups: list[dict[str, Any]]       # RL: groups.jsonl rows
  curve: list[dict[str, Any]]        # RL: metrics.jsonl rows with a reward


def jsonl(path: str, skips: list[Skip]) -> Iterator[tuple[int, dict[str, Any]]]:
  """(line number, object) per readable line of `path`; the others are skips."""
  if not os.path.exists(path):
    return
  with open(path, "rb") as f:
    for n, raw in enumerate(f, 1):
      if not raw.strip():
        continue
      try:
        obj = json.loads(raw.decode("utf-8"))
      except (UnicodeDecodeError, ValueError, RecursionError) as e:
        skips.append(Skip(path, n, f"unreadable line ({type(e).__name__}: {str(e)[:120]})"))
        continue
      if not isinstance(obj, dict):
        skips.append(Skip(path, n, f"expected a JSON object, got {type(obj).__name__}"))
        continue
      yield n, obj


def _json_file(path: str, skips: list[Skip]) -> dict[str, Any]:
  if not os.path.exists(path):
    return {}
  try:
    with open(path, "rb") as f:
      obj = json.loads(f.read().decode("utf-8"))
  except (UnicodeDecodeError, ValueError, RecursionError) as e:
    skips.append(Skip(path, 0, f"unreadable ({type(e).__name__}: {str(e)[:120]})"))
    return {}
  if not isinstance(obj, dict):
    skips.append(Skip(path, 0, "expected a JSON object"))
    return {}
  return obj


def _num(d: dict[str, Any], key: str, default: float = 0.0) -> float:
  v = d.get(key, default)
  return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _row_from_result(d: dict[str, Any], fallback_id: str) -> EpisodeRow:
  return EpisodeRow(
      episode_id=str(d.get("episode_id") or fallback_id), task_id=str(d.get("task_id", "?")),
      kind=str(d.get("kind", "?")), status=str(d.get("status", "?")), score=_num(d, "score"),
      success=d.get("success") is True, steps=int(_num(d, "steps")), model_calls=int(_num(d, "model_calls")),
      output_tokens=int(_num(d, "output_tokens")), gui_actions=int(_num(d, "gui_actions")),
      terminal_actions=int(_num(d, "terminal_actions")), wall_time=_num(d, "wall_time"),
      error=d.get("error") if isinstance(d.get("error"), str) else None)


def _row_from_episode(ep: tr.Episode) -> EpisodeRow:
  meta = ep.meta or {}
  return EpisodeRow(episode_id=ep.id, task_id=str(meta.get("task_id", ep.id)), kind=str(meta.get("kind", "?")),
                    status=str(meta.get("status", ep.outcome or "?")), score=float(ep.reward or 0.0),
                    success=ep.outcome == "success", steps=len(ep.steps), model_calls=len(ep.steps))


def _calls(ep: tr.Episode | None, records: list[dict[str, Any]]) -> list[Call]:
  """Model calls in order; without step records, one call per trajectory step."""
  steps = ep.steps if ep is not None else []
  empty = tr.Observation()
  if not records:
    records = [{"t": i + 1, "step": i + 1} for i in range(len(steps))]
  calls = []
  for rec in records:
    n = rec.get("step") if isinstance(rec.get("step"), int) else None
    error = rec.get("parse_error") if isinstance(rec.get("parse_error"), str) else None
    step = steps[n - 1] if n is not None and 1 <= n <= len(steps) and error is None else None
    obs = steps[n - 1].observation if n is not None and 1 <= n <= len(steps) else empty
    response = rec.get("response", rec.get("raw"))
    out = step is not None and step.tool_call.name == "bash" and n < len(steps)
    calls.append(Call(t=int(_num(rec, "t", len(calls) + 1)), step=step, observation=obs,
                      response=response if isinstance(response, str) else None, parse_error=error,
                      output_tokens=rec.get("output_tokens") if isinstance(rec.get("output_tokens"), int) else None,
                      output_text=steps[n].observation.text if out else None))
  return calls


def _records_by_episode(path: str, skips: list[Skip]) -> tuple[dict[str, list], dict[str, list[list]]]:
  """Step records keyed by episode id, and (old files without ids) by task id, one list per episode."""
  by_id: dict[str, list] = collections.defaultdict(list)
  by_task: dict[str, list[list]] = collections.defaultdict(list)
  for _, rec in jsonl(path, skips):
    if isinstance(rec.get("episode_id"), str):
      by_id[rec["episode_id"]].append(rec)
      continue
    task = str(rec.get("task_id", "?"))
    if rec.get("t") == 1 or not by_task[task]:
      by_task[task].append([])
    by_task[task][-1].append(rec)
  return by_id, by_task


def load_run(workdir: str) -> Run:
  skips: list[Skip] = []
  results = _json_file(os.path.join(workdir, "results.json"), skips)
  episodes: dict[str, tr.Episode] = {}
  ep_path = os.path.join(workdir, "episodes.jsonl")
  if os.path.exists(ep_path):
    for item in tr.read_episodes(ep_path, image_check="none"):
      if isinstance(item, tr.SkippedItem):
        skips.append(Skip(item.path, item.line, f"{item.kind}: {item.reason}"))
      else:
        episodes[item.id] = item
  by_id, by_task = _records_by_episode(os.path.join(workdir, "steps.jsonl"), skips)

  rows: list[EpisodeRow] = []
  seen_of_task: collections.Counter = collections.Counter()
  for i, d in enumerate(results.get("episodes") or []):
    if not isinstance(d, dict):
      skips.append(Skip(os.path.join(workdir, "results.json"), 0, f"episodes[{i}] is not an object"))
      continue
    task = str(d.get("task_id", "?"))
    # launch.eval names episodes <task>-r<repeat>, in the order results.json lists them
    row = _row_from_result(d, f"{task}-r{seen_of_task[task]}")
    seen_of_task[task] += 1
    rows.append(row)
  known = {r.episode_id for r in rows}
  rows += [_row_from_episode(ep) for eid, ep in episodes.items() if eid not in known]
  task_turn: collections.Counter = collections.Counter()
  for row in rows:
    row.episode = episodes.get(row.episode_id)
    records = by_id.get(row.episode_id)
    if records is None and row.status != "env_error":
      old = by_task.get(row.task_id, [])
      records = old[task_turn[row.task_id]] if task_turn[row.task_id] < len(old) else []
      task_turn[row.task_id] += 1
    row.calls = _calls(row.episode, records or [])

  tasks = _json_file(os.path.join(workdir, "tasks.json"), skips)
  groups = [g for _, g in jsonl(os.path.join(workdir, "groups.jsonl"), skips)]
  curve = [m for _, m in jsonl(os.path.join(workdir, "metrics.jsonl"), skips)
           if isinstance(m.get("step"), (int, float)) and isinstance(m.get("reward_mean"), (int, float))]
  config = results.get("config") if isinstance(results.get("config"), dict) else {}
  return Run(workdir, rows, skips, config, {k: v for k, v in tasks.items() if isinstance(v, dict)}, groups, curve)


def find_runs(workdir: str, depth: int = 2) -> list[str]:
  """The workdir itself if it holds a run, else its sub-directories that do (a curriculum)."""
  if any(os.path.exists(os.path.join(workdir, f)) for f in RUN_FILES):
    return [workdir]
  if depth == 0 or not os.path.isdir(workdir):
    return []
  found = []
  for name in sorted(os.listdir(workdir)):
    sub = os.path.join(workdir, name)
    if name != "report" and os.path.isdir(sub) and not os.path.islink(sub):
      found += find_runs(sub, depth - 1)
  return found
