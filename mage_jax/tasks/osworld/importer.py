"""OSWorld task JSON -> our task packages (`python -m launch.import_tasks --format=osworld`).

Reads id, snapshot, instruction, config[], related_apps and evaluator{func, result, expected,
options, postconfig, conj}. What maps where (docs/osworld_import.md):
  config launch        google-chrome/chromium -> `browser` (Chromium, normal window, profile in
                       ~/.config/chromium); socat (OSWorld's CDP relay) -> dropped, noted; else
                       `osworld_launch`
  config open          `osworld_open` (LibreOffice/GIMP by extension); a PDF, text or JSON file is
                       shown in Chromium (an unmerged `osworld_browser` step with `viewer`: a second
                       launch hands the file URL to the running browser as a tab)
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
import urllib.parse

from mage_jax.tasks.osworld import archive_metrics, cache as cache_lib, pyautogui_steps, table_metrics, task_types
from mage_jax.tasks.package import package_from_dict

CHROME = ("google-chrome", "chromium", "chromium-browser", "google-chrome-stable")
_KILL_CHROME = re.compile(r"(pkill|killall)\s+(-f\s+)?(google-chrome|chrome)")
VIEWED_IN_BROWSER = (".pdf", ".txt", ".json")   # config `open` of these: a Chromium tab on the file
_SUDO = re.compile(r"echo\s+'?password'?\s*\|\s*sudo\s+-S\s+|\bsudo\s+(-S\s+)?")
_NETWORK = re.compile(r"https?://|\bapt(-get)?\s+(install|update)|\bpip3?\s+install|\bsnap\s+install|\bwget\b|\bcurl\b")
# `cmd &` (not `&&`, `2>&1`, `&>`): a job the setup leaves running, which the step waits to settle
_BACKGROUND = re.compile(r"(?<![&>|<])&(?![&>])")
BACKGROUND_SETTLE = 5.0   # s, at most
# domains whose app Debian does not package: refused with the reason (Makefile system-apps installs the rest)
NOT_IN_DEBIAN = {"vs_code": "VS Code is not packaged by Debian (no app to run it here)"}
VSCODE_APPS = ("vscode", "vs_code", "code")


def _gui_actions(params: dict) -> tuple[list[dict] | None, str]:
  """(computer_use calls, '') for a plain pyautogui step, else (None, why not)."""
  code = pyautogui_steps.code_of(params)
  if code is None:
    return None, "not a `python -c` pyautogui snippet"
  try:
    return pyautogui_steps.parse(code), ""
  except ValueError as e:
    return None, str(e)


DOMAINS = ("chrome", "gimp", "libreoffice_calc", "libreoffice_impress", "libreoffice_writer", "multi_apps", "os",
           "thunderbird", "vlc", "vs_code")   # OSWorld's leaderboard columns
DOMAIN_SKILL = "osworld_domain:"   # the skill tag naming the task's OSWorld domain (its folder)
OSWORLD_MAX_STEPS = 50   # OSWorld-Verified's step budget
HOME_DIRS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Videos")


@dataclasses.dataclass
class Result:
  id: str
  source: str
  package: dict[str, Any] | None = None
  files: dict[str, str] = dataclasses.field(default_factory=dict)   # package-relative name -> host file
  notes: list[str] = dataclasses.field(default_factory=list)        # dropped steps, substitutions
  reasons: list[str] = dataclasses.field(default_factory=list)      # why it can't be imported


def _cached_files(params: dict, what: str, folder: str, res: Result, cache: cache_lib.Cache) -> list[tuple[str, str]]:
  """[(VM path, package file)] for a download step's files found in the local cache; each missing
  one is a reason to refuse."""
  out = []
  for f in params.get("files", []):
    url, path = str(f.get("url", "")), str(f.get("path", ""))
    host = cache.find(url, path)
    if host is None:
      res.reasons.append(f"{what} not in the local file cache: {url[:80]} -> {path}")
      continue
    name = f"{folder}/{cache_lib.cache_name(url, path)}"
    res.files[name] = host
    out.append((path, name))
  return out


def _command(params: dict) -> tuple[str, bool]:
  cmd, shell = params.get("command"), str(params.get("shell", False)).lower() == "true"
  return (cmd if isinstance(cmd, str) else shlex.join(str(c) for c in cmd)), shell or isinstance(cmd, str)


def _setup_step(step: dict, i: int, res: Result, cache: cache_lib.Cache) -> dict | list[dict] | None:
  t, p = step.get("type"), step.get("parameters") or {}
  where = f"config[{i}] ({t})"
  if t == "launch":
    argv = p.get("command")
    argv = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv or []]
    if not argv:
      res.reasons.append(f"{where}: no command")
    elif os.path.basename(argv[0]) in CHROME:
      urls = [a for a in argv[1:] if not a.startswith("-")]
      res.notes.append(f"{where}: {argv[0]} -> Chromium with its DevTools port")
      return {"type": "osworld_browser", "urls": urls}
    elif argv[0] == "socat":
      res.notes.append(f"{where}: dropped the socat relay to Chrome's debugging port (not used here)")
    else:
      return {"type": "osworld_launch", "argv": argv}
  elif t == "open":
    ext = os.path.splitext(p.get("path", ""))[1].lower()
    if ext in VIEWED_IN_BROWSER:   # OSWorld's desktop opens these in Evince or gedit; Chromium shows them
      res.notes.append(f"{where}: {p['path']} shown in Chromium (a stand-in for the desktop's viewer)")
      return {"type": "osworld_browser", "urls": ["file://" + urllib.parse.quote(p["path"])], "viewer": True}
    if ext not in task_types.OFFICE_APPS:
      res.reasons.append(f"{where}: no app here opens {p.get('path')!r}")
    else:
      return {"type": "osworld_open", "path": p["path"]}
  elif t in ("execute", "command"):
    cmd, shell = _command(p)
    if "pyautogui" in cmd:
      actions, why = _gui_actions(p)
      if actions is None:
        res.notes.append(f"{where}: dropped a pyautogui step that is not a plain key/click/type sequence ({why})")
        return None
      return {"type": "osworld_gui", "actions": actions}
    if _NETWORK.search(cmd):
      res.reasons.append(f"{where}: needs the network ({cmd[:80]!r})")
      return None
    bare = _SUDO.sub("", cmd)
    if bare != cmd:
      res.notes.append(f"{where}: dropped sudo (the sandbox user owns its home)")
    step = {"type": "script", "script": f"/bin/sh -c {shlex.quote(bare)}" if shell else bare, "timeout": 60}
    if _BACKGROUND.search(bare):   # a job left running: let it reach its program first (preparers.py)
      step["settle"] = BACKGROUND_SETTLE
    return step
  elif t == "sleep":
    return {"type": "script", "script": f"sleep {min(float(p.get('seconds', 1)), 10.0):g}"}
  elif t == "download":
    return [{"type": "osworld_file", "path": path, "src": src}
            for path, src in _cached_files(p, f"{where}: network download", "files", res, cache)]
  elif t == "activate_window":
    res.notes.append(f"{where}: dropped (the window manager focuses new windows)")
  elif t == "chrome_open_tabs":   # merged into the browser step by convert()
    return {"type": "osworld_browser", "urls": [str(u) for u in p.get("urls_to_open", [])]}
  elif t == "chrome_close_tabs":   # after the browser step that opened them (closed tabs can be restored)
    return {"type": "osworld_close_tabs", "urls": [str(u) for u in p.get("urls_to_close", [])]}
  elif t == "googledrive":
    res.reasons.append(f"{where}: Google Drive step (needs the network and an account)")
  else:
    res.reasons.append(f"{where}: unsupported config step type {t!r}")
  return None


def _listify(x: Any, n: int) -> list:
  return x if isinstance(x, list) else [x] * n


def _cloud_file(spec: dict, key: str, res: Result, cache: cache_lib.Cache) -> dict:
  """A cloud_file getter served from the local cache: the expected file goes into the package
  (files/expected/, read by the checker on the host, never seen by the agent)."""
  urls, dests = spec.get("path"), spec.get("dest")
  pairs = list(zip(urls, dests)) if isinstance(urls, list) else [(urls, dests)]
  srcs = []
  for url, dest in pairs:
    host = cache.find(str(url), str(dest))
    if host is None:
      res.reasons.append(f"evaluator.{key}: expected file not in the local file cache: {str(url)[:80]} -> {dest}")
      continue
    name = f"files/expected/{cache_lib.cache_name(str(url), str(dest))}"
    res.files[name] = host
    srcs.append(name)
  return {**spec, "src": srcs if isinstance(urls, list) else (srcs[0] if srcs else None)}


def _metric_reasons(func: str, options: dict) -> list[str]:
  """Options of a supported metric that we don't implement (so the task would be scored wrongly)."""
  if func == "compare_archive" and options.get("file_type", "text") not in archive_metrics.FILE_TYPES:
    return [f"evaluator: compare_archive of {options.get('file_type')!r} files is not supported"]
  if func == "check_json" and options.get("is_yaml"):
    return ["evaluator: check_json with is_yaml (YAML is not a dependency here)"]
  if func == "compare_table":
    rules = options.get("rules") or []
    return [f"evaluator: compare_table rule {r.get('type')!r} is not supported (only {table_metrics.SUPPORTED_RULES})"
            for r in rules if r.get("type") not in table_metrics.SUPPORTED_RULES] + [
            f"evaluator: compare_table check_cell property {p!r} is not supported (only {table_metrics.CELL_PROPS})"
            for r in rules if r.get("type") == "check_cell" for p in r.get("props", {}) if p not in table_metrics.CELL_PROPS]
  return []


