"""Real desktop applications in an episode's sandbox: LibreOffice Calc/Writer/Impress, GIMP, and a
window manager (openbox) that gives them focus, stacking and a fixed geometry.

Every app runs inside the episode's sandbox as the sandbox user (`Desktop.launch`: same rlimits,
cgroup and namespaces as the shell), with its profile in a directory this module seeds under the
sandbox's fresh /tmp, so every episode is a first run and nothing of one episode reaches the next
(the sandbox's tmpfs home and /tmp die with it). Profiles live in /tmp, not the home, so what the
task sees under ~ is only its own files.

Fixed geometry: openbox draws no decorations and maximizes every LibreOffice and GIMP window, so
on a 1280x800 desktop a GUI reference can click fixed places (Calc's Name Box, Impress's title
placeholder, the GIMP canvas). Everything else the references do goes through keyboard shortcuts
and GIMP's action search ("/"). `wait_window` waits until a top-level window of the app whose
title names the file is mapped and the screen has stopped changing.

`stop` ends an app cleanly at reset: SIGTERM to its process tree, SIGKILL after a grace period
(the sandbox's close kills whatever is left).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time

from PIL import ImageChops

from mage_jax.machine.sandbox import descendants, kill_tree, sandbox_env

# After each GUI action on a real app the observation waits until the screen has been still for
# SETTLE_QUIET s (at most SETTLE_MAX s): LibreOffice updates its toolbars and status bar after the
# action returns, and a click on a button it has not enabled yet is lost.
SETTLE_QUIET, SETTLE_MAX = 0.5, 4.0
PROFILE_DIR = "/tmp/.mage_profiles"
# openbox's config and menu, bound read-only into desktop sandboxes (`etc_binds`). Every file a
# service reads comes from a harness-owned, read-only place (docs/agent.md, threat model):
# the workload's /tmp and home are no service's.
WM_HOST_DIR = os.path.join(os.path.dirname(__file__), "openbox")
WM_DIR = "/opt/mage_openbox"
WM_CONFIG = f"{WM_DIR}/rc.xml"
# the only actions the config may bind: none runs a program, shows a menu (menus can) or restarts
WM_ACTIONS = frozenset({"NextWindow", "Focus", "Raise"})
# openbox's HOME and XDG dirs: read-only paths with nothing in them but the harness's files, so
# it finds no user config, theme, menu or font setting the workload could have written
WM_ENV = {"DISPLAY": ":0", "PATH": "/usr/bin:/bin", "HOME": WM_DIR, "XDG_CONFIG_HOME": WM_DIR,
          "XDG_CONFIG_DIRS": WM_DIR, "XDG_DATA_HOME": WM_DIR, "XDG_DATA_DIRS": "/usr/share",
          "XDG_CACHE_HOME": WM_DIR}

# LibreOffice profile (registrymodifications.xcu): no first-start dialogs, no tip of the day, no
# "keep current format?" question on saving .xlsx/.docx/.pptx, no document recovery.
_LO_ITEMS = [
    ("/org.openoffice.Office.Common/Misc", "FirstRun", "boolean", "false"),
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "boolean", "false"),
    ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "boolean", "false"),
    ("/org.openoffice.Office.Common/Save/Document", "AutoSave", "boolean", "false"),
    ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "boolean", "false"),
    ("/org.openoffice.Office.Recovery/AutoSave", "Enabled", "boolean", "false"),
    ("/org.openoffice.Setup/Office", "ooSetupInstCompleted", "boolean", "true"),
    ("/org.openoffice.Setup/Product", "ooSetupLastVersion", "string", "7.4"),
    ("/org.openoffice.Office.Common/Misc", "UseSystemFileDialog", "boolean", "false"),
    ("/org.openoffice.Office.Calc/Input", "AutoInput", "boolean", "false"),
    ("/org.openoffice.Office.Writer/AutoFunction/Completion", "Enable", "boolean", "false"),
]
LO_REGISTRY = ('<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
               'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
               + "".join(f'<item oor:path="{p}"><prop oor:name="{n}" oor:op="fuse"><value>{v}</value></prop></item>\n'
                         for p, n, _, v in _LO_ITEMS) + "</oor:items>\n")
# GIMP: one window (canvas at a fixed place), no tips, no fonts loaded (saves seconds per start).
# GIMP's first run queries every plug-in (~20 s here); the plug-in index it writes (pluginrc) is
# the same for every profile, so the first start in a process keeps it and later profiles get it.
_GIMP_PLUGINRC: list[bytes] = []
GIMPRC = "(single-window-mode yes)\n(show-tips no)\n(restore-session no)\n(save-session-info no)\n"


@dataclasses.dataclass(frozen=True)
class AppSpec:
  argv: tuple[str, ...]
  wm_class: tuple[str, ...]    # WM_CLASS values (lowercased) of its main window


APPS = {
    "calc": AppSpec(("soffice", "--calc"), ("libreoffice-calc", "soffice")),
    "writer": AppSpec(("soffice", "--writer"), ("libreoffice-writer", "soffice")),
    "impress": AppSpec(("soffice", "--impress"), ("libreoffice-impress", "soffice")),
    "gimp": AppSpec(("gimp", "--no-splash", "--no-fonts"), ("gimp",)),
}
BINARIES = {"calc": "soffice", "writer": "soffice", "impress": "soffice", "gimp": "gimp"}


# Host config the apps read at start-up; the sandbox's /etc is synthetic, so these are bound in.
ETC_DIRS = ("/etc/libreoffice", "/etc/gimp")


# The host's font cache, bound read-only, and a fontconfig file that reads it (the sandbox's /var
# is empty, so without them every process that draws text scans every font file: openbox took
# 1.2 s to start and lost windows mapped meanwhile, LibreOffice and GIMP paid the same scan).
FONT_CACHE, FONT_CONF_DIR = "/var/cache/fontconfig", os.path.join(os.path.dirname(__file__), "fontconfig")
FONTCONFIG_FILE = "/opt/mage_fontconfig/fonts.conf"


def etc_binds() -> tuple[tuple[str, str], ...]:
  binds = tuple((d, d) for d in ETC_DIRS if os.path.isdir(d)) + ((WM_HOST_DIR, WM_DIR),)
  if os.path.isdir(FONT_CACHE) and os.path.isfile(os.path.join(FONT_CONF_DIR, "fonts.conf")):
    binds += ((FONT_CACHE, "/opt/mage_fontconfig_cache"), (FONT_CONF_DIR, os.path.dirname(FONTCONFIG_FILE)))
  return binds


def font_env(sandbox) -> dict[str, str]:
  """FONTCONFIG_FILE where `sandbox` has the binds above (fontconfig without its file finds no fonts)."""
  return {"FONTCONFIG_FILE": FONTCONFIG_FILE} if sandbox.read_file(FONTCONFIG_FILE) else {}


def available(app: str) -> str | None:
  """None if `app` can run here, else why not."""
  if app not in APPS:
    return f"unknown app {app!r}; expected one of {sorted(APPS)}"
  if shutil.which(BINARIES[app]) is None:
    return f"{BINARIES[app]} is not installed (make system-apps)"
  return None


def app_env(sandbox) -> dict[str, str]:
  env = sandbox_env(":0")
  env.update({"XDG_CONFIG_HOME": f"{PROFILE_DIR}/config", "XDG_CACHE_HOME": f"{PROFILE_DIR}/cache",
              "XDG_DATA_HOME": f"{PROFILE_DIR}/data", "XDG_RUNTIME_DIR": f"{PROFILE_DIR}/run",
              "GIMP2_DIRECTORY": f"{PROFILE_DIR}/gimp", "SAL_USE_VCLPLUGIN": "gen",
              "NO_AT_BRIDGE": "1", "GTK_A11Y": "none", **font_env(sandbox)})
  return env


def start_window_manager(desktop) -> None:
  """openbox as a harness service beside Xvfb (out of the workload's reach), once per desktop,
  on the harness's read-only config (no action in it can run a program; a client's reconfigure
  or restart request re-reads that same file, so it changes nothing).

  Returns once openbox has finished starting. It announces itself (_NET_SUPPORTING_WM_CHECK) at
  once but manages windows only after loading its config and fonts; a window whose map request
  arrives in between is never managed (it stays unmapped: a Tk app, which maps in ~0.3 s, was
  lost every time, LibreOffice and GIMP map later and were not). It sets _NET_CLIENT_LIST,
  _NET_WORKAREA and _OB_THEME on the root once it manages windows (a window mapped 60 ms before
  them was managed, one mapped 1 s before was not)."""
  if getattr(desktop, "_wm", None) is not None or shutil.which("openbox") is None:
    return
  with open(os.path.join(WM_HOST_DIR, "rc.xml"), "rb") as f:
    want = f.read()
  if desktop.sandbox.read_file(WM_CONFIG) != want:  # read in the sandbox: what openbox will read
    raise RuntimeError(f"the window manager's config is not bound read-only at {WM_CONFIG} in this "
                       "sandbox: create it with SandboxConfig(ro_binds=apps.etc_binds())")
  desktop._wm = desktop.sandbox.spawn_service(["openbox", "--sm-disable", "--config-file", WM_CONFIG],
                                              env={**WM_ENV, **font_env(desktop.sandbox)},
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 10
  atoms = [desktop.display.intern_atom(a) for a in ("_NET_CLIENT_LIST", "_NET_WORKAREA", "_OB_THEME")]
  while not set(atoms) <= set(desktop.root.list_properties()):
    if desktop._wm.poll() is not None or time.monotonic() > deadline:
      raise RuntimeError("openbox did not start")
    time.sleep(0.05)


def _seed_profile(sandbox, app: str) -> None:
  for d in ("config", "cache", "data", "run"):
    sandbox.write_file(f"{PROFILE_DIR}/{d}/.keep", b"")
  if app == "gimp":
    sandbox.write_file(f"{PROFILE_DIR}/gimp/gimprc", GIMPRC.encode())
    if _GIMP_PLUGINRC:
      sandbox.write_file(f"{PROFILE_DIR}/gimp/pluginrc", _GIMP_PLUGINRC[0])
  else:
    sandbox.write_file(f"{PROFILE_DIR}/lo/user/registrymodifications.xcu", LO_REGISTRY.encode())


def launch(desktop, app: str, path: str, timeout: float = 60.0) -> subprocess.Popen:
  """Starts `app` on `path` (relative to the home) in the desktop's sandbox and waits for its window."""
  reason = available(app)
  if reason:
    raise RuntimeError(reason)
  start_window_manager(desktop)
  _seed_profile(desktop.sandbox, app)
  argv = list(APPS[app].argv)
  if app != "gimp":
    argv += ["--norestore", "--nologo", "--nolockcheck", f"-env:UserInstallation=file://{PROFILE_DIR}/lo"]
  proc = desktop.launch(argv + [path], env=app_env(desktop.sandbox))
  desktop.real_apps = getattr(desktop, "real_apps", []) + [proc]
  wait_window(desktop, app, os.path.basename(path), proc, timeout)
  if app == "gimp" and not _GIMP_PLUGINRC:  # read before the workload's first step
    data = desktop.sandbox.read_file(f"{PROFILE_DIR}/gimp/pluginrc")
    if data:
      _GIMP_PLUGINRC.append(data)
  return proc


