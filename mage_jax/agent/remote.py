"""A remote desktop environment client for OSWorld-style VM servers (HTTP).

Follows xlang-ai/OSWorld desktop_env/controllers/python.py (PythonController):
  screenshot        GET  /screenshot                        -> PNG
  screen size       POST /screen_size                       -> {"width", "height"}
  GUI actions       POST /execute {"command": ["python", "-c", "import pyautogui; ..."], "shell": false}
  bash              POST /run_bash_script {"script", "timeout", "working_dir"}
                         -> {"status", "output", "error", "returncode"}
  files (checkers)  POST /file (form file_path)            -> bytes
  files (setup)     POST /setup/upload (multipart file_path, file_data)
Routes are listed with their source in docs/agent.md. OSWorld has no
persistent shell: the client carries the working directory across `bash`
calls (variables do not persist). A VM is reset by its provider (snapshot
revert); our loopback server adds POST /mage/reset for tests.
"""
from __future__ import annotations

import io
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from PIL import Image

from mage_jax.actions import keys, schema as tools
from mage_jax.agent.env import APPS_DIR, LAYOUT_DIR, Env, Observation
from mage_jax.machine import terminal
from mage_jax.machine.sandbox import HOME
from mage_jax.tasks import checkers, preparers
from mage_jax.tasks.package import TaskPackage

_CWD_MARK = "__MAGE_CWD="
SCROLL_PIXELS_PER_CLICK = tools.SCROLL_PIXELS_PER_CLICK


def pyautogui_command(arguments: dict[str, Any], width: int, height: int) -> str | None:
  """One computer_use call as the pyautogui code OSWorld's /execute runs (None for wait/terminate)."""
  a = arguments["action"]
  if "coordinate" in arguments:
    x, y = tools.to_pixel(arguments["coordinate"][0], width), tools.to_pixel(arguments["coordinate"][1], height)
  fn = {"mouse_move": "moveTo", "left_click": "click", "right_click": "rightClick",
        "middle_click": "middleClick", "double_click": "doubleClick"}.get(a)
  if fn:
    return f"pyautogui.{fn}({x}, {y})"
  if a == "left_click_drag":
    return f"pyautogui.dragTo({x}, {y}, duration=0.5, button='left')"
  if a == "key":
    names, reason = keys.parse_keys(arguments["keys"])
    if reason:
      raise ValueError(reason)
    return "pyautogui.hotkey(" + ", ".join(repr(keys.pyautogui_name(k)) for k in names) + ")"
  if a == "type":
    return f"pyautogui.write({arguments['text']!r})"
  if a == "scroll":
    clicks = max(1, round(abs(arguments["pixels"]) / SCROLL_PIXELS_PER_CLICK))
    return f"pyautogui.scroll({clicks if arguments['pixels'] > 0 else -clicks})"
  return None