def _checker(ev: dict, res: Result, cache: cache_lib.Cache) -> dict | None:
  funcs = ev.get("func")
  if funcs == task_types.INFEASIBLE:   # OSWorld scores it by the agent answering FAIL
    res.notes.append("infeasible task: scores 1 when the agent terminates with status failure")
    return {"type": "osworld", "infeasible": True, "metrics": []}
  if not funcs:
    res.reasons.append("no evaluator function (OSWorld leaves this task unscored)")
    return None
  funcs = funcs if isinstance(funcs, list) else [funcs]
  n = len(funcs)
  results, expecteds = _listify(ev.get("result"), n), _listify(ev.get("expected"), n)
  options = _listify(ev.get("options") or {}, n)
  metrics = []
  for i, func in enumerate(funcs):
    if func not in task_types.METRICS:
      res.reasons.append(f"evaluator: unsupported function {func!r}")
    res.reasons.extend(_metric_reasons(func, options[i] or {}))
    specs = {}
    for key, spec in (("result", results[i]), ("expected", expecteds[i])):
      if spec is not None and isinstance(spec, dict):
        t = spec.get("type")
        if t == "cloud_file":
          spec = _cloud_file(spec, key, res, cache)
        elif t not in task_types.GETTERS:
          res.reasons.append(f"evaluator.{key}: unsupported getter {t!r}")
      specs[key] = spec
    opts = dict(options[i] or {})
    if func == "compare_table":   # OSWorld's multi getters give [workbook, <book>-<sheet>.csv ...]: name the sheets
      for key in ("result", "expected"):
        names = (specs[key] or {}).get("dest") or (specs[key] or {}).get("path") if isinstance(specs[key], dict) else None
        if isinstance(names, list) and len(names) > 1:
          opts[f"{key}_csv_sheets"] = [table_metrics.csv_sheet(str(names[0]), str(n)) for n in names[1:]]
    metrics.append({"func": func, "result": specs["result"], "expected": specs["expected"], "options": opts})
  post = []
  for j, step in enumerate(ev.get("postconfig") or []):
    t, params = step.get("type"), step.get("parameters") or {}
    cmd = _command(params)[0] if t in ("execute", "command", "launch") else ""
    if "pyautogui" in cmd:
      actions, why = _gui_actions(params)
      if actions is None:
        res.reasons.append(f"evaluator.postconfig[{j}]: pyautogui step that is not a plain key/click/type sequence ({why})")
      else:   # e.g. Ctrl+S before the file is read: run on the episode's desktop by the checker
        post.append({"type": "gui_actions", "actions": actions})
      continue
    if t in ("sleep", "execute", "command", "launch"):
      if t == "launch" and os.path.basename(shlex.split(cmd)[0] if cmd else "") in CHROME:
        res.notes.append(f"evaluator.postconfig[{j}]: dropped the browser relaunch (the checker reads its profile)")
        continue
      if _NETWORK.search(cmd):
        res.reasons.append(f"evaluator.postconfig[{j}]: needs the network")
      if _KILL_CHROME.fullmatch(cmd.strip()):   # Chrome quits so its prefs reach the disk; ours is Chromium
        res.notes.append(f"evaluator.postconfig[{j}]: {cmd!r} -> 'pkill chromium'")
        step = {"type": t, "parameters": {"command": ["pkill", "chromium"]}}
      post.append(step)
    elif t == "download":   # an evaluation script, written into the sandbox just before the metrics
      post += [{"type": "file", "path": path, "src": src}
               for path, src in _cached_files(params, f"evaluator.postconfig[{j}]: download", "files/post", res, cache)]
    elif t == "close_window":
      post.append(step)
    elif t == "open" and os.path.splitext(params.get("path", ""))[1].lower() in task_types.OFFICE_APPS:
      post.append({"type": "open", "path": params["path"]})   # e.g. the gold workbook, re-saved by Calc
    elif t == "open":
      res.reasons.append(f"evaluator.postconfig[{j}]: no app here opens {params.get('path')!r}")
    elif t == "activate_window":
      res.notes.append(f"evaluator.postconfig[{j}]: dropped activate_window")
    else:
      res.reasons.append(f"evaluator.postconfig[{j}]: unsupported step type {t!r}")
  output = any(isinstance(r, dict) and r.get("type") == "vm_terminal_output" for r in results)
  return {"type": "osworld_output" if output else "osworld", "metrics": metrics,
          "conj": ev.get("conj", "and"), "postconfig": post}


