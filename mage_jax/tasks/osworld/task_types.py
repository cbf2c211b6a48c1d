"""Task-package types for imported OSWorld tasks (see importer.py; registered like web/task_types.py).

Preparers:
  osworld_file    {path, src}        a file from the package directory (a cached OSWorld download)
  osworld_launch  {argv}             a program started in the background on the episode's desktop
  osworld_open    {path}             the file in its real app (LibreOffice by extension, GIMP; machine/apps.py)
Checker (`osworld_output` when a metric reads the terminal output, so the output exploits run):
  osworld {metrics: [{func, result, expected, options}], conj: "and" | "or", postconfig: [...]}
    OSWorld's evaluator, re-implemented over our sandbox. Result getters: vm_command_line (the
    command runs in the sandbox as the sandbox user, as OSWorld runs it in the VM as `user`),
    vm_terminal_output (the last bash call's output), vm_file, list_directory, and the Chrome
    preference getters (enable_do_not_track, enable_enhanced_safety_browsing, default_search_engine,
    profile_name; Chromium's profile in ~/.config/chromium stands in for google-chrome's).
    Metrics: METRICS below. postconfig: sleep, hotkey (pressed on the desktop), execute/command/launch
    steps and `open` (a file in its app, as the osworld_open preparer) run first.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shlex
import subprocess
import time
from typing import Any, Callable

from mage_jax.tasks.osworld import (archive_metrics, browser_getters, chrome_profile, document_metrics, file_metrics, image_metrics, impress_metrics,
                                    pyautogui_steps, relative_time, rule_metrics, table_metrics, vlc_metrics, writer_metrics)
from mage_jax.machine.sandbox import Unreadable, kill_tree, sandbox_env
from mage_jax.tasks import checkers, preparers
from mage_jax.machine import apps
from mage_jax.tasks.web import browser

CHROME_PREFS = "/home/user/.config/chromium/Default/Preferences"
CHROME_BOOKMARKS = "/home/user/.config/chromium/Default/Bookmarks"
POSTCONFIG_SLEEP_CAP = 2.0   # s; the checker runs on every score (gates score an episode ~6 times)
HOTKEY_SETTLE = 2.0   # s after a postconfig hotkey (a save) before the file is read


# ---- result getters ------------------------------------------------------------------------------
COMMAND_TIMEOUT = 30.0   # s for a getter's or postconfig's command in the sandbox


def _run(ctx, command: Any, shell: bool) -> str:
  argv = ["/bin/sh", "-c", command] if shell or isinstance(command, str) else [str(c) for c in command]
  if not shell and isinstance(command, list) and "|" in command:   # OSWorld joins such lists into a shell line
    argv = ["/bin/sh", "-c", " ".join(command)]
  try:
    p = ctx.sandbox.spawn(argv, env=sandbox_env(":0"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  except RuntimeError as e:  # the workload destroyed its sandbox: unreadable state scores 0
    raise Unreadable(f"cannot run {argv!r}: {e}") from e
  try:
    out, _ = p.communicate(timeout=COMMAND_TIMEOUT)
  except subprocess.TimeoutExpired:
    # Its partial output is not the command's answer: an exclude rule once passed on the empty
    # output of a `ps` that had not finished. Unreadable state scores 0 (OSWorld's getter gives None).
    kill_tree(p.pid)
    p.communicate()
    raise Unreadable(f"{argv!r} did not finish within {COMMAND_TIMEOUT:g} s") from None
  return out.decode(errors="replace")


def _prefs(ctx) -> dict:
  data = ctx.read_file(CHROME_PREFS)
  return json.loads(data) if data else {}


CHROME_GETTERS: dict[str, Callable[[dict], Any]] = {
    "enable_do_not_track": lambda p: "true" if p.get("enable_do_not_track") else "false",
    "enable_enhanced_safety_browsing": lambda p: "true" if p.get("safebrowsing", {}).get("enhanced") else "false",
    "default_search_engine": lambda p: p.get("default_search_provider_data", {}).get("template_url_data", {})
                                        .get("short_name", "Google"),
    "profile_name": lambda p: p.get("profile", {}).get("name"),
}
# app config files OSWorld's getters copy from the VM's home (our sandbox user's home is /home/user)
CONFIG_FILES: dict[str, Callable[[dict], str]] = {
    "vlc_config": lambda spec: "/home/user/.config/vlc/vlcrc",
    "gimp_config_file": lambda spec: f"/home/user/.config/GIMP/2.10/{spec['file_name']}",
}
TAB_GETTERS = ("active_tab_info", "active_url_from_accessTree", "active_tab_url_parse", "active_tab_html_parse",
               "open_tabs_info", "url_dashPart")
GETTERS = ("vm_command_line", "vm_terminal_output", "vm_file", "list_directory", "rule", "rule_relativeTime",
           "cloud_file", "cache_file", "bookmarks") + tuple(CHROME_GETTERS) + tuple(CONFIG_FILES) + TAB_GETTERS + \
          chrome_profile.GETTERS


def _package_file(ctx, src: str) -> bytes:
  """A file the importer put in the task package (an expected file from the local cache): read on
  the host, never visible to the agent."""
  root = getattr(getattr(ctx, "task", None), "root", None)
  with open(os.path.join(root or ".", src), "rb") as f:
    return f.read()


def _many(spec: dict, key: str, read: Callable[[Any], Any]) -> Any:
  """OSWorld's `multi`: parallel lists of paths give a list of results."""
  value = spec[key]
  return [read(v) for v in value] if isinstance(value, list) else read(value)