def client_windows(desktop) -> list[tuple[str, str, object]]:
  """(wm_class lowercased, title, window) of every top-level client window the WM manages."""
  d, root = desktop.display, desktop.root
  prop = root.get_full_property(d.intern_atom("_NET_CLIENT_LIST"), 0)
  wins = [d.create_resource_object("window", w) for w in (prop.value if prop else [])]
  if not prop:
    wins = root.query_tree().children
  name_atom, utf8 = d.intern_atom("_NET_WM_NAME"), d.intern_atom("UTF8_STRING")
  out = []
  for w in wins:
    try:
      cls = w.get_wm_class() or ("", "")
      title = w.get_full_property(name_atom, utf8)
      title = title.value.decode(errors="replace") if title else (w.get_wm_name() or "")
      out.append((" ".join(cls).lower(), title if isinstance(title, str) else str(title), w))
    except Exception:  # a window that went away between the list and the query
      continue
  return out


def wait_window(desktop, app: str, name: str, proc: subprocess.Popen, timeout: float) -> None:
  # titles: "s.xlsx - LibreOffice Calc"; GIMP's "[cyan] (imported)-1.0 (RGB ...) 400x300 – GIMP"
  # (its start-up window is "GNU Image Manipulation Program": no bare substring test)
  needle = f"[{os.path.splitext(name)[0]}]" if app == "gimp" else name
  deadline = time.monotonic() + timeout
  while True:
    wins = client_windows(desktop)
    if any(any(c in cls for c in APPS[app].wm_class) and needle in title for cls, title, _ in wins):
      break
    if proc.poll() is not None and app == "gimp":
      raise RuntimeError(f"{app} exited with {proc.returncode} before showing {name}")
    if time.monotonic() > deadline:
      raise RuntimeError(f"{app} showed no window for {name} within {timeout:.0f}s "
                         f"(windows: {[t for _, t, _ in wins]})")
    time.sleep(0.1)
  wait_still(desktop, deadline)


