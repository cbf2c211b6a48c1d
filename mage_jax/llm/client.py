"""One OpenAI-compatible `POST {base_url}/chat/completions` client for every LLM path.

What it does that a hosted API needs and vLLM tolerates:
- auth: `Authorization: Bearer <key>`, the key read from the environment variable the config
  names (`api_key_env`); the config, manifests and results hold only that name. The key never
  appears in a repr or an error message (a server echoing it is scrubbed).
- strict fields: vLLM-only request fields (`return_token_ids`, `skip_special_tokens`, ...) are
  passed separately and sent only when the server is vLLM: `server="vllm"`, or `"auto"` (the
  default) asks `GET {root}/version` once, which vLLM answers with {"version": ...} and hosted
  APIs do not.
- retries: HTTP 429 and 5xx, timeouts and dropped connections are retried up to `http_retries`
  times, waiting what `Retry-After` says (seconds or an HTTP date, capped at `max_backoff_s`)
  or else 0.5 s doubling; a refused connection or another 4xx fails at once. Giving up is one
  `EndpointError` naming the endpoint, the status and the server's message.
- a concurrency limit: at most `max_concurrency` requests in flight per client (threads share
  one client; each process of a pool has its own).
- usage: every reply's `usage` (prompt, completion, cached tokens) priced by the `PriceTable`
  (pricing.py); a reply without `usage` is estimated from characters and marked so.
"""
from __future__ import annotations

import dataclasses
import email.utils
import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Mapping

from mage_jax.llm.pricing import PriceTable, Usage

RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
SERVER_KINDS = ("auto", "vllm", "openai")


class EndpointError(RuntimeError):
  """The endpoint cannot be reached or keeps answering with an error; names the URL and status."""

  def __init__(self, message: str, status: int | None = None):
    super().__init__(message)
    self.status = status


@dataclasses.dataclass
class ChatReply:
  text: str                      # the message content ("" when the model only called tools)
  message: dict[str, Any]        # choices[0].message as sent (tool_calls, reasoning_content, ...)
  choice: dict[str, Any]         # choices[0] (logprobs, token_ids, finish_reason)
  response: dict[str, Any]       # the whole body (prompt_token_ids on vLLM)
  usage: Usage
  dollars: float
  attempts: int                  # HTTP requests made (1 + transport retries)


def _retry_after(value: str | None) -> float | None:
  if not value:
    return None
  try:
    return max(0.0, float(value))
  except ValueError:
    pass
  try:
    when = email.utils.parsedate_to_datetime(value)
  except (TypeError, ValueError):
    return None
  return max(0.0, when.timestamp() - time.time())


def _message_text(messages: list[dict[str, Any]]) -> str:
  """The prompt's text, for the character estimate when a reply has no usage."""
  out = []
  for m in messages:
    content = m.get("content")
    if isinstance(content, str):
      out.append(content)
    elif isinstance(content, list):
      out += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
  return "\n".join(out)


