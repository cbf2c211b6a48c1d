"""A strict OpenAI-like chat endpoint on loopback, for the client's protocol edges only.

It is not a model and stands in for none: it answers every request with what its `responder`
returns. It enforces what hosted APIs enforce and vLLM does not: a Bearer key (401 otherwise,
OpenAI's error shape), no unknown request fields (400 "Unrecognized request argument supplied:
<field>", as api.openai.com answers `return_token_ids`), a request rate (429 with Retry-After
once more than `rate` requests arrive within `window_s`), no GET /version (404: not vLLM). It
records every request, the peak number in flight, and can be told to fail the next requests
with given statuses. Replies carry `usage` with `prompt_tokens_details.cached_tokens`.
"""
from __future__ import annotations

import collections
import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from _loopback_http import LoopbackServer

# api.openai.com's chat.completions.create parameters (the `openai` SDK's keyword arguments)
CHAT_FIELDS = frozenset({
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions", "logit_bias",
    "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities", "n",
    "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "reasoning_effort",
    "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
    "verbosity", "web_search_options"})


class StrictStub(LoopbackServer):
  def __init__(self, key: str, responder: Callable[[dict[str, Any]], dict[str, Any] | str] | None = None,
               *, rate: int = 1000, window_s: float = 1.0, hold_s: float = 0.0,
               usage: dict[str, Any] | None = None):
    self.key, self.rate, self.window_s, self.hold_s = key, rate, window_s, hold_s
    self.responder = responder or (lambda body: '{"ok": true}')
    self.usage = usage if usage is not None else {
        "prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
        "prompt_tokens_details": {"cached_tokens": 40}}
    self.requests: list[dict[str, Any]] = []        # {"path", "headers", "body", "status"}
    self.fail_next: collections.deque[tuple[int, str | None]] = collections.deque()  # (status, Retry-After)
    self.in_flight = self.peak_in_flight = 0
    self._times: collections.deque[float] = collections.deque()
    self._lock = threading.Lock()
    super().__init__(self._handler())

  def statuses(self) -> list[int]:
    return [r["status"] for r in self.requests]

  def _check(self, headers, body) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, error body, extra headers) or (200, {}, {})."""
    if headers.get("Authorization") != f"Bearer {self.key}":
      return 401, _err("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"), {}
    with self._lock:
      now = time.monotonic()
      while self._times and now - self._times[0] > self.window_s:
        self._times.popleft()
      if len(self._times) >= self.rate:
        wait = self.window_s - (now - self._times[0])
        return 429, _err("Rate limit reached for requests.", "requests", "rate_limit_exceeded"), \
            {"Retry-After": f"{max(0.05, wait):.2f}"}
      self._times.append(now)
      if self.fail_next:
        status, after = self.fail_next.popleft()
        return status, _err(f"scripted failure {status}", "server_error", None), \
            ({"Retry-After": after} if after is not None else {})
    unknown = sorted(set(body) - CHAT_FIELDS)
    if unknown:
      return 400, _err(f"Unrecognized request argument supplied: {', '.join(unknown)}",
                       "invalid_request_error", None), {}
    if not isinstance(body.get("messages"), list) or not body.get("model"):
      return 400, _err("'messages' and 'model' are required", "invalid_request_error", None), {}
    return 200, {}, {}

  def _handler(self):
    stub = self

    class H(BaseHTTPRequestHandler):
      protocol_version = "HTTP/1.1"

      def log_message(self, *a):
        pass

      def _send(self, code, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
          self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

      def do_GET(self):
        self._send(404, _err(f"Invalid URL (GET {self.path})", "invalid_request_error", None))

      def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        with stub._lock:
          stub.in_flight += 1
          stub.peak_in_flight = max(stub.peak_in_flight, stub.in_flight)
        try:
          time.sleep(stub.hold_s)
          if self.path.rstrip("/") != "/v1/chat/completions":
            status, obj, extra = 404, _err(f"Invalid URL (POST {self.path})", "invalid_request_error", None), {}
          else:
            status, obj, extra = stub._check(self.headers, body)
          if status == 200:
            reply = stub.responder(body)
            message = {"role": "assistant", "content": reply} if isinstance(reply, str) else reply
            obj = {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
                   "model": body["model"], "choices": [{"index": 0, "message": message, "logprobs": None,
                                                        "finish_reason": "stop"}]}
            if stub.usage:
              obj["usage"] = stub.usage
          stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body, "status": status})
        finally:
          # Out of flight before the reply leaves: once the client has read it, it may start its
          # next request, and counting this one still would overstate the peak (a peak of 3 with
          # max_concurrency=2 was measured that way under load).
          with stub._lock:
            stub.in_flight -= 1
        self._send(status, obj, extra)

    return H


def _err(message: str, kind: str, code: str | None) -> dict[str, Any]:
  return {"error": {"message": message, "type": kind, "param": None, "code": code}}
