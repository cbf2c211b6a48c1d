"""A loopback OSWorld-style server over the local sandboxed desktop (for testing remote.py).

Routes and shapes follow xlang-ai/OSWorld desktop_env/server/main.py:
  GET  /screenshot                      PNG bytes
  POST /screen_size                     {"width", "height"}
  POST /execute, /setup/execute         {"command": [..] | str, "shell": bool, "timeout"?}
                                        -> {"status": "success", "output", "error", "returncode"}
  POST /run_bash_script                 {"script", "timeout"?, "working_dir"?}
                                        -> {"status": "success"|"error", "output" (stdout+stderr), "error": "",
                                            "returncode"}; timeout -> 500 with returncode -1
  POST /file                            form file_path -> the file's bytes (404 if missing)
  POST /setup/upload                    multipart file_path + file_data -> 200
plus one route of ours (a real OSWorld VM is reset by its provider's snapshot revert):
  POST /mage/reset                      {"width"?, "height"?} fresh sandbox + desktop
Commands run inside the episode's sandbox as its user, with DISPLAY=:0 and a
pyautogui shim (tasks/builtin/apps/shim) first on PYTHONPATH.
"""
from __future__ import annotations

import email
import io
import json
import shlex
import subprocess
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mage_jax.agent.env import APPS_DIR, EnvConfig, LocalEnv
from mage_jax.machine.sandbox import HOME, kill_tree, sandbox_env
from mage_jax.tasks.package import TaskPackage

_BLANK = TaskPackage(id="osworld-blank", instruction="", kind="gui", checker={"type": "file_exists", "path": "x"})


class OSWorldLoopback:
  def __init__(self, config: EnvConfig | None = None, host: str = "127.0.0.1", port: int = 0):
    self.config = config or EnvConfig()
    self.env = LocalEnv(self.config)
    self.env.reset(_BLANK)
    self._lock = threading.Lock()
    self.httpd = ThreadingHTTPServer((host, port), self._handler())
    self.url = f"http://{host}:{self.httpd.server_address[1]}"
    self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self._thread.start()

  def close(self) -> None:
    self.httpd.shutdown()
    self.httpd.server_close()
    self.env.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  # ---- route implementations ---------------------------------------------------------------
  def _env(self) -> dict[str, str]:
    env = sandbox_env(":0")
    env["PYTHONPATH"] = f"{APPS_DIR}/shim"
    return env

  def execute(self, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    shell = data.get("shell", False)
    command = data.get("command", "" if shell else [])
    if isinstance(command, str) and not shell:
      command = shlex.split(command)
    argv = ["/bin/bash", "-c", command] if shell else list(command)
    try:
      p = self.env.sandbox.spawn(argv, env=self._env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
      out, err = p.communicate(timeout=data.get("timeout", 120))
    except Exception as e:  # noqa: BLE001 - reported like OSWorld's server does
      return 500, {"status": "error", "message": str(e)}
    return 200, {"status": "success", "output": out.decode(errors="replace"), "error": err.decode(errors="replace"),
                 "returncode": p.returncode}

  def run_bash_script(self, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    script, timeout = data.get("script"), data.get("timeout", 100)
    if not script:
      return 400, {"status": "error", "output": "Script not supplied!", "error": "", "returncode": -1}
    wd = data.get("working_dir") or HOME
    try:
      p = self.env.sandbox.spawn(["/bin/bash", "-c", script], env=self._env(), cwd=wd, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except (UnicodeEncodeError, ValueError) as e:  # a lone surrogate or a NUL in the script
      return 400, {"status": "error", "output": f"Script is not valid text: {e}", "error": "", "returncode": -1}
    try:
      out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      kill_tree(p.pid)
      p.communicate()
      return 500, {"status": "error", "output": f"Script execution timed out after {timeout} seconds",
                   "error": "", "returncode": -1}
    return 200, {"status": "success" if p.returncode == 0 else "error", "output": out.decode(errors="replace"),
                 "error": "", "returncode": p.returncode}

  def _handler(self):
    server = self

    class Handler(BaseHTTPRequestHandler):
      def log_message(self, *args):  # quiet
        pass

      def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

      def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

      def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

      def do_GET(self):
        if self.path.split("?")[0] == "/screenshot":
          buf = io.BytesIO()
          server.env.screenshot().save(buf, format="PNG")
          return self._send(200, buf.getvalue(), "image/png")
        self._json(404, {"error": "not found"})

      def do_POST(self):
        route, body = self.path.split("?")[0], self._body()
        ctype = self.headers.get("Content-Type", "")
        if route in ("/execute", "/setup/execute"):
          return self._json(*server.execute(json.loads(body or b"{}")))
        if route == "/run_bash_script":
          return self._json(*server.run_bash_script(json.loads(body or b"{}")))
        if route == "/screen_size":
          return self._json(200, {"width": server.config.width, "height": server.config.height})
        if route == "/file":
          path = urllib.parse.parse_qs(body.decode()).get("file_path", [""])[0]
          data = server.env.read_file(path) if path else None
          return self._send(200, data, "application/octet-stream") if data is not None else \
              self._json(404, {"error": "File not found"})
        if route == "/setup/upload":
          msg = email.message_from_bytes(f"Content-Type: {ctype}\r\n\r\n".encode() + body)
          fields = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                    for p in msg.get_payload()}
          if not fields.get("file_path") or fields.get("file_data") is None:
            return self._json(400, {"error": "file_path and file_data are required"})
          server.env.write_file(fields["file_path"].decode(), fields["file_data"])
          return self._send(200, b"File Uploaded", "text/plain")
        if route == "/mage/reset":
          with server._lock:
            server.env.reset(_BLANK)
          return self._json(200, {"status": "success"})
        self._json(404, {"error": "not found"})

    return Handler