class ChatClient:
  def __init__(self, base_url: str, model: str = "mage", *, api_key_env: str = "",
               headers: Mapping[str, str] | None = None, server: str = "auto", timeout_s: float = 120.0,
               http_retries: int = 4, max_backoff_s: float = 60.0, max_concurrency: int = 8,
               prices: PriceTable | Mapping[str, Any] | None = None):
    if server not in SERVER_KINDS:
      raise ValueError(f"server={server!r}: expected one of {SERVER_KINDS}")
    if max_concurrency < 1 or http_retries < 0:
      raise ValueError(f"max_concurrency={max_concurrency} must be >= 1, http_retries={http_retries} >= 0")
    self.base_url = base_url.rstrip("/")
    self.model, self.timeout_s = model, timeout_s
    self.api_key_env = api_key_env
    self._key = ""
    if api_key_env:
      self._key = os.environ.get(api_key_env, "")
      if not self._key:
        raise ValueError(f"api_key_env={api_key_env!r}: the environment variable ${api_key_env} "
                         f"is not set (the key for {self.base_url})")
    self.extra_headers = dict(headers or {})
    self.server = server
    self.http_retries, self.max_backoff_s = http_retries, max_backoff_s
    self.max_concurrency = max_concurrency
    self._slots = threading.BoundedSemaphore(max_concurrency)
    self._lock = threading.Lock()
    self._is_vllm: bool | None = {"vllm": True, "openai": False}.get(server)
    self.prices = prices if isinstance(prices, PriceTable) else PriceTable(dict(prices) if prices else
                                                                           PriceTable().prices)

  def __repr__(self) -> str:  # never the key
    return (f"ChatClient({self.base_url!r}, model={self.model!r}, api_key_env={self.api_key_env!r}, "
            f"server={self.server!r})")

  @property
  def url(self) -> str:
    return f"{self.base_url}/chat/completions"

  def headers(self) -> dict[str, str]:
    h = {"Content-Type": "application/json", **self.extra_headers}
    if self._key:
      h["Authorization"] = f"Bearer {self._key}"
    return h

  def _scrub(self, text: str) -> str:
    return text.replace(self._key, "***") if self._key else text

  # ---- server kind -------------------------------------------------------------------------------
  @property
  def is_vllm(self) -> bool:
    """vLLM answers GET {root}/version with {"version": ...}; asked once, on first need."""
    with self._lock:
      if self._is_vllm is None:
        root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        try:
          req = urllib.request.Request(root + "/version", headers=self.headers())
          with urllib.request.urlopen(req, timeout=min(10.0, self.timeout_s)) as r:
            body = json.loads(r.read())
          self._is_vllm = isinstance(body, dict) and isinstance(body.get("version"), str)
        except (OSError, ValueError):
          self._is_vllm = False
      return self._is_vllm

  # ---- the call ----------------------------------------------------------------------------------
  def complete(self, messages: list[dict[str, Any]], *, where: str = "",
               vllm_fields: Mapping[str, Any] | None = None, **fields: Any) -> ChatReply:
    """One chat completion. `fields` are standard OpenAI request fields (max_tokens,
    temperature, seed, logprobs, tools, ...; None values are left out); `vllm_fields` are sent
    only to vLLM. `where` prefixes error messages (e.g. the node asking)."""
    body = {"model": self.model, "messages": messages,
            **{k: v for k, v in fields.items() if v is not None}}
    if vllm_fields and self.is_vllm:
      body.update(vllm_fields)
    out, attempts = self._post(self.url, body, where)
    try:
      choice = out["choices"][0]
      message = choice.get("message") or {}
      text = message.get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
      raise EndpointError(f"{where}endpoint {self.url}: the reply is not a chat completion: "
                          f"{self._scrub(str(out)[:200])}") from None
    usage = Usage.from_response(out.get("usage"), _message_text(messages), text)
    dollars = self.prices.dollars(self.model, usage.prompt_tokens, usage.completion_tokens,
                                  usage.cached_tokens)
    return ChatReply(text, message, choice, out, usage, dollars, attempts)

  def _post(self, url: str, body: dict[str, Any], where: str) -> tuple[dict[str, Any], int]:
    data = json.dumps(body).encode()
    last = ""
    for attempt in range(self.http_retries + 1):
      wait = None
      with self._slots:
        req = urllib.request.Request(url, data=data, headers=self.headers())
        try:
          with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read()), attempt + 1
        except urllib.error.HTTPError as e:
          detail = self._scrub(_error_message(e.read()))
          last = f"HTTP {e.code}: {detail}"
          if e.code not in RETRY_STATUS or attempt == self.http_retries:
            raise EndpointError(f"{where}endpoint {url} answered {last}"
                                + (f" (after {attempt + 1} attempts)" if attempt else ""), e.code) from None
          wait = _retry_after(e.headers.get("Retry-After"))
        except json.JSONDecodeError as e:
          raise EndpointError(f"{where}endpoint {url}: the reply is not JSON ({e})") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
          reason = getattr(e, "reason", e)
          last = f"unreachable ({reason})"
          if isinstance(reason, ConnectionRefusedError) or attempt == self.http_retries:
            raise EndpointError(f"{where}endpoint {url} is {last}; is the server running?") from None
      time.sleep(min(self.max_backoff_s, 0.5 * 2 ** attempt if wait is None else wait))
    raise AssertionError(last)  # the loop returns or raises


def _error_message(raw: bytes) -> str:
  """OpenAI's error shape {"error": {"message"}} (vLLM, hosted APIs), else the body's start."""
  try:
    err = json.loads(raw)
    if isinstance(err, dict) and isinstance(err.get("error"), dict) and err["error"].get("message"):
      return str(err["error"]["message"])[:300]
    if isinstance(err, dict) and isinstance(err.get("detail"), str):
      return err["detail"][:300]
  except ValueError:
    pass
  return raw[:300].decode(errors="replace")


ENDPOINT_FIELDS = ("api_key_env", "headers", "server", "timeout_s", "http_retries", "max_backoff_s",
                   "max_concurrency", "prices")


def from_config(block: Any, *, factory: type = ChatClient, **overrides: Any) -> ChatClient:
  """A client from a config block (ml_collections.ConfigDict or dict) holding `base_url`,
  `model` and any of ENDPOINT_FIELDS (configs/common.py `endpoint_fields`); `factory` is
  ChatClient or a subclass taking the same arguments plus `overrides`."""
  get = block.get if hasattr(block, "get") else lambda k, d=None: getattr(block, k, d)
  kwargs = {k: get(k) for k in ENDPOINT_FIELDS if get(k) is not None}
  for k in ("headers", "prices"):
    if k in kwargs:
      kwargs[k] = {m: dict(v) if hasattr(v, "items") else v for m, v in dict(kwargs[k]).items()}
  kwargs.update(overrides)
  if not get("base_url"):
    raise ValueError("an LLM endpoint config needs base_url (e.g. http://127.0.0.1:8000/v1)")
  return factory(get("base_url"), get("model", "mage"), **kwargs)
