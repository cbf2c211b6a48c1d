"""The local file cache for OSWorld's downloads (nothing is fetched from the network here).

OSWorld's VM downloads a task's inputs (config `download`), its expected files (evaluator
`cloud_file`) and some evaluation scripts (postconfig `download`) from URLs at set-up. A user fetches
those files beforehand into one directory, laid out by URL:

    <cache>/<first 16 hex digits of sha256(url)>_<file name>

where <file name> is the basename of the path OSWorld saves it to (a download's `path`, a
cloud_file's `dest`). `needed()` lists every (url, cache name) a task set asks for, so
`python -m launch.import_tasks --format=osworld --src=... --list_needed=needs.tsv` writes the list a
user feeds to their downloader. Two older layouts still resolve: `index.json` {url: file name} in the
cache directory, and a file named by the bare basename.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterator

PLACEHOLDER = b"osworld cache placeholder: measures importability only, not the task's real file\n"


def cache_name(url: str, path: str) -> str:
  return f"{hashlib.sha256(url.encode()).hexdigest()[:16]}_{os.path.basename(path)}"


class Cache:
  def __init__(self, root: str | None):
    self.root = root
    self.index: dict[str, str] = {}
    index = os.path.join(root, "index.json") if root else None
    if index and os.path.isfile(index):
      with open(index) as f:
        self.index = json.load(f)
      if not isinstance(self.index, dict):
        raise ValueError(f"{index}: expected a JSON object {{url: file name}}")

  def find(self, url: str, path: str) -> str | None:
    """The cached file for `url` (saved by OSWorld as `path`), or None."""
    if not self.root:
      return None
    for name in (cache_name(url, path), self.index.get(url), os.path.basename(path)):
      if name and os.path.isfile(os.path.join(self.root, name)):
        return os.path.join(self.root, name)
    return None


def _listify(x: Any) -> list:
  return x if isinstance(x, list) else [x]


def downloads(task: dict) -> Iterator[tuple[str, str]]:
  """Every (url, saved-as path) the task downloads: config and postconfig `download` steps and
  evaluator `cloud_file` getters (one file, or `multi` with parallel `path`/`dest` lists)."""
  ev = task.get("evaluator") if isinstance(task.get("evaluator"), dict) else {}
  for step in list(task.get("config") or []) + list(ev.get("postconfig") or []):
    if isinstance(step, dict) and step.get("type") == "download":
      for f in (step.get("parameters") or {}).get("files", []):
        yield f.get("url", ""), f.get("path", "")
  for key in ("result", "expected"):
    for spec in _listify(ev.get(key)):
      if isinstance(spec, dict) and spec.get("type") == "cloud_file":
        yield from zip(_listify(spec.get("path")), _listify(spec.get("dest")))


def needed(tasks: list[tuple[str, dict]]) -> list[dict[str, Any]]:
  """[{url, name, tasks: [ids]}] over (source, task) pairs, one row per distinct (url, name)."""
  rows: dict[tuple[str, str], dict[str, Any]] = {}
  for _, task in tasks:
    for url, path in downloads(task):
      row = rows.setdefault((url, cache_name(url, path)), {"url": url, "name": cache_name(url, path), "tasks": []})
      if task.get("id") not in row["tasks"]:
        row["tasks"].append(task.get("id"))
  return list(rows.values())


def write_needed(rows: list[dict[str, Any]], path: str) -> None:
  """Tab-separated `url<TAB>cache name<TAB>task ids`, one line a file."""
  with open(path, "w") as f:
    for r in rows:
      f.write(f"{r['url']}\t{r['name']}\t{','.join(map(str, r['tasks']))}\n")


def make_placeholders(rows: list[dict[str, Any]], root: str) -> int:
  """Writes PLACEHOLDER under every cache name not present yet; returns how many it wrote. For
  measuring importability only: a placeholder is not the task's file, and such a task can't be run."""
  os.makedirs(root, exist_ok=True)
  n = 0
  for r in rows:
    p = os.path.join(root, r["name"])
    if not os.path.exists(p):
      with open(p, "wb") as f:
        f.write(PLACEHOLDER)
      n += 1
  return n
