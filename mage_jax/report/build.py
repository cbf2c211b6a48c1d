"""Build <workdir>/report/: index.html, one page per episode, rl.html, thumbnails, assets.

Every page is a Jinja2 template rendered with autoescape on, so environment and model text is
always text; `safe_text.clean` makes control characters visible and bounds sizes. Links and images
point only at files the report wrote (pages, thumbnails) or at the run's own screenshots, by
relative path; nothing is fetched from the network.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from typing import Any

import jinja2
from tqdm import tqdm

from mage_jax.report import curve, images, overlay, safe_text, stats
from mage_jax.report.load import Call, EpisodeRow, Run, Skip, find_runs, load_run

_HERE = os.path.dirname(os.path.abspath(__file__))
RL_GROUPS_SHOWN = 60     # the RL view shows the last groups plus an even sample of the earlier ones


def _env() -> jinja2.Environment:
  env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(_HERE, "templates")),
                           autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                           lstrip_blocks=True)
  env.filters["clean"] = safe_text.clean
  env.filters["pct"] = lambda v: "—" if v is None else f"{100 * v:.1f}%"
  env.filters["num"] = lambda v, d=2: "—" if v is None else f"{v:.{d}f}"
  env.filters["nums"] = lambda vs: ", ".join(
      f"{v:.3g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"
      for v in (vs if isinstance(vs, list) else [vs]))
  return env


def _page_name(episode_id: str) -> str:
  return safe_text.slug(episode_id, hashlib.sha1(episode_id.encode("utf-8", "surrogatepass")).hexdigest())


def _text(value: Any) -> dict[str, Any]:
  text = safe_text.clean(value)
  preview, folded = safe_text.fold(text)
  return {"text": text, "preview": preview, "folded": folded, "chars": len(text), "lines": text.count("\n") + 1}


@dataclasses.dataclass
class _Shots:
  """Screenshots of the run -> thumbnails under report/thumbs, made once each."""
  run_dir: str
  report_dir: str
  skips: list[Skip]
  by_src: dict[str, images.Thumb] = dataclasses.field(default_factory=dict)

  def add(self, root: str, rel: str | None, page: str) -> images.Thumb | None:
    if not rel:
      return None
    src = os.path.realpath(os.path.join(root, rel))
    if not images.inside(src, self.run_dir):
      self.skips.append(Skip(page, 0, f"screenshot outside the run directory not shown: {safe_text.clean(rel, 300)}"))
      return None
    if src not in self.by_src:
      name = os.path.splitext(os.path.basename(src))[0] + ".jpg"
      self.by_src[src] = images.Thumb(src, os.path.join(self.report_dir, "thumbs", page, name))
    return self.by_src[src]


def _call_view(call: Call, thumb: images.Thumb | None) -> dict[str, Any]:
  step = call.step
  view: dict[str, Any] = {
      "t": call.t, "thumb": thumb, "parse_error": call.parse_error, "output_tokens": call.output_tokens,
      "observation": _text(call.observation.text) if call.observation.text else None,
      "response": _text(call.response) if call.response is not None else None,
      "reconstructed": None, "action": None, "command": None, "output": None}
  if step is not None:
    view["action"] = _text(json.dumps({"name": step.tool_call.name, "arguments": step.tool_call.arguments},
                                      ensure_ascii=False, indent=1))
    if call.response is None:  # the run did not record the text as produced
      view["reconstructed"] = _text(f"<think>\n{step.think}\n</think>\nAction: {step.action}")
    if step.tool_call.name == "bash":
      view["command"] = _text(step.tool_call.arguments.get("command"))
      view["output"] = _text(call.output_text) if call.output_text is not None else None
  return view


def _draw(views: list[dict[str, Any]], calls: list[Call]) -> None:
  """Marks per call, once thumbnail sizes are known (the pointer carries across calls)."""
  pointer = None
  for view, call in zip(views, calls):
    thumb = view["thumb"]
    view["marks"] = {}
    if call.step is None or thumb is None or thumb.size is None:
      continue
    w, h = thumb.size
    view["marks"], pointer = overlay.marks(call.step.tool_call.name, call.step.tool_call.arguments, pointer, w, h)


def _rl_groups(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
  if len(groups) <= RL_GROUPS_SHOWN:
    return groups
  tail = groups[-RL_GROUPS_SHOWN // 2:]
  head = groups[:-RL_GROUPS_SHOWN // 2]
  step = len(head) / (RL_GROUPS_SHOWN - len(tail))
  return [head[int(i * step)] for i in range(RL_GROUPS_SHOWN - len(tail))] + tail


def _rel(path: str, start: str) -> str:
  return os.path.relpath(path, start).replace(os.sep, "/")


def build_run(run_dir: str, compare_dir: str | None = None, progress: bool = True) -> dict[str, Any]:
  """The report of one run; returns counts and where it went."""
  t0 = time.perf_counter()
  run_dir = os.path.abspath(run_dir)
  out = os.path.join(run_dir, "report")
  os.makedirs(os.path.join(out, "episodes"), exist_ok=True)
  run = load_run(run_dir)
  other = load_run(os.path.abspath(compare_dir)) if compare_dir else None
  shots = _Shots(run_dir, out, run.skips)
  env = _env()

  pages = []
  for row in run.rows:
    page = _page_name(row.episode_id)
    root = row.episode.root if row.episode is not None else run_dir
    thumbs = [shots.add(root, c.observation.screenshot, page) for c in row.calls]
    pages.append((row, page, thumbs))
  images.make_thumbnails([t for t in shots.by_src.values() if not os.path.exists(t.dst) or
                          os.path.getmtime(t.dst) < os.path.getmtime(t.src)], progress=progress)
  for t in shots.by_src.values():
    if t.size is None and t.error is None:   # an up-to-date thumbnail from an earlier build
      try:
        with images.Image.open(t.src) as im:
          t.size = im.size
      except OSError as e:
        t.error = f"{type(e).__name__}: {str(e)[:200]}"
    if t.error:
      run.skips.append(Skip(t.src, 0, f"unreadable screenshot: {t.error}"))

  ep_dir = os.path.join(out, "episodes")
  for row, page, thumbs in tqdm(pages, desc="report: episode pages", unit="page", disable=not progress):
    views = [_call_view(c, t) for c, t in zip(row.calls, thumbs)]
    for v in views:
      if v["thumb"] is not None and v["thumb"].size is not None:
        v["thumb_src"] = _rel(v["thumb"].dst, ep_dir)
        v["full_src"] = _rel(v["thumb"].src, ep_dir)
    _draw(views, row.calls)
    html = env.get_template("episode.html").render(
        title=f"episode {row.episode_id}", assets="../assets", row=row, calls=views,
        instruction=row.episode.instruction if row.episode else run.tasks.get(row.task_id, {}).get("instruction"),
        checker=_text(json.dumps(run.tasks[row.task_id]["checker"], ensure_ascii=False, indent=1))
        if isinstance(run.tasks.get(row.task_id, {}).get("checker"), dict) else None)
    with open(os.path.join(ep_dir, page + ".html"), "w", encoding="utf-8") as f:
      f.write(html)

  has_rl = bool(run.groups or run.curve)
  if has_rl:
    with open(os.path.join(out, "rl.html"), "w", encoding="utf-8") as f:
      f.write(env.get_template("rl.html").render(title=f"RL: {run_dir}", assets="assets",
                                                 curve=curve.learning_curve(run.curve),
                                                 groups=_rl_groups(run.groups), total_groups=len(run.groups)))
  summary = stats.summary(run.rows)
  index = env.get_template("index.html").render(
      title=f"report: {os.path.basename(run_dir)}", assets="assets", run_dir=run_dir, summary=summary,
      rows=[(r, f"episodes/{p}.html" if r.calls else None) for r, p, _ in pages], skips=run.skips,
      has_rl=has_rl, compare=stats.compare(run.rows, other.rows) if other else None,
      compare_dir=os.path.abspath(compare_dir) if compare_dir else None, subruns=[])
  with open(os.path.join(out, "index.html"), "w", encoding="utf-8") as f:
    f.write(index)
  _copy_assets(out)
  return {"index": os.path.join(out, "index.html"), "episodes": len(run.rows), "skips": len(run.skips),
          "screenshots": len(shots.by_src), "seconds": time.perf_counter() - t0, "bytes": tree_bytes(out)}


def _copy_assets(out: str) -> None:
  os.makedirs(os.path.join(out, "assets"), exist_ok=True)
  for name in ("report.css", "report.js"):
    shutil.copyfile(os.path.join(_HERE, "assets", name), os.path.join(out, "assets", name))


def tree_bytes(path: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def build_report(workdir: str, compare: str | None = None, progress: bool = True) -> dict[str, Any]:
  """A run's report, or for a curriculum workdir one per stage run plus an index linking them."""
  runs = find_runs(workdir)
  if runs == [workdir]:
    return build_run(workdir, compare, progress)
  if not runs:
    raise FileNotFoundError(f"{workdir}: no run found (none of results.json, episodes.jsonl, groups.jsonl, "
                            "metrics.jsonl here or in its sub-directories)")
  if compare:
    raise ValueError("--compare needs two run directories, not a curriculum directory")
  built = [build_run(r, None, progress) for r in runs]
  out = os.path.join(workdir, "report")
  os.makedirs(out, exist_ok=True)
  html = _env().get_template("index.html").render(
      title=f"report: {os.path.basename(os.path.abspath(workdir))}", assets="assets", run_dir=os.path.abspath(workdir),
      summary=None, rows=[], skips=[], has_rl=False, compare=None, compare_dir=None,
      subruns=[{"name": _rel(r, workdir), "href": _rel(b["index"], out), "episodes": b["episodes"],
                "skips": b["skips"]} for r, b in zip(runs, built)])
  with open(os.path.join(out, "index.html"), "w", encoding="utf-8") as f:
    f.write(html)
  _copy_assets(out)
  return {"index": os.path.join(out, "index.html"), "episodes": sum(b["episodes"] for b in built),
          "skips": sum(b["skips"] for b in built), "runs": len(runs),
          "seconds": sum(b["seconds"] for b in built), "bytes": tree_bytes(out) + sum(b["bytes"] for b in built)}