def _merge_browser(setup: list[dict]) -> list[dict]:
  """OSWorld launches Chrome, then opens tabs in it (chrome_open_tabs): one browser step with every URL."""
  tabs = lambda s: s["type"] == "osworld_browser" and not s.get("viewer")   # a viewed file opens when it has been downloaded
  first = next((s for s in setup if tabs(s)), None)
  if first is None:
    return setup
  urls = [u for s in setup if tabs(s) for u in s["urls"]]
  return [{**first, "urls": urls} if s is first else s for s in setup if s is first or not tabs(s)]


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
  cache = cache_lib.Cache(cache_dir)
  # OSWorld's VM user has the usual XDG folders; its tasks assume ~/Desktop exists
  setup = [{"type": "script", "script": "mkdir -p " + " ".join(f"~/{d}" for d in HOME_DIRS)}]
  for i, step in enumerate(task.get("config") or []):
    specs = _setup_step(step, i, res, cache)
    setup += specs if isinstance(specs, list) else [specs] if specs else []
  folder = os.path.basename(os.path.dirname(source))
  domain = folder if folder in DOMAINS else str(task.get("snapshot", ""))   # OSWorld's folders are its domains
  apps = [str(a) for a in task.get("related_apps") or []]
  if domain in NOT_IN_DEBIAN or any(a in VSCODE_APPS for a in apps):
    res.reasons.append(NOT_IN_DEBIAN["vs_code"])
  setup = _merge_browser(setup)
  checker = _checker(task["evaluator"], res, cache) if isinstance(task["evaluator"], dict) else None
  if checker is None and not res.reasons:
    res.reasons.append("evaluator must be an object")
  if res.reasons:
    return res
  gui = any(s["type"] in ("osworld_browser", "osworld_launch", "osworld_open") for s in setup) or apps != ["os"]
  if not gui and any(s["type"] == "osworld_gui" for s in setup):
    # an `os` task's clicks and Ctrl+Alt+T open GNOME's terminal; here the terminal is the bash tool
    res.notes.append("dropped the pyautogui steps that open a terminal (a terminal task: the bash tool is its terminal)")
    setup = [s for s in setup if s["type"] != "osworld_gui"]
  pkg = {"id": f"osworld_{res.id}", "instruction": task["instruction"], "kind": "hybrid" if gui else "terminal",
         "apps": apps, "skills": [f"osworld:{task.get('snapshot', '')}", f"{DOMAIN_SKILL}{domain}"], "channels": ["gui", "terminal"],
         "setup": setup, "checker": checker, "max_steps": OSWORLD_MAX_STEPS}
  pkg.update(extra or {})
  res.package = pkg
  return res


