"""A threaded HTTP server on 127.0.0.1 (an ephemeral port) for the tests' protocol stand-ins:
started at construction, stopped by close() or the with-block; `url` is its OpenAI base."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
  def __init__(self, handler: type[BaseHTTPRequestHandler]):
    self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    self.httpd.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
    threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

  def close(self) -> None:
    self.httpd.shutdown()
    self.httpd.server_close()

  def __enter__(self):
    return self

  def __exit__(self, *exc) -> None:
    self.close()
