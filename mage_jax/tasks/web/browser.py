"""Chromium in the episode's sandbox, its memory bounded by a cgroup instead of RLIMIT_AS.

Chromium reserves huge virtual ranges (V8 cages, PartitionAlloc pools) and crashes under any
RLIMIT_AS we would pick (4, 8 and 16 GB all fail), so the browser gets its own cgroup with a real
memory limit (`BROWSER_MEMORY_MB`, page cache and swap included) and no address-space limit
(`Sandbox.spawn(memory_cgroup=...)`). Every other rlimit, the namespaces and the sandbox user stay.
No cgroup, no browser: a host without a writable cgroup refuses web tasks instead of running an
unbounded browser.

Chromium's own sandbox is off (`--no-sandbox`): it needs namespaces the episode sandbox does not
hand out, and the episode sandbox is the isolation boundary. The profile is fresh each episode
(the sandbox's /tmp or home dies with it), so every start is a first run.
"""
from __future__ import annotations

import subprocess
import time

from mage_jax.machine import cgroup as cgroup_lib
from mage_jax.machine.sandbox import sandbox_env

BROWSER_MEMORY_MB = 2048
BROWSER_PIDS = 512
KIOSK_PROFILE = "/tmp/.mage_chromium"
# the binary itself: /usr/bin/chromium is a wrapper that sources /etc/chromium.d, absent from the
# sandbox's synthetic /etc
CHROMIUM = "/usr/lib/chromium/chromium"
FLAGS = ("--no-sandbox", "--no-first-run", "--no-default-browser-check", "--disable-gpu",
         "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-features=Translate,MediaRouter,OptimizationHints",
         "--password-store=basic", "--noerrdialogs", "--disable-session-crashed-bubble",
         "--force-device-scale-factor=1", "--window-position=0,0")


class BrowserError(RuntimeError):
  pass


def memory_cgroup(sb, memory_mb: int = BROWSER_MEMORY_MB) -> cgroup_lib.SandboxCgroup:
  """A fresh cgroup for the browser's processes, removed when the sandbox closes."""
  cg, reason = cgroup_lib.create(memory_mb << 20, BROWSER_PIDS)
  if cg is None:
    raise BrowserError(f"no cgroup to bound the browser's memory ({reason}); Chromium can't run under "
                       "RLIMIT_AS, so web tasks need a writable cgroup")
  sb.on_close.append(cg.close)
  return cg


def argv(url: str | list[str], width: int, height: int, kiosk: bool = True, extra: tuple[str, ...] = ()) -> list[str]:
  """`url`: one page, or several opened as tabs; `extra`: more flags (a DevTools port)."""
  args = [CHROMIUM, *FLAGS, *extra, f"--window-size={width},{height}"]
  if kiosk:  # full screen, no tabs or address bar: only the page
    args += ["--kiosk", f"--user-data-dir={KIOSK_PROFILE}/profile"]
  return args + ([url] if isinstance(url, str) else list(url))


def launch(desktop, url: str | list[str], *, kiosk: bool = True, title: str | None = None, timeout: float = 45.0,
           memory_mb: int = BROWSER_MEMORY_MB, extra: tuple[str, ...] = ()) -> subprocess.Popen:
  """Starts Chromium on `url` under the window manager and waits until its window (with `title`,
  when given) is mapped and the screen has settled. The process counts as a real app of the
  desktop (stopped at reset; observations wait for it to redraw)."""
  from mage_jax.machine import apps  # the window manager and window waits are shared with the office apps
  sb = desktop.sandbox
  apps.start_window_manager(desktop)
  env = {**sandbox_env(":0"), **apps.font_env(sb)}  # the host's font cache: no scan of every font per start
  if kiosk:  # caches and config out of the task's home
    env.update({"XDG_CONFIG_HOME": f"{KIOSK_PROFILE}/config", "XDG_CACHE_HOME": f"{KIOSK_PROFILE}/cache"})
  proc = sb.spawn(argv(url, desktop.width, desktop.height, kiosk, extra), env=env, memory_cgroup=memory_cgroup(sb, memory_mb),
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  desktop.real_apps = getattr(desktop, "real_apps", []) + [proc]
  deadline = time.monotonic() + timeout
  while not any("chromium" in cls and (title is None or title in t) for cls, t, _ in apps.client_windows(desktop)):
    if proc.poll() is not None:
      raise BrowserError(f"chromium exited with {proc.returncode} before showing a window")
    if time.monotonic() > deadline:
      raise BrowserError(f"chromium showed no window{f' titled {title!r}' if title else ''} within {timeout:.0f}s "
                         f"(windows: {[t for _, t, _ in apps.client_windows(desktop)]})")
    time.sleep(0.1)
  apps.wait_still(desktop, deadline, quiet=0.5)
  return proc
