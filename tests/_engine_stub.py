"""A loopback stand-in for the rollout engine: the routes an RL episode and a weight sync's label
step use, with vLLM's request and response bodies (engine/rollout_client.py names the sources).

It is not a model: POST /v1/completions answers the scripted texts in turn (call i gets
texts[i % len(texts)]), echoing the prompt ids, with 3 made-up token ids and log-probs.
GET /weight_info and POST /update_weight_version keep the served weights' label as vLLM >= 0.29
does; `spans=True` adds vLLM 0.33's per-choice `weight_versions`. `on_call(i)` runs while call i
is in flight (before it is answered): a test lands a weight sync there.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Callable

from tests._loopback_http import LoopbackServer

WAIT = '<tool_call>\n{"name": "computer_use", "arguments": {"action": "wait", "time": 0}}\n</tool_call>'
TERMINATE = ('<tool_call>\n{"name": "computer_use", "arguments": {"action": "terminate", '
             '"status": "success"}}\n</tool_call>')


class ScriptedEngine(LoopbackServer):
  def __init__(self, texts: list[str], *, on_call: Callable[[int], object] | None = None,
               spans: bool = False):
    self.texts, self.on_call, self.spans = list(texts), on_call, spans
    self.label = "0"
    self.calls = 0
    self._lock = threading.Lock()
    super().__init__(self._handler())

  def _complete(self, body: dict) -> dict:
    with self._lock:
      i, self.calls = self.calls, self.calls + 1
    if self.on_call is not None:
      self.on_call(i)
    choice = {"text": self.texts[i % len(self.texts)], "token_ids": [11, 12, 13],
              "prompt_token_ids": list(body["prompt"]), "finish_reason": "stop",
              "logprobs": {"token_logprobs": [-0.1, -0.2, -0.3]}}
    if self.spans:
      choice["weight_versions"] = [{"version": self.label, "start": 0, "end": 3}]
    return {"choices": [choice]}

  def _handler(self):
    engine = self

    class Handler(BaseHTTPRequestHandler):
      protocol_version = "HTTP/1.1"

      def log_message(self, *a):
        pass

      def _send(self, code: int, obj: dict) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

      def do_GET(self):
        if self.path == "/health":
          return self._send(200, {})
        if self.path == "/weight_info":
          return self._send(200, {"weight_version": engine.label})
        self._send(404, {"error": {"message": f"GET {self.path}: no such route"}})

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/update_weight_version":
          engine.label = body["new_version"]
          return self._send(200, {"success": True, "new_version": engine.label})
        if self.path == "/v1/completions":
          return self._send(200, engine._complete(body))
        self._send(404, {"error": {"message": f"POST {self.path}: no such route"}})

    return Handler