def write(res: Result, out_dir: str) -> str:
  """Writes an imported package as <out_dir>/<package id>/task.json (+ files/); validates it first."""
  d = os.path.join(out_dir, res.package["id"])
  package_from_dict(res.package, source=res.source, root=d)   # raises on anything malformed
  os.makedirs(os.path.join(d, "files"), exist_ok=True)
  for name, host in res.files.items():
    os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
    shutil.copyfile(host, os.path.join(d, name))
  with open(os.path.join(d, "task.json"), "w") as f:
    json.dump(res.package, f, indent=1)
  return d


# folders of OSWorld's examples for other set-ups: Windows VMs, a Google Drive account
EXCLUDED_DIRS = ("Windows", "googledrive", "google_drive")
NOT_TASKS = ("references.json", "template.json", "index.json")


def task_files(src: str, exclude: tuple[str, ...] = EXCLUDED_DIRS) -> list[str]:
  """Task JSON files under `src` (or `src` itself), skipping folders named in `exclude`."""
  if os.path.isfile(src):
    return [src]
  out = []
  for r, dirs, names in os.walk(src):
    dirs[:] = sorted(d for d in dirs if d not in exclude)
    out += [os.path.join(r, n) for n in names if n.endswith(".json") and n not in NOT_TASKS]
  return sorted(out)