def _changed(a, b) -> bool:
  """Whether the screen changed beyond a blinking text cursor (a box at most 4 px wide)."""
  box = ImageChops.difference(a, b).getbbox()
  return box is not None and box[2] - box[0] > 4


def _blank(shot) -> bool:
  """A window mapped but not drawn yet: a handful of flat colours (a drawn app shows many)."""
  return shot.getcolors(32) is not None


def wait_still(desktop, deadline: float, quiet: float = 1.0) -> None:
  """Waits until the screen shows something (LibreOffice maps a blank window, then draws) and has
  not changed for `quiet` seconds (the app finished drawing)."""
  last, since = desktop.screenshot(), time.monotonic()
  while time.monotonic() < deadline:
    time.sleep(0.15)
    shot = desktop.screenshot()
    if _changed(shot, last) or _blank(shot):
      last, since = shot, time.monotonic()
    elif time.monotonic() - since >= quiet:
      return


def stop(desktop, grace: float = 3.0) -> None:
  """Ends every real app of the desktop: SIGTERM to each process tree, SIGKILL after `grace`."""
  procs = [p for p in getattr(desktop, "real_apps", []) if p.poll() is None]
  for p in procs:
    for pid in [p.pid] + descendants(p.pid):
      try:
        os.kill(pid, signal.SIGTERM)
      except ProcessLookupError:
        pass
  deadline = time.monotonic() + grace
  for p in procs:
    try:
      p.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      kill_tree(p.pid)
      p.wait()
  desktop.real_apps = []
