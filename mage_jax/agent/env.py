"""The environment interface and the local implementation (sandbox + shell + Xvfb desktop).

  reset(task) -> Observation     fresh sandbox, task setup, first observation
  step(name, arguments) -> Observation   one validated tool call
  screenshot() -> PIL image or None
  score() -> float               the task's checker on the current state
  close()

What the workload does to its environment is the policy's outcome. If it kills
the sandbox or the X display, `step` says so in `Observation.env_lost` (the
episode ends there and is scored as it stands) instead of raising, and reads
of a dead sandbox raise `Unreadable`, which checkers score 0. Only exceptions
the workload cannot cause (a harness bug, the host out of disk) leave `step`
or `score`; the slot pool reports those as `env_error`.

`remote.RemoteEnv` implements the same interface against an OSWorld-style server.
"""
from __future__ import annotations

import abc
import dataclasses
import json
import os
import subprocess
import time
from typing import Any

from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.machine import apps
from mage_jax.machine.apps import start_window_manager
from mage_jax.machine.desktop import Desktop
from mage_jax.machine.sandbox import HOME, Sandbox, SandboxConfig, Unreadable, sandbox_env
from mage_jax.machine.terminal import SANDBOX_LOST, PersistentShell
import mage_jax.tasks as tasks_pkg
from mage_jax.tasks import checkers, preparers
from mage_jax.tasks.package import TaskPackage

APPS_HOST_DIR = os.path.join(os.path.dirname(tasks_pkg.__file__), "builtin", "apps")  # the Tk apps tasks open
APPS_DIR = "/opt/mage_apps"
LAYOUT_DIR = "/tmp/.mage_layout"


@dataclasses.dataclass
class Observation:
  text: str | None = None              # terminal output / notes / errors
  screenshot: Image.Image | None = None
  done: bool = False                   # the policy terminated
  status: str | None = None            # terminate status
  env_lost: str | None = None          # why the environment can't go on: the workload destroyed it


@dataclasses.dataclass
class EnvConfig:
  width: int = 1280
  height: int = 800
  command_timeout: float = 30.0
  max_output: int = 16_000
  app_timeout: float = 30.0            # wait for a Tk app's first layout
  sandbox: SandboxConfig = dataclasses.field(default_factory=SandboxConfig)


class Env(abc.ABC):
  # Whether two instances made by one factory are separate machines. False for a client of one
  # remote VM (every instance drives the same desktop), so callers must not run them at once.
  independent_instances: bool = True

  @abc.abstractmethod
  def reset(self, task: TaskPackage) -> Observation: ...

  @abc.abstractmethod
  def step(self, name: str, arguments: dict[str, Any]) -> Observation: ...

  @abc.abstractmethod
  def screenshot(self) -> Image.Image | None: ...

  @abc.abstractmethod
  def score(self) -> float: ...

  @abc.abstractmethod
  def close(self) -> None: ...

  def resolve(self, arguments: dict[str, Any]) -> dict[str, Any]:
    """Replaces an '@app.widget' coordinate with the widget's centre in [0, 999]."""
    coord = arguments.get("coordinate")
    if not (isinstance(coord, str) and coord.startswith("@")):
      return arguments
    return {**arguments, "coordinate": self.widget_coordinate(coord[1:])}

  def widget_coordinate(self, ref: str) -> list[int]:
    raise NotImplementedError(f"{type(self).__name__} has no app layouts")