class RemoteEnv(Env):
  independent_instances = False  # every instance at one URL drives the same VM

  def __init__(self, base_url: str, *, reset_route: str | None = "/mage/reset", timeout: float = 120.0,
               command_timeout: int = 30, max_output: int = 16_000, app_timeout: float = 30.0):
    self.base = base_url.rstrip("/")
    self.reset_route, self.timeout = reset_route, timeout
    self.command_timeout, self.max_output, self.app_timeout = command_timeout, max_output, app_timeout
    self.task: TaskPackage | None = None
    self.terminal_outputs: list[str] = []
    self.terminate_status: str | None = None   # the policy's terminate status (OSWorld's infeasible tasks)
    self.cwd = HOME
    self.width = self.height = 0

  # ---- HTTP --------------------------------------------------------------------------------
  def _request(self, route: str, data: bytes | None = None, ctype: str | None = None,
               timeout: float | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(self.base + route, data=data, method="GET" if data is None else "POST")
    if ctype:
      req.add_header("Content-Type", ctype)
    try:
      with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
        return r.status, r.read()
    except urllib.error.HTTPError as e:
      return e.code, e.read()

  def _post_json(self, route: str, obj: dict[str, Any], timeout: float | None = None) -> tuple[int, dict]:
    code, body = self._request(route, json.dumps(obj).encode(), "application/json", timeout)
    try:
      return code, json.loads(body)
    except json.JSONDecodeError:
      return code, {"status": "error", "error": body[:500].decode(errors="replace")}

  def run_bash_script(self, script: str, timeout: int | None = None, working_dir: str | None = None) -> dict:
    timeout = timeout or self.command_timeout
    code, resp = self._post_json("/run_bash_script", {"script": script, "timeout": timeout,
                                                      "working_dir": working_dir}, timeout=timeout + 100)
    return resp

  def execute(self, command: list[str] | str, shell: bool = False) -> dict:
    code, resp = self._post_json("/execute", {"command": command, "shell": shell})
    if code != 200:
      raise RuntimeError(f"/execute failed with HTTP {code}: {resp}")
    return resp

  # ---- Env ---------------------------------------------------------------------------------
  def reset(self, task: TaskPackage) -> Observation:
    if self.reset_route:
      code, resp = self._post_json(self.reset_route, {})
      if code != 200:
        raise RuntimeError(f"{self.reset_route} failed with HTTP {code}: {resp}")
    code, size = self._post_json("/screen_size", {})
    self.width, self.height = int(size["width"]), int(size["height"])
    self.task, self.terminal_outputs, self.cwd, self.terminate_status = task, [], HOME, None
    for i, spec in enumerate(task.setup):
      try:
        preparers.run_preparer(self, spec, task.root)
      except Exception as e:
        raise preparers.SetupError(f"{task.source}: setup[{i}] ({spec['type']}): {e}") from e
    return Observation(screenshot=self.screenshot())

  def screenshot(self) -> Image.Image | None:
    code, body = self._request("/screenshot")
    if code != 200:
      raise RuntimeError(f"/screenshot failed with HTTP {code}")
    return Image.open(io.BytesIO(body)).convert("RGB")

  def close(self) -> None:
    self.task = None

  def step(self, name: str, arguments: dict[str, Any]) -> Observation:
    reason = tools.validate_call(name, arguments)  # the parser validated it; a caller may not have
    if reason:
      return Observation(text=f"Error: {reason}", screenshot=self.screenshot())
    if name == tools.BASH:
      script = (f"cd {json.dumps(self.cwd)} 2>/dev/null\n{arguments['command']}\n__rc=$?\n"
                f"printf '\\n{_CWD_MARK}%s\\n' \"$(pwd)\"\nexit $__rc")
      resp = self.run_bash_script(script)
      out = resp.get("output") or ""
      head, sep, tail = out.rpartition("\n" + _CWD_MARK)
      if sep:
        self.cwd, out = tail.strip() or self.cwd, head
      self.terminal_outputs.append(out)
      text = out[:self.max_output].rstrip("\n") + ("\n[output truncated]" if len(out) > self.max_output else "")
      rc = resp.get("returncode")
      if rc not in (0, None):
        text += f"\n[exit code {rc}]"
      return Observation(text=text.strip("\n") or terminal.NO_OUTPUT, screenshot=self.screenshot())
    if arguments["action"] == "terminate":
      self.terminate_status = arguments["status"]
      return Observation(done=True, status=arguments["status"])
    if arguments["action"] == "wait":
      time.sleep(float(arguments["time"]))
    else:
      code = pyautogui_command(arguments, self.width, self.height)
      resp = self.execute(["python", "-c", f"import pyautogui; import time; pyautogui.FAILSAFE = False; {code}"])
      if resp.get("returncode") not in (0, None):
        return Observation(text=f"Error: the action failed: {resp.get('error', '')[-300:]}",
                           screenshot=self.screenshot())
      time.sleep(0.08)
    return Observation(screenshot=self.screenshot())

  # ---- preparers' target and checker context --------------------------------------------------
  def write_file(self, path: str, data: bytes) -> None:
    path = path if path.startswith("/") else f"{HOME}/{path}"
    boundary = "mage" + secrets.token_hex(8)
    body = b"".join([
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_path\"\r\n\r\n{path}\r\n".encode(),
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file_data\"; filename=\"f\"\r\n"
        "Content-Type: application/octet-stream\r\n\r\n".encode(), data, f"\r\n--{boundary}--\r\n".encode()])
    code, resp = self._request("/setup/upload", body, f"multipart/form-data; boundary={boundary}")
    if code != 200:
      raise RuntimeError(f"/setup/upload {path} failed with HTTP {code}: {resp[:200]!r}")

  def run_script(self, script: str, timeout: float) -> tuple[int, str]:
    resp = self.run_bash_script(script, int(timeout), HOME)
    return int(resp.get("returncode", -1)), resp.get("output") or ""

  def launch_app(self, config: dict[str, Any]) -> None:
    name = config.get("name", config["kind"])
    cfg_path = f"/tmp/.mage_apps/{name}.json"
    self.write_file(cfg_path, json.dumps(config).encode())
    self.execute(f"nohup python {APPS_DIR}/tkapps.py {cfg_path} >/dev/null 2>&1 &", shell=True)
    deadline = time.monotonic() + self.app_timeout
    while self.read_file(f"{LAYOUT_DIR}/{name}.json") is None:
      if time.monotonic() > deadline:
        raise preparers.SetupError(f"app {name!r} showed no window within {self.app_timeout}s")
      time.sleep(0.2)

  def read_file(self, path: str) -> bytes | None:
    path = path if path.startswith("/") else f"{HOME}/{path}"
    code, body = self._request("/file", urllib.parse.urlencode({"file_path": path}).encode(),
                               "application/x-www-form-urlencoded")
    return body if code == 200 else None

  def list_dir(self, path: str) -> list[str] | None:
    path = path if path.startswith("/") else f"{HOME}/{path}"
    resp = self.run_bash_script(f"[ -d {json.dumps(path)} ] || exit 3; ls -A1 -- {json.dumps(path)}", 30)
    return resp.get("output", "").splitlines() if resp.get("returncode") == 0 else None

  def score(self) -> float:
    return checkers.score(self, self.task.checker, self.task.root)

  def widget_coordinate(self, ref: str) -> list[int]:
    app, _, widget = ref.partition(".")
    data = self.read_file(f"{LAYOUT_DIR}/{app}.json")
    layout = json.loads(data) if data else {}
    if widget not in layout:
      raise KeyError(f"widget {widget!r} of app {app!r} is not on screen")
    x, y, w, h = layout[widget]
    return [tools.from_pixel(min(self.width - 1, round(x + w / 2)), self.width),
            tools.from_pixel(min(self.height - 1, round(y + h / 2)), self.height)]