def get(ctx, spec: dict | None, scratch: dict[str, bytes] | None = None) -> Any:
  """One OSWorld getter's value; files come as bytes (None when absent). `scratch`: what postconfig
  steps saved with `stdout` (OSWorld's cache_file reads those)."""
  if spec is None:
    return None
  t = spec["type"]
  if t == "rule":
    return spec["rules"]
  if t == "rule_relativeTime":
    return relative_time.rules(spec)
  if t == "vm_command_line":
    return _run(ctx, spec["command"], str(spec.get("shell", False)).lower() == "true")
  if t == "vm_terminal_output":
    return ctx.terminal_outputs[-1] if ctx.terminal_outputs else None
  if t == "vm_file":
    return _many(spec, "path", ctx.read_file)
  if t == "cloud_file":
    return _many(spec, "src", lambda src: _package_file(ctx, src))
  if t == "cache_file":
    return (scratch or {}).get(spec["path"])
  if t == "list_directory":
    return ctx.list_dir(spec["path"])
  if t in CHROME_GETTERS:
    return CHROME_GETTERS[t](_prefs(ctx))
  if t == "bookmarks":   # OSWorld: the roots of Chrome's Bookmarks file, [] when there is none
    data = ctx.read_file(CHROME_BOOKMARKS)
    return json.loads(data).get("roots", {}) if data else []
  if t in CONFIG_FILES:
    return ctx.read_file(CONFIG_FILES[t](spec))
  if t in TAB_GETTERS:
    return browser_getters.get(lambda argv: _run(ctx, argv, False), spec)
  if t in chrome_profile.GETTERS:
    return chrome_profile.get(ctx.read_file, ctx.list_dir, t)
  raise ValueError(f"unsupported OSWorld result type {t!r}")


# ---- metrics (OSWorld semantics; files arrive as bytes, None when absent) --------------------------
def _text(b: bytes | None) -> str | None:
  return None if b is None else b.decode("utf-8", errors="replace")


def _docx(b: bytes):
  import docx   # office-format library only for this document type (start-up cost)
  return docx.Document(io.BytesIO(b))


