"""OSWorld task JSON -> our task packages (`python -m launch.import_tasks --format=osworld`).

Reads id, snapshot, instruction, config[], related_apps and evaluator{func, result, expected,
options, postconfig, conj}. What maps where (docs/osworld_import.md):
  config launch        google-chrome/chromium -> `browser` (Chromium, normal window, profile in
                       ~/.config/chromium); socat (OSWorld's CDP relay) -> dropped, noted; else
                       `osworld_launch`
  config open          `osworld_open` (LibreOffice/GIMP by extension)
  config execute/command  `script`; OSWorld's `echo password | sudo -S` / `sudo` prefixes are dropped
                       (the sandbox user owns its home); shell=true runs under /bin/sh like OSWorld;
                       pyautogui focus clicks/hotkeys -> dropped, noted
  config sleep         `script` sleep (capped at 10 s)
  config download      `osworld_file` from the local file cache (--cache: files named by the
                       download's basename, or cache/index.json {url: file}); not cached -> refused
  config activate_window  dropped, noted (the window manager focuses new windows)
  evaluator            `osworld` / `osworld_output` checker (osworld/task_types.py); a postconfig
                       pyautogui hotkey (Ctrl+S before the file is read) becomes a `hotkey` step
                       the checker presses on the episode's desktop
A task that can't be imported is refused with every reason (unsupported evaluator or getter,
network download, Google Drive step, infeasible task ...); nothing is dropped silently, and every
dropped config step is listed in the imported task's notes.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
from typing import Any

from mage_jax.agent.osworld import task_types

CHROME = ("google-chrome", "chromium", "chromium-browser", "google-chrome-stable")
_SUDO = re.compile(r"echo\s+'?password'?\s*\|\s*sudo\s+-S\s+|\bsudo\s+(-S\s+)?")
_NETWORK = re.compile(r"https?://|\bapt(-get)?\s+(install|update)|\bpip3?\s+install|\bsnap\s+install|\bwget\b|\bcurl\b")
_HOTKEY = re.compile(r"import pyautogui; import time; (?:time\.sleep\([\d.]+\); )?pyautogui\.hotkey\(((?:'\w+'(?:, )?)+)\);"
                     r"(?: time\.sleep\([\d.]+\);)? *")


def _hotkey(params: dict) -> list[str] | None:
  """The keys of a `python -c "import pyautogui; ... pyautogui.hotkey(...)"` step, else None."""
  cmd = params.get("command")
  code = cmd[cmd.index("-c") + 1] if isinstance(cmd, list) and "-c" in cmd[:-1] else None
  m = _HOTKEY.fullmatch(code.strip()) if isinstance(code, str) else None
  return re.findall(r"'(\w+)'", m[1]) if m else None


HOME_DIRS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Videos")


@dataclasses.dataclass
class Result:
  id: str
  source: str
  package: dict[str, Any] | None = None
  files: dict[str, str] = dataclasses.field(default_factory=dict)   # package-relative name -> host file
  notes: list[str] = dataclasses.field(default_factory=list)        # dropped steps, substitutions
  reasons: list[str] = dataclasses.field(default_factory=list)      # why it can't be imported


class _Cache:
  def __init__(self, root: str | None):
    self.root = root
    self.index = {}
    if root and os.path.isfile(os.path.join(root, "index.json")):
      with open(os.path.join(root, "index.json")) as f:
        self.index = json.load(f)

  def find(self, url: str, path: str) -> str | None:
    if not self.root:
      return None
    for name in (self.index.get(url), os.path.basename(path)):
      if name and os.path.isfile(os.path.join(self.root, name)):
        return os.path.join(self.root, name)
    return None


def _command(params: dict) -> tuple[str, bool]:
  cmd, shell = params.get("command"), str(params.get("shell", False)).lower() == "true"
  return (cmd if isinstance(cmd, str) else shlex.join(str(c) for c in cmd)), shell or isinstance(cmd, str)


def _setup_step(step: dict, i: int, res: Result, cache: _Cache) -> dict | list[dict] | None:
  t, p = step.get("type"), step.get("parameters") or {}
  where = f"config[{i}] ({t})"
  if t == "launch":
    argv = p.get("command")
    argv = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv or []]
    if not argv:
      res.reasons.append(f"{where}: no command")
    elif os.path.basename(argv[0]) in CHROME:
      urls = [a for a in argv[1:] if not a.startswith("-")]
      res.notes.append(f"{where}: {argv[0]} -> Chromium (debugging port dropped)")
      return {"type": "browser", "url": urls[0] if urls else "about:blank", "kiosk": False}
    elif argv[0] == "socat":
      res.notes.append(f"{where}: dropped the socat relay to Chrome's debugging port (not used here)")
    else:
      return {"type": "osworld_launch", "argv": argv}
  elif t == "open":
    if os.path.splitext(p.get("path", ""))[1].lower() not in task_types.OFFICE_APPS:
      res.reasons.append(f"{where}: no app here opens {p.get('path')!r}")
    else:
      return {"type": "osworld_open", "path": p["path"]}
  elif t in ("execute", "command"):
    cmd, shell = _command(p)
    if "pyautogui" in cmd:
      res.notes.append(f"{where}: dropped a pyautogui focus click/hotkey on OSWorld's desktop")
      return None
    if _NETWORK.search(cmd):
      res.reasons.append(f"{where}: needs the network ({cmd[:80]!r})")
      return None
    bare = _SUDO.sub("", cmd)
    if bare != cmd:
      res.notes.append(f"{where}: dropped sudo (the sandbox user owns its home)")
    return {"type": "script", "script": f"/bin/sh -c {shlex.quote(bare)}" if shell else bare, "timeout": 60}
  elif t == "sleep":
    return {"type": "script", "script": f"sleep {min(float(p.get('seconds', 1)), 10.0):g}"}
  elif t == "download":
    out = []
    for f in p.get("files", []):
      host = cache.find(f.get("url", ""), f.get("path", ""))
      if host is None:
        res.reasons.append(f"{where}: network download not in the local file cache: {f.get('url', '')[:80]} -> {f.get('path')}")
        continue
      name = f"files/{os.path.basename(f['path'])}"
      res.files[name] = host
      out.append({"type": "osworld_file", "path": f["path"], "src": name})
    return out
  elif t == "activate_window":
    res.notes.append(f"{where}: dropped (the window manager focuses new windows)")
  elif t == "googledrive":
    res.reasons.append(f"{where}: Google Drive step (needs the network and an account)")
  else:
    res.reasons.append(f"{where}: unsupported config step type {t!r}")
  return None


def _listify(x: Any, n: int) -> list:
  return x if isinstance(x, list) else [x] * n


def _checker(ev: dict, res: Result) -> dict | None:
  funcs = ev.get("func")
  if not funcs or funcs == "infeasible":
    res.reasons.append("infeasible task or no evaluator function (nothing to check)")
    return None
  funcs = funcs if isinstance(funcs, list) else [funcs]
  n = len(funcs)
  results, expecteds = _listify(ev.get("result"), n), _listify(ev.get("expected"), n)
  options = _listify(ev.get("options") or {}, n)
  metrics = []
  for i, func in enumerate(funcs):
    if func not in task_types.METRICS:
      res.reasons.append(f"evaluator: unsupported function {func!r}")
    for key, spec in (("result", results[i]), ("expected", expecteds[i])):
      if spec is None or not isinstance(spec, dict):
        continue
      t = spec.get("type")
      if t == "cloud_file":
        res.reasons.append(f"evaluator.{key}: network download of the expected file (cloud_file)")
      elif t not in task_types.GETTERS:
        res.reasons.append(f"evaluator.{key}: unsupported getter {t!r}")
    metrics.append({"func": func, "result": results[i], "expected": expecteds[i], "options": options[i] or {}})
  post = []
  for j, step in enumerate(ev.get("postconfig") or []):
    t = step.get("type")
    cmd = _command(step.get("parameters") or {})[0] if t in ("execute", "command", "launch") else ""
    if "pyautogui" in cmd:
      keys = _hotkey(step.get("parameters") or {})
      if keys is None:
        res.reasons.append(f"evaluator.postconfig[{j}]: pyautogui step other than one hotkey ({cmd[:80]!r})")
      else:   # e.g. Ctrl+S before the file is read: pressed on the episode's desktop by the checker
        post.append({"type": "hotkey", "keys": keys})
      continue
    if t in ("sleep", "execute", "command", "launch"):
      if t == "launch" and os.path.basename(shlex.split(cmd)[0] if cmd else "") in CHROME:
        res.notes.append(f"evaluator.postconfig[{j}]: dropped the browser relaunch (the checker reads its profile)")
        continue
      if _NETWORK.search(cmd):
        res.reasons.append(f"evaluator.postconfig[{j}]: needs the network")
      post.append(step)
    elif t == "download":
      res.reasons.append(f"evaluator.postconfig[{j}]: network download (an evaluation script)")
    elif t == "activate_window":
      res.notes.append(f"evaluator.postconfig[{j}]: dropped activate_window")
    else:
      res.reasons.append(f"evaluator.postconfig[{j}]: unsupported step type {t!r}")
  output = any(isinstance(r, dict) and r.get("type") == "vm_terminal_output" for r in results)
  return {"type": "osworld_output" if output else "osworld", "metrics": metrics,
          "conj": ev.get("conj", "and"), "postconfig": post}


def convert(task: Any, source: str, cache_dir: str | None = None,
            extra: dict[str, Any] | None = None) -> Result:
  """One OSWorld task -> a Result with either `package` or `reasons`. `extra`: references and
  near_miss we wrote for it (OSWorld ships none)."""
  if not isinstance(task, dict):
    return Result("?", source, reasons=["not a JSON object"])
  res = Result(str(task.get("id", "?")), source)
  missing = [f for f in ("id", "instruction", "evaluator") if f not in task]
  if missing:
    res.reasons.append(f"missing fields {missing}")
    return res
  cache = _Cache(cache_dir)
  # OSWorld's VM user has the usual XDG folders; its tasks assume ~/Desktop exists
  setup = [{"type": "script", "script": "mkdir -p " + " ".join(f"~/{d}" for d in HOME_DIRS)}]
  for i, step in enumerate(task.get("config") or []):
    specs = _setup_step(step, i, res, cache)
    setup += specs if isinstance(specs, list) else [specs] if specs else []
  checker = _checker(task["evaluator"], res) if isinstance(task["evaluator"], dict) else None
  if checker is None and not res.reasons:
    res.reasons.append("evaluator must be an object")
  if res.reasons:
    return res
  apps = list(task.get("related_apps") or [])
  gui = any(s["type"] in ("browser", "osworld_launch", "osworld_open") for s in setup) or apps != ["os"]
  pkg = {"id": f"osworld_{res.id}", "instruction": task["instruction"], "kind": "hybrid" if gui else "terminal",
         "apps": apps, "skills": [f"osworld:{task.get('snapshot', '')}"], "channels": ["gui", "terminal"],
         "setup": setup, "checker": checker, "max_steps": 30}
  pkg.update(extra or {})
  res.package = pkg
  return res


def write(res: Result, out_dir: str) -> str:
  """Writes an imported package as <out_dir>/<package id>/task.json (+ files/); validates it first."""
  from mage_jax.agent.tasks.package import package_from_dict
  d = os.path.join(out_dir, res.package["id"])
  package_from_dict(res.package, source=res.source, root=d)   # raises on anything malformed
  os.makedirs(os.path.join(d, "files"), exist_ok=True)
  for name, host in res.files.items():
    shutil.copyfile(host, os.path.join(d, name))
  with open(os.path.join(d, "task.json"), "w") as f:
    json.dump(res.package, f, indent=1)
  return d


def task_files(src: str) -> list[str]:
  if os.path.isfile(src):
    return [src]
  return sorted(os.path.join(r, n) for r, _, names in os.walk(src) for n in names
                if n.endswith(".json") and n != "references.json")


def report_path(out_dir: str) -> str:
  """Beside the output directory, not in it: a suite directory holds only packages."""
  return os.path.normpath(out_dir) + ".import_report.json"


def import_dir(src: str, out_dir: str, cache_dir: str | None = None,
               references: dict[str, Any] | None = None) -> dict[str, Any]:
  """Imports every task JSON under `src`; writes packages under `out_dir` and the report to
  report_path(out_dir)."""
  report: dict[str, Any] = {"imported": [], "refused": []}
  for path in task_files(src):
    try:
      with open(path) as f:
        task = json.load(f)
    except json.JSONDecodeError as e:
      report["refused"].append({"id": "?", "source": path, "reasons": [f"{path}:{e.lineno}: invalid JSON ({e.msg})"]})
      continue
    res = convert(task, path, cache_dir, (references or {}).get(str(task.get("id")) if isinstance(task, dict) else None))
    if res.package is not None:
      try:
        write(res, out_dir)
      except ValueError as e:
        res.reasons.append(f"the converted package is invalid: {e}")
    if res.reasons:
      report["refused"].append({"id": res.id, "source": path, "reasons": res.reasons})
    else:
      report["imported"].append({"id": res.id, "package": res.package["id"], "source": path, "notes": res.notes})
  os.makedirs(out_dir, exist_ok=True)
  with open(report_path(out_dir), "w") as f:
    json.dump(report, f, indent=1)
  return report
