"""A replay server: recorded chat-completion responses served over HTTP (OpenAI protocol).

A trace set is a JSONL file, one line per recorded call:

  {"key": sha256 of the canonical request messages, "content": reply text,
   "usage": {"prompt_tokens", "completion_tokens"}, "mode": "workflow"|"agent_loop", ...}

`ReplayServer(traces)` answers `POST /v1/chat/completions` with the recorded
reply whose key matches the request's messages, and its recorded `usage`, so a
client meets exactly the tokens of the recording. An unrecorded request is HTTP
404 naming the key (or, with `responder=`, the reply is produced, recorded and
served: that is how a trace set is recorded once). `GET /v1/models` and
`/health` answer as vLLM does.

Token counts of replies produced here (no model, no tokenizer on the machine)
are `approx_tokens`: ceil(chars / 4), the usual English-text rule of thumb;
recorded traces from a real endpoint keep that endpoint's `usage`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit


def approx_tokens(text: str) -> int:
  return math.ceil(len(text) / 4)


def messages_key(messages: list[dict[str, Any]]) -> str:
  canon = json.dumps([{"role": m.get("role"), "content": m.get("content")} for m in messages],
                     sort_keys=True, ensure_ascii=False)
  return hashlib.sha256(canon.encode()).hexdigest()


def load_traces(path: str) -> dict[str, dict[str, Any]]:
  traces: dict[str, dict[str, Any]] = {}
  if not os.path.exists(path):
    return traces
  with open(path, encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        rec = json.loads(line)
        traces[rec["key"]] = rec
      except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}:{i}: not a trace record ({e})") from None
  return traces


class ReplayServer:
  """`with ReplayServer(path) as s: ChatClient(s.url)`. `responder(messages) -> text` records
  missing replies (appended to `path`); without it a miss is HTTP 404."""

  def __init__(self, path: str, *, responder: Callable[[list[dict[str, Any]]], str] | None = None,
               mode: str = "", host: str = "127.0.0.1", port: int = 0, model_name: str = "mage"):
    self.path, self.responder, self.mode, self.model_name = path, responder, mode, model_name
    self.traces = load_traces(path)
    self.hits = self.misses = 0
    self._lock = threading.Lock()
    self.httpd = ThreadingHTTPServer((host, port), _handler(self))
    self.httpd.daemon_threads = True
    self.url = f"http://{host}:{self.httpd.server_address[1]}/v1"
    self._thread: threading.Thread | None = None

  def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list):
      return 400, {"error": {"message": "'messages' must be a list"}}
    key = messages_key(messages)
    with self._lock:
      rec = self.traces.get(key)
      if rec is None and self.responder is not None:
        content = self.responder(messages)
        prompt = sum(approx_tokens(str(m.get("content", ""))) + 4 for m in messages)
        rec = {"key": key, "mode": self.mode, "content": content,
               "usage": {"prompt_tokens": prompt, "completion_tokens": approx_tokens(content)}}
        self.traces[key] = rec
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
          f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self.misses += 1
      elif rec is None:
        self.misses += 1
        return 404, {"error": {"message": f"no recorded reply for request {key[:16]} in {self.path}"}}
      else:
        self.hits += 1
    usage = dict(rec["usage"], total_tokens=rec["usage"]["prompt_tokens"] + rec["usage"]["completion_tokens"])
    return 200, {"id": f"replay-{key[:12]}", "object": "chat.completion", "model": self.model_name,
                 "usage": usage, "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": rec["content"]}}]}

  def start(self) -> "ReplayServer":
    self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self._thread.start()
    return self

  def stop(self) -> None:
    self.httpd.shutdown()
    self.httpd.server_close()

  def __enter__(self) -> "ReplayServer":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()


def _handler(server: ReplayServer):
  class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
      pass

    def _send(self, code: int, obj: Any) -> None:
      data = json.dumps(obj).encode()
      self.send_response(code)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def do_GET(self):
      route = urlsplit(self.path).path.rstrip("/")
      if route == "/health":
        return self._send(200, {})
      if route == "/v1/models":
        return self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
      self._send(404, {"error": {"message": f"GET {route}: no such route"}})

    def do_POST(self):
      route = urlsplit(self.path).path.rstrip("/")
      if route != "/v1/chat/completions":
        return self._send(404, {"error": {"message": f"POST {route}: no such route"}})
      try:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
      except json.JSONDecodeError as e:
        return self._send(400, {"error": {"message": f"body is not JSON: {e}"}})
      self._send(*server.reply(body))
  return Handler