METRICS: dict[str, Callable[..., float]] = {
    "exact_match": lambda r, rules, **o: float(r == rules["expected"]),
    "check_include_exclude": lambda r, rules, **o: float(r is not None and all(s in r for s in rules.get("include", []))
                                                         and not any(s in r for s in rules.get("exclude", []))),
    "is_in_list": lambda r, rules, **o: float(r is not None and rules["expected"] in r),
    "literal_match": lambda r, e, **o: float(str(r).lower() == str(e).lower() if o.get("ignore_case") else str(r) == str(e)),
    "check_list": lambda r, rules, **o: float(r is not None and all(
        any(re.search(p, l) for l in _text(r).splitlines()) for p in rules.get("expect", [])) and not any(
        re.search(p, l) for p in rules.get("unexpect", []) for l in _text(r).splitlines())),
    "file_contains": lambda r, rules, **o: float(r is not None and all(s in _text(r) for s in rules["expected"])),
    "check_line_number": lambda r, rules, **o: float(r is not None and sum(
        bool(re.search(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d", l)) for l in _text(r).splitlines()) == int(rules["expected"])),
    "compare_text_file": lambda r, e, **o: float(r is not None and e is not None and (
        _text(r).strip() == _text(e).strip() if o.get("ignore_blanks") else _text(r) == _text(e))),
    "compare_csv": lambda r, e, **o: float(r is not None and e is not None and
                                           list(csv.reader(io.StringIO(_text(r)))) == list(csv.reader(io.StringIO(_text(e))))),
    "check_json_settings": lambda r, rules, **o: float(r is not None and all(
        json.loads(_text(r)).get(k) == v for k, v in rules["expected"].items())),
    "compare_font_names": lambda r, rules, **o: float(r is not None and all(
        run.font.name == rules["font_name"] for p in _docx(r).paragraphs for run in p.runs if run.text.strip())),
    "is_first_line_centered": lambda r, e=None, **o: float(r is not None and bool(_docx(r).paragraphs) and
                                                            _docx(r).paragraphs[0].alignment == 1),
    "check_moved_jpgs": lambda r, rules, **o: float(r is not None and sorted(r) == sorted(rules["expected"])),
}
for _module, _names in ((table_metrics, ("compare_table",)), (document_metrics, ("compare_docx_files", "compare_pptx_files", "compare_pdfs", "compare_images",
                                            "compare_docx_tables", "compare_line_spacing", "check_structure_sim")),
                        (rule_metrics, ("check_direct_json_object", "is_expected_url_pattern_match", "is_expected_active_tab",
                                        "is_extension_installed", "check_config_status", "is_expected_tabs",
                                        "check_csv", "check_json", "compare_config", "is_expected_bookmarks",
                                        "check_thunderbird_prefs", "check_thunderbird_filter")),
                        (image_metrics, image_metrics.NAMES), (writer_metrics, writer_metrics.NAMES),
                        (impress_metrics, impress_metrics.NAMES), (file_metrics, file_metrics.NAMES),
                        (vlc_metrics, vlc_metrics.NAMES), (chrome_profile, chrome_profile.NAMES)):
  METRICS.update({n: getattr(_module, n) for n in _names})
METRICS["compare_archive"] = lambda r, e, **o: archive_metrics.compare_archive(r, e, METRICS, **o)
INFEASIBLE = "infeasible"   # OSWorld's marker for a task the agent should refuse (no metric runs)


def _postconfig(ctx, steps: list[dict]) -> dict[str, bytes]:
  """Runs the evaluator's postconfig; returns what steps saved with `stdout` (for cache_file)."""
  scratch: dict[str, bytes] = {}
  desktop = getattr(ctx, "desktop", None)
  for step in steps:
    p = step.get("parameters", {})
    if step["type"] == "hotkey":   # OSWorld's pyautogui Ctrl+S before reading a file
      if desktop is not None:
        desktop.key_combo(step["keys"])
        time.sleep(HOTKEY_SETTLE)
    elif step["type"] == "gui_actions":   # a plain pyautogui sequence, through our action path
      if desktop is not None:
        pyautogui_steps.run(desktop, step["actions"])
        time.sleep(HOTKEY_SETTLE)
    elif step["type"] == "close_window":   # e.g. Thunderbird, so it writes its prefs before they are read
      if desktop is not None:
        close_window(desktop, p["window_name"], bool(p.get("strict")), bool(p.get("by_class")))
    elif step["type"] == "open":   # a file in its real app (OSWorld opens the gold workbook so Calc re-saves it)
      if desktop is not None:
        apps.launch(desktop, OFFICE_APPS[os.path.splitext(step["path"])[1].lower()], step["path"])
    elif step["type"] == "sleep":   # OSWorld waits for its VM; a local sandbox settles in far less
      time.sleep(min(float(p["seconds"]), POSTCONFIG_SLEEP_CAP))
    elif step["type"] == "file":   # a cached download (an evaluation script) written into the sandbox
      ctx.sandbox.write_file(step["path"], _package_file(ctx, step["src"]))
    elif step["type"] in ("execute", "command", "launch"):
      out = _run(ctx, p["command"], str(p.get("shell", False)).lower() == "true")
      if p.get("stdout"):
        scratch[p["stdout"]] = out.encode()
  return scratch


CLOSE_WAIT = 10.0   # s for a closed window's app to go (Thunderbird saves its prefs on the way out)


def close_window(desktop, name: str, strict: bool, by_class: bool) -> int:
  """OSWorld's close_window: asks the window manager to close (EWMH _NET_CLOSE_WINDOW, the app gets
  WM_DELETE_WINDOW and quits its own way) every window whose title, or WM_CLASS "instance.Class" when
  by_class, equals `name` (strict) or contains it; waits until they are gone. Returns how many."""
  from Xlib import X   # python-xlib only on the desktop path
  from Xlib.protocol import event   # python-xlib only on the desktop path

  def matches():
    key = name.lower().replace(".", " ") if by_class else name
    return [w for cls, title, w in apps.client_windows(desktop)
            if (cls if by_class else title) == key or (not strict and key in (cls if by_class else title))]
  d = desktop.display
  wins = matches()
  for w in wins:
    ev = event.ClientMessage(window=w, client_type=d.intern_atom("_NET_CLOSE_WINDOW"),
                             data=(32, [X.CurrentTime, 2, 0, 0, 0]))
    desktop.root.send_event(ev, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
  d.sync()
  deadline = time.monotonic() + CLOSE_WAIT
  while wins and matches() and time.monotonic() < deadline:
    time.sleep(0.1)
  return len(wins)


def combine(scores: list[float], conj: str) -> float:
  """OSWorld's combination: one metric is its score; 'and' is 0 if any is 0, else the mean; 'or' is
  1 if any is 1, else the best."""
  if len(scores) == 1:
    return scores[0]
  if conj == "and":
    return 0.0 if any(s == 0 for s in scores) else sum(scores) / len(scores)
  return 1.0 if any(s == 1 for s in scores) else max(scores)


def score(ctx, spec: dict) -> float:
  gave_up = getattr(ctx, "terminate_status", None) == "failure"
  if spec.get("infeasible"):   # OSWorld: an infeasible task scores 1 only when the agent says FAIL
    return float(gave_up)
  if gave_up or getattr(ctx, "sandbox", None) is None:   # OSWorld: FAIL on a feasible task scores 0
    return 0.0
  scratch = _postconfig(ctx, spec.get("postconfig", []))
  scores = []
  for m in spec["metrics"]:
    result, expected = get(ctx, m["result"], scratch), get(ctx, m.get("expected"), scratch)
    scores.append(float(METRICS[m["func"]](result, expected, **(m.get("options") or {}))))
  return combine(scores, spec.get("conj", "and"))


def validate(spec: dict, where: str) -> None:
  if spec.get("infeasible") is True:
    return
  if not isinstance(spec.get("metrics"), list) or not spec["metrics"]:
    raise ValueError(f"{where}: osworld checker needs a non-empty 'metrics' list")
  for i, m in enumerate(spec["metrics"]):
    if m.get("func") not in METRICS:
      raise ValueError(f"{where}.metrics[{i}]: unsupported OSWorld metric {m.get('func')!r}")
    for key in ("result", "expected"):
      if m.get(key) is not None and m[key].get("type") not in GETTERS:
        raise ValueError(f"{where}.metrics[{i}].{key}: unsupported OSWorld getter {m[key].get('type')!r}")


# ---- preparers ---------------------------------------------------------------------------------
def _run_file(target, spec, root):
  with open(os.path.join(root or ".", spec["src"]), "rb") as f:
    target.write_file(spec["path"], f.read())


def _run_launch(target, spec, root):
  if getattr(target, "desktop", None) is None:
    raise preparers.SetupError(f"launching {spec['argv'][0]} needs a desktop; the task kind is 'terminal'")
  target.desktop.launch([str(a) for a in spec["argv"]])


def _need(*keys):
  def check(spec, where):
    for k in keys:
      if k not in spec:
        raise ValueError(f"{where}: needs {k!r}")
  return check


preparers.register("osworld_file", preparers.Extension(_run_file, _need("path", "src")))
preparers.register("osworld_launch", preparers.Extension(_run_launch, _need("argv")))


HANDOFF_WAIT = 15.0   # s for a second Chromium launch to pass its URLs to the running one


def _run_browser(target, spec, root):
  """Chromium (normal window, profile ~/.config/chromium) on OSWorld's URLs as tabs, with the DevTools
  port the tab getters read (browser_getters.py). When Chromium already runs (a file OSWorld opens in
  its viewer, `viewer` steps), the URLs become new tabs of that browser."""
  if getattr(target, "desktop", None) is None:
    raise preparers.SetupError("the browser needs a desktop; the task kind is 'terminal'")
  running = any("chromium" in cls for cls, _, _ in apps.client_windows(target.desktop))
  proc = browser.launch(target.desktop, list(spec["urls"]) or ["about:blank"], kiosk=False,
                        extra=(f"--remote-debugging-port={browser_getters.DEVTOOLS_PORT}",))
  if running:   # Chromium hands the URLs to the running browser as tabs and exits: wait for the handoff
    try:
      proc.wait(timeout=HANDOFF_WAIT)
    except subprocess.TimeoutExpired:
      raise preparers.SetupError(f"Chromium did not hand {spec['urls']} to the running browser within {HANDOFF_WAIT:.0f}s")


def _run_gui(target, spec, root):
  if getattr(target, "desktop", None) is None:
    raise preparers.SetupError("pyautogui steps need a desktop; the task kind is 'terminal'")
  pyautogui_steps.run(target.desktop, spec["actions"])


def _run_close_tabs(target, spec, root):
  """OSWorld's chrome_close_tabs, through the DevTools port of the task's Chromium (in the sandbox)."""
  closed = browser_getters.close_tabs(lambda argv: _run(target, argv, False), [str(u) for u in spec["urls"]])
  if closed is None:
    raise preparers.SetupError("closing tabs needs the task's Chromium and its DevTools port (an osworld_browser step first)")


preparers.register("osworld_gui", preparers.Extension(_run_gui, _need("actions")))
preparers.register("osworld_close_tabs", preparers.Extension(_run_close_tabs, _need("urls")))
preparers.register("osworld_browser", preparers.Extension(_run_browser, _need("urls")))
# two names for one checker, so the blind-exploit gate knows what it reads: `osworld_output` when a
# metric reads the terminal's output (the output exploits apply), `osworld` otherwise (state only)
checkers.register("osworld", checkers.Extension(score, validate, content_errors=("docx",)))
checkers.register("osworld_output", checkers.Extension(score, validate, reads_output=True))


OFFICE_APPS = {".xlsx": "calc", ".xls": "calc", ".csv": "calc", ".ods": "calc", ".docx": "writer", ".doc": "writer",
               ".odt": "writer", ".pptx": "impress", ".ppt": "impress", ".odp": "impress", ".xcf": "gimp",
               ".png": "gimp", ".jpg": "gimp"}


def _run_open(target, spec, root):
  from mage_jax.machine import apps  # the real apps (LibreOffice, GIMP) and their window waits
  app = OFFICE_APPS.get(os.path.splitext(spec["path"])[1].lower())
  if app is None or getattr(target, "desktop", None) is None:
    raise preparers.SetupError(f"no app opens {spec['path']!r} here")
  apps.launch(target.desktop, app, spec["path"])


preparers.register("osworld_open", preparers.Extension(_run_open, _need("path")))
