"""The URL a process uses to reach an engine it started, and whether a URL names this host only.

Security: an engine reachable from other hosts exposes its dev routes (weight reload, pause,
collective_rpc) without authentication, as vLLM's VLLM_SERVER_DEV_MODE does: bind a
non-loopback address (`rl.engine_host`, `launch.vllm --host`) only on a private network.
"""
from __future__ import annotations

import ipaddress
import urllib.parse

ANY_ADDRESS = ("0.0.0.0", "::", "")


def learner_url(host: str, port: int) -> str:
  """The URL this process uses for a server bound at host:port (all interfaces -> loopback)."""
  return f"http://{'127.0.0.1' if host in ANY_ADDRESS else host}:{port}/v1"


def is_loopback(url: str) -> bool:
  host = urllib.parse.urlsplit(url).hostname or ""
  if host == "localhost" or host.endswith(".localhost"):
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:   # a host name: whatever it resolves to, it names this host only if above
    return False