class LocalEnv(Env):
  """One episode at a time on this machine; `reset` tears down the previous sandbox."""

  def __init__(self, config: EnvConfig | None = None):
    self.config = config or EnvConfig()
    self.sandbox = self.shell = self.desktop = None
    self.task: TaskPackage | None = None
    self.terminal_outputs: list[str] = []
    self.terminate_status: str | None = None   # the policy's terminate status (OSWorld's infeasible tasks)

  # ---- lifecycle ---------------------------------------------------------------------------
  def reset(self, task: TaskPackage) -> Observation:
    self.close()
    self.task, self.terminal_outputs, self.terminate_status = task, [], None
    from mage_jax.machine.apps import etc_binds  # the real apps' read-only config (LibreOffice, GIMP, openbox)
    sb_cfg = dataclasses.replace(self.config.sandbox, ro_binds=self.config.sandbox.ro_binds + (
        (APPS_HOST_DIR, APPS_DIR),) + (etc_binds() if task.needs_desktop else ()))
    self.sandbox = Sandbox(sb_cfg)
    display = None
    if task.needs_desktop:
      self.desktop = Desktop(self.sandbox, self.config.width, self.config.height)
      start_window_manager(self.desktop)  # every desktop, Tk apps included: focus, stacking, geometry
      display = ":0"
    self.shell = PersistentShell(self.sandbox, timeout=self.config.command_timeout,
                                 max_output=self.config.max_output, display=display)
    for i, spec in enumerate(task.setup):
      try:
        preparers.run_preparer(self, spec, task.root)
      except Exception as e:
        raise preparers.SetupError(f"{task.source}: setup[{i}] ({spec['type']}): {e}") from e
    return Observation(text=None, screenshot=self.screenshot())

  def close(self) -> None:
    if self.desktop is not None:
      apps.stop(self.desktop)  # real apps get SIGTERM first; the sandbox's close kills what is left
    for part in (self.shell, self.desktop, self.sandbox):
      if part is not None:
        part.close()
    self.sandbox = self.shell = self.desktop = None

  # ---- preparers' target -------------------------------------------------------------------
  def write_file(self, path: str, data: bytes) -> None:
    self.sandbox.write_file(path, data)

  def run_script(self, script: str, timeout: float) -> tuple[int, str]:
    r = self.sandbox.run(["/bin/bash", "-c", script], timeout=timeout)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")

  def launch_app(self, config: dict[str, Any]) -> None:
    if self.desktop is None:
      raise preparers.SetupError("an app needs a desktop; the task kind is 'terminal'")
    name = config.get("name", config["kind"])
    path = f"/tmp/.mage_apps/{name}.json"
    self.sandbox.write_file(path, json.dumps(config).encode())
    proc = self.desktop.launch(["python", f"{APPS_DIR}/tkapps.py", path])
    deadline = time.monotonic() + self.config.app_timeout
    # under a window manager the first layout is written before the window is mapped: "{}"
    while self.sandbox.read_file(f"{LAYOUT_DIR}/{name}.json") in (None, b"{}"):
      if proc.poll() is not None:
        raise preparers.SetupError(f"app {name!r} exited with {proc.returncode} before showing its window")
      if time.monotonic() > deadline:
        raise preparers.SetupError(f"app {name!r} showed no window within {self.config.app_timeout}s")
      time.sleep(0.05)

  # ---- checker context ---------------------------------------------------------------------
  def read_file(self, path: str) -> bytes | None:
    return self._read(self.sandbox.read_file, path)

  def list_dir(self, path: str) -> list[str] | None:
    return self._read(self.sandbox.list_dir, path)

  def _read(self, read, path: str):
    """A harness read of workload state; what the workload did to make it fail is `Unreadable`."""
    try:
      return read(path)
    except subprocess.TimeoutExpired as e:  # e.g. a FIFO swapped in for the file
      raise Unreadable(f"{path}: the read did not finish in {e.timeout}s") from e
    except RuntimeError as e:
      if self.sandbox.alive():
        raise
      raise Unreadable(f"{path}: the sandbox is gone") from e

  def lost(self) -> str | None:
    """Why the environment can't go on, if the workload destroyed it; None while it is whole."""
    if self.sandbox is not None and not self.sandbox.alive():
      return SANDBOX_LOST
    if self.desktop is not None and not self.desktop.alive():
      return "the X display is gone: Xvfb was killed"
    return None

  def score(self) -> float:
    return checkers.score(self, self.task.checker, self.task.root)

  # ---- acting ------------------------------------------------------------------------------
  def screenshot(self) -> Image.Image | None:
    return self.desktop.screenshot() if self.desktop is not None else None

  def widget_coordinate(self, ref: str) -> list[int]:
    app, _, widget = ref.partition(".")
    data = self.sandbox.read_file(f"{LAYOUT_DIR}/{app}.json")
    layout = json.loads(data) if data else {}
    if widget not in layout:
      raise KeyError(f"widget {widget!r} of app {app!r} is not on screen (known: {sorted(layout)[:20]})")
    x, y, w, h = layout[widget]
    return [tools.from_pixel(min(self.config.width - 1, round(x + w / 2)), self.config.width),
            tools.from_pixel(min(self.config.height - 1, round(y + h / 2)), self.config.height)]

  def step(self, name: str, arguments: dict[str, Any]) -> Observation:
    """One call; the environment's death at the workload's hands is an observation, not an error."""
    try:
      obs = self._act(name, arguments)
    except Exception:
      reason = self.lost()
      if reason is None:
        raise  # not the workload's doing: a harness fault
      return Observation(text=f"[{reason}]", env_lost=reason)
    reason = self.lost()
    if reason is not None:
      text = obs.text or ""
      if f"[{reason}]" not in text:  # the shell may have said so already
        text = (text + "\n" if text else "") + f"[{reason}]"
      return Observation(text=text, env_lost=reason)
    return obs

  def _act(self, name: str, arguments: dict[str, Any]) -> Observation:
    """Executes one call; an invalid one gets an error observation; terminal text and/or a screenshot."""
    reason = tools.validate_call(name, arguments)  # the parser validated it; a caller may not have
    if reason:
      return Observation(text=f"Error: {reason}", screenshot=self.screenshot())
    if name == tools.BASH:
      result = self.shell.run(arguments["command"])
      text = result.observation()
      self.terminal_outputs.append(result.output)
      return Observation(text=text, screenshot=self.screenshot())
    action = arguments["action"]
    if action == "terminate":
      self.terminate_status = arguments["status"]
      return Observation(text=None, screenshot=None, done=True, status=arguments["status"])
    if self.desktop is None:
      return Observation(text="Error: this task has no display; use the bash tool.")
    self.desktop.execute(arguments)
    if getattr(self.desktop, "real_apps", None):  # a real app redraws late: observe it once settled
      apps.wait_still(self.desktop, time.monotonic() + apps.SETTLE_MAX, quiet=apps.SETTLE_QUIET)
    return Observation(text=None, screenshot=self.screenshot())


def env_config_from(e: Any) -> EnvConfig:
  """A config's `env` section (configs/common.py) -> EnvConfig: the one place its fields map."""
  return EnvConfig(width=e.width, height=e.height, command_timeout=e.command_timeout, max_output=e.max_output,
                   sandbox=SandboxConfig(home_mb=e.home_mb, memory_mb=e.memory_mb, nproc=e.nproc))
