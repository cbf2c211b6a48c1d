"""A minimal Chrome DevTools protocol client, run with python3 inside the episode's sandbox.

The Chromium of an OSWorld task listens on 127.0.0.1:PORT of the sandbox's own network namespace
(`--remote-debugging-port`), which the host can't reach, so the checker runs this file's source
in the sandbox (`python3 -c SOURCE list|eval PORT [EXPRESSION]`) and reads its JSON output:
  list  the page targets, as DevTools' /json/list gives them (Chromium lists the most recently
        active tab first): [{id, title, url, webSocketDebuggerUrl, ...}]
  eval  Runtime.evaluate(EXPRESSION, returnByValue) in the first page target, over the target's
        WebSocket: the value as JSON
  close for each URL given, the first tab whose URL equals it after OSWorld's normalisation (scheme
        http when absent, host lowercased without "www.", a lone "/" path dropped) is closed
        (/json/close/ID): the closed tabs' ids
Standard library only (the sandbox has no third-party packages); WebSocket framing per RFC 6455
(client frames masked, the server's unmasked, continuation frames joined).
"""
import base64
import json
import os
import socket
import struct
import sys
import urllib.parse
import urllib.request

PORT = 9222


def pages(port):
  with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
    return [t for t in json.loads(r.read().decode()) if t.get("type") == "page"]


def _recv_exact(sock, n):
  buf = b""
  while len(buf) < n:
    chunk = sock.recv(n - len(buf))
    if not chunk:
      raise ConnectionError("the DevTools socket closed mid-frame")
    buf += chunk
  return buf


def _send_text(sock, text):
  data, mask = text.encode(), os.urandom(4)
  n = len(data)
  head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                          bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                          bytes([0x80 | 127]) + struct.pack(">Q", n))
  sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def _recv_message(sock):
  parts = []
  while True:
    b0, b1 = _recv_exact(sock, 2)
    n = b1 & 0x7F
    if n == 126:
      n = struct.unpack(">H", _recv_exact(sock, 2))[0]
    elif n == 127:
      n = struct.unpack(">Q", _recv_exact(sock, 8))[0]
    mask = _recv_exact(sock, 4) if b1 & 0x80 else None
    payload = _recv_exact(sock, n)
    if mask:
      payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    opcode = b0 & 0x0F
    if opcode == 0x8:
      raise ConnectionError("the DevTools socket was closed")
    if opcode in (0x9, 0xA):   # ping/pong: not part of a message
      continue
    parts.append(payload)
    if b0 & 0x80:
      return b"".join(parts).decode()


def evaluate(ws_url, expression):
  u = urllib.parse.urlparse(ws_url)
  sock = socket.create_connection((u.hostname, u.port), timeout=15)
  try:
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
      head += _recv_exact(sock, 1)
    status = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status:
      raise ConnectionError(f"no WebSocket upgrade: {status!r}")
    _send_text(sock, json.dumps({"id": 1, "method": "Runtime.evaluate",
                                 "params": {"expression": expression, "returnByValue": True}}))
    while True:
      msg = json.loads(_recv_message(sock))
      if msg.get("id") == 1:
        if "error" in msg or "exceptionDetails" in msg.get("result", {}):
          raise RuntimeError(f"evaluation failed: {msg.get('error') or msg['result']['exceptionDetails']}")
        return msg["result"]["result"].get("value")
  finally:
    sock.close()


def normalize(url):
  """rule_metrics.normalize_url, restated: this file runs alone in the sandbox (no package imports)."""
  u = urllib.parse.urlparse(url)
  return urllib.parse.urlunparse(u._replace(scheme=(u.scheme or "http").lower(), netloc=u.netloc.lower().replace("www.", ""),
                                            path="" if u.path == "/" else u.path))


def close(port, tabs, urls):
  closed = []
  for url in urls:
    tab = next((t for t in tabs if t["id"] not in closed and normalize(t.get("url", "")) == normalize(url)), None)
    if tab is not None:
      urllib.request.urlopen(f"http://127.0.0.1:{port}/json/close/{tab['id']}", timeout=10).read()
      closed.append(tab["id"])
  return closed


def main(argv):
  cmd, port = argv[1], int(argv[2])
  tabs = pages(port)
  if cmd == "list":
    out = tabs
  elif cmd == "eval":
    out = evaluate(tabs[0]["webSocketDebuggerUrl"], argv[3]) if tabs else None
  elif cmd == "close":
    out = close(port, tabs, argv[3:])
  else:
    raise SystemExit(f"unknown command {cmd!r}")
  sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
  main(sys.argv)