def load_tasks(src: str, exclude: tuple[str, ...] = EXCLUDED_DIRS) -> tuple[list[tuple[str, Any]], list[dict]]:
  """([(path, parsed JSON)], [refused: invalid JSON with file and line])."""
  tasks, bad = [], []
  for path in task_files(src, exclude):
    try:
      with open(path) as f:
        tasks.append((path, json.load(f)))
    except json.JSONDecodeError as e:
      bad.append({"id": "?", "source": path, "reasons": [f"{path}:{e.lineno}: invalid JSON ({e.msg})"]})
  return tasks, bad


def report_path(out_dir: str) -> str:
  """Beside the output directory, not in it: a suite directory holds only packages."""
  return os.path.normpath(out_dir) + ".import_report.json"


def import_dir(src: str, out_dir: str, cache_dir: str | None = None,
               references: dict[str, Any] | None = None, exclude: tuple[str, ...] = EXCLUDED_DIRS) -> dict[str, Any]:
  """Imports every task JSON under `src` (folders in `exclude` skipped); writes packages under
  `out_dir` and the report to report_path(out_dir)."""
  tasks, bad = load_tasks(src, exclude)
  report: dict[str, Any] = {"imported": [], "refused": list(bad), "excluded_dirs": list(exclude)}
  used: set[str] = set()
  for path, task in tasks:
    res = convert(task, path, cache_dir, (references or {}).get(str(task.get("id")) if isinstance(task, dict) else None))
    if res.package is not None and res.package["id"] in used:
      # OSWorld reuses some ids across domains (e.g. chrome and thunderbird): the later one gets its domain
      domain = next(s[len(DOMAIN_SKILL):] for s in res.package["skills"] if s.startswith(DOMAIN_SKILL))
      res.notes.append(f"id {res.id} is also another task's here: package named osworld_{domain}_{res.id}")
      res.package["id"] = f"osworld_{domain}_{res.id}"
    if res.package is not None:
      used.add(res.package["id"])
      try:
        write(res, out_dir)
      except ValueError as e:
        res.reasons.append(f"the converted package is invalid: {e}")
    if res.reasons:
      report["refused"].append({"id": res.id, "source": path, "reasons": res.reasons})
    else:
      report["imported"].append({"id": res.id, "package": res.package["id"], "source": path, "notes": res.notes})
  report["by_domain"] = by_domain(report)
  os.makedirs(out_dir, exist_ok=True)
  with open(report_path(out_dir), "w") as f:
    json.dump(report, f, indent=1)
  return report


def by_domain(report: dict[str, Any]) -> dict[str, dict[str, int]]:
  """{OSWorld domain (the task's folder): {imported, refused}}."""
  out: dict[str, dict[str, int]] = {}
  for key in ("imported", "refused"):
    for r in report[key]:
      row = out.setdefault(os.path.basename(os.path.dirname(r["source"])), {"imported": 0, "refused": 0})
      row[key] += 1
  return dict(sorted(out.items()))
