"""HTTP client for a rollout engine that speaks vLLM's OpenAI-server protocol.

Works against vLLM (`vllm serve ... --logprobs-mode processed_logprobs`, started
with `VLLM_SERVER_DEV_MODE=1` for the control routes) and against the embedded
`mage_jax.engine.rollout_server.RolloutServer`. stdlib only (urllib), no jax.

Protocol facts, from vLLM's source (vllm-project/vllm):
- `vllm/entrypoints/openai/protocol.py` (CompletionRequest / CompletionResponse,
  ChatCompletionRequest / ChatCompletionResponse):
  * POST /v1/completions takes `prompt` as a list of token ids; `logprobs` is an
    integer (number of top alternatives, >= 0; the sampled token's log-prob is
    always in `token_logprobs`); `return_token_ids: true` adds per-choice
    `token_ids` (completion) and `prompt_token_ids` (prompt). Response choice:
    `text`, `finish_reason`, `logprobs: {tokens, token_logprobs, top_logprobs,
    text_offset}`.
  * POST /v1/chat/completions takes `logprobs: true` (+ optional integer
    `top_logprobs`) and `return_token_ids`; response choice `message.content`,
    `logprobs.content[i].logprob`, `token_ids`; the prompt ids are the
    response-level `prompt_token_ids`.
  * Both accept `seed`, `temperature`, `top_p`, `max_tokens`, `skip_special_tokens`.
- `vllm/entrypoints/serve/dev/rlhf/api_router.py`: POST /pause (query `mode` =
  abort | wait | keep; older servers: `wait_for_inflight_requests`), POST /resume,
  GET /is_paused -> {"is_paused": bool}. Mounted in dev mode.
- `vllm/entrypoints/serve/dev/rpc/api_router.py`: POST /collective_rpc, JSON body
  {method, args: [str], kwargs: {..}, timeout}; 400 on bad JSON or missing
  method; reply {"results": [...]} (one per worker) or an empty 200. Only with
  VLLM_SERVER_DEV_MODE=1.
- vllm-project/vllm PR #48284 (its repro): the disk reload is
  `{"method": "reload_weights", "kwargs": {"weights_path": <dir>,
  "is_checkpoint_format": true}}`.
- POST /reset_prefix_cache (dev cache router), GET /health (200 when the engine
  is alive), GET /v1/models ({"object": "list", "data": [{"id": ...}]}).

- `vllm/entrypoints/rl/online/api_router.py` (read in the 0.32.0 CPU build): POST /pause
  takes query `mode` (Literal abort | wait | keep, default abort; `clear_cache` deprecated)
  and nothing else; POST /update_weight_version with body {"new_version": str} (>= 0.29);
  GET /weight_info -> {"weight_version": str} (>= 0.29).
- `vllm/entrypoints/serve/dev/cache/api_router.py`: POST /reset_prefix_cache (query
  `reset_running_requests`, `reset_external`) -> {"success": bool}; false while blocks are
  still held, "callers may retry".
- `vllm/outputs.py` WeightVersionSpan {version, start, end}: output tokens [start, end) were
  sampled by weights labelled `version`; 0.33 puts a per-choice `weight_versions` list on
  completions (read here when present; 0.32 has it only on its token-in-token-out route).

Version differences the client handles (DESIGN.md): requests sent while paused wait in a
queue on <= 0.32 and get HTTP 503 "Generation is paused" on >= 0.33, so a 503 is retried
with backoff for up to `paused_retry_s`; older servers read `wait_for_inflight_requests`
instead of `mode`, so `pause()` sends both. Fields a request leaves out take the server's
defaults from the model's generation_config.json (a stock Qwen3 sets top_k=20), so every
request sends `top_k=-1` and `min_p=0` explicitly. Minimum supported vLLM: 0.16 (`mode=`,
`reload_weights(weights_path, is_checkpoint_format)`); the version routes are used from 0.29
and skipped on a 404. `served_weights()` reads the embedded server's own GET /mage/weights
(vLLM has no path route) and returns None on a 404.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

# Errors that mean "no answer from the server" (dead, restarting, refused): retried.
# A read timeout is not retried: the request may still be running on the server.
_CONNECTION_ERRORS = (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead)


@dataclasses.dataclass
class Completion:
  text: str
  token_ids: list[int]
  logprobs: list[float]
  prompt_token_ids: list[int]
  finish_reason: str
  # vLLM >= 0.33: [(version, start, end)] spans of token_ids by the weights that sampled them
  weight_versions: list[tuple[str, int, int]] | None = None


class RolloutError(RuntimeError):
  """A rollout-engine request failed; the message names the URL/route and what went wrong."""


class RolloutClient:
  """`base_url` is the OpenAI base, e.g. "http://127.0.0.1:8000/v1"; the control
  routes (/health, /pause, ...) live at its root, as on vLLM."""

  def __init__(self, base_url: str, model: str, *, timeout: float = 300.0, retries: int = 2,
               backoff_s: float = 0.5, api_key: str = "EMPTY", paused_retry_s: float = 900.0,
               paused_backoff_max_s: float = 5.0):
    self.base_url = base_url.rstrip("/")
    self.root_url = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
    self.model, self.timeout, self.retries, self.backoff_s = model, timeout, retries, backoff_s
    self.api_key = api_key
    # HTTP 503 (vLLM >= 0.33 while paused for a weight sync): retried until this much time
    # has passed, the backoff doubling up to paused_backoff_max_s (or the server's Retry-After).
    self.paused_retry_s, self.paused_backoff_max_s = paused_retry_s, paused_backoff_max_s
    self.unavailable_retries = 0  # 503s retried so far (metrics, tests)

  # ---- transport ---------------------------------------------------------------------------------
  def _request(self, method: str, url: str, body: dict[str, Any] | None = None, *,
               timeout: float | None = None, allow_404: bool = False) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {self.api_key}"}
    if data is not None:
      headers["Content-Type"] = "application/json"
    last: Exception | None = None
    attempt, unavailable_since, wait_503 = 0, None, self.backoff_s
    while True:
      req = urllib.request.Request(url, data=data, method=method, headers=headers)
      try:
        with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
          raw = r.read()
        if not raw:
          return None
        try:
          return json.loads(raw)
        except json.JSONDecodeError as e:
          raise RolloutError(f"{method} {url}: response is not JSON ({e}): {raw[:200]!r}") from e
      except urllib.error.HTTPError as e:
        if allow_404 and e.code == 404:
          return None
        detail = e.read()[:500].decode(errors="replace")
        if e.code == 503:
          now = time.monotonic()
          unavailable_since = now if unavailable_since is None else unavailable_since
          if now - unavailable_since < self.paused_retry_s:
            self.unavailable_retries += 1
            time.sleep(min(_retry_after(e) or wait_503, self.paused_backoff_max_s))
            wait_503 = min(2 * wait_503, self.paused_backoff_max_s)
            continue
          raise RolloutError(f"{method} {url}: HTTP 503 for {now - unavailable_since:.0f} s "
                             f"(paused_retry_s={self.paused_retry_s:g}): {detail}") from e
        raise RolloutError(f"{method} {url}: HTTP {e.code}: {detail}") from e
      except urllib.error.URLError as e:  # connection refused, DNS, ... (HTTPError handled above)
        last = e
      except _CONNECTION_ERRORS as e:
        last = e
      except (socket.timeout, TimeoutError) as e:
        raise RolloutError(f"{method} {url}: no response within {timeout or self.timeout:.1f} s") from e
      if attempt >= self.retries:
        break
      time.sleep(self.backoff_s * 2 ** attempt)
      attempt += 1
    raise RolloutError(f"{method} {url}: no response after {self.retries + 1} attempt(s): "
                       f"{getattr(last, 'reason', last)}")

  def _post(self, route: str, body: dict[str, Any] | None = None, *, root: bool = False, **kw) -> Any:
    return self._request("POST", (self.root_url if root else self.base_url) + route,
                         {} if body is None else body, **kw)

  def _get(self, route: str, *, root: bool = False, **kw) -> Any:
    return self._request("GET", (self.root_url if root else self.base_url) + route, **kw)

  # ---- health ------------------------------------------------------------------------------------
  def health(self) -> bool:
    req = urllib.request.Request(self.root_url + "/health", method="GET")
    try:
      with urllib.request.urlopen(req, timeout=min(self.timeout, 10.0)) as r:
        return r.status == 200
    except (urllib.error.URLError, socket.timeout, TimeoutError, *_CONNECTION_ERRORS):
      return False

  def wait_ready(self, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
      if self.health():
        return
      time.sleep(0.2)
    raise RolloutError(f"GET {self.root_url}/health: server not ready within {timeout_s:.0f} s")

  def models(self) -> list[str]:
    resp = self._get("/models")
    return [m["id"] for m in _field(resp, "data", self.base_url + "/models")]

  # ---- generation --------------------------------------------------------------------------------
  def _sampling(self, max_tokens: int, temperature: float, top_p: float, seed: int | None) -> dict:
    # top_k / min_p explicit: left out, vLLM takes them from the model's generation_config.json.
    body = {"model": self.model, "max_tokens": int(max_tokens), "temperature": float(temperature),
            "top_p": float(top_p), "top_k": -1, "min_p": 0.0, "return_token_ids": True,
            "skip_special_tokens": False}
    if seed is not None:
      body["seed"] = int(seed)
    return body

  def complete(self, prompt_token_ids: list[int], *, max_tokens: int, temperature: float = 1.0,
               top_p: float = 1.0, seed: int | None = None) -> Completion:
    """POST /v1/completions with a token-id prompt; sampled-token log-probs and ids back."""
    url = self.base_url + "/completions"
    body = {**self._sampling(max_tokens, temperature, top_p, seed),
            # logprobs 0: the sampled tokens' log-probs without alternatives (which cost the
            # embedded server a forward pass)
            "prompt": [int(t) for t in prompt_token_ids], "logprobs": 0}
    resp = self._post("/completions", body)
    choice = _first_choice(resp, url)
    logprobs = _field(_field(choice, "logprobs", url), "token_logprobs", url + " choices[0].logprobs")
    prompt_ids = choice.get("prompt_token_ids") or (resp.get("prompt_token_ids") if isinstance(resp, dict) else None)
    return _completion(url, choice, text=choice.get("text"), logprobs=logprobs, prompt_ids=prompt_ids)

  def chat(self, messages: list[dict], *, max_tokens: int, temperature: float = 1.0,
           top_p: float = 1.0, seed: int | None = None) -> Completion:
    """POST /v1/chat/completions; the server renders the chat template."""
    url = self.base_url + "/chat/completions"
    body = {**self._sampling(max_tokens, temperature, top_p, seed), "messages": messages,
            "logprobs": True, "top_logprobs": 0}
    resp = self._post("/chat/completions", body)
    choice = _first_choice(resp, url)
    content = _field(_field(choice, "logprobs", url), "content", url + " choices[0].logprobs")
    if not isinstance(content, list):
      raise RolloutError(f"{url}: choices[0].logprobs.content is not a list")
    logprobs = [_field(c, "logprob", f"{url} choices[0].logprobs.content[{i}]") for i, c in enumerate(content)]
    message = _field(choice, "message", url)
    prompt_ids = resp.get("prompt_token_ids") or choice.get("prompt_token_ids")
    return _completion(url, choice, text=message.get("content") or "", logprobs=logprobs,
                       prompt_ids=prompt_ids)

  # ---- control (vLLM dev mode) -------------------------------------------------------------------
  def pause(self, mode: str = "wait") -> None:
    # Older vLLM reads only `wait_for_inflight_requests` (default false = abort in-flight
    # requests) and ignores `mode`; newer maps that flag to mode=wait. Send both.
    query = {"mode": mode}
    if mode == "wait":
      query["wait_for_inflight_requests"] = "true"
    self._post("/pause?" + urllib.parse.urlencode(query), root=True)

  def resume(self) -> None:
    self._post("/resume", root=True)

  def is_paused(self) -> bool:
    return bool(_field(self._get("/is_paused", root=True), "is_paused", self.root_url + "/is_paused"))

  def reset_prefix_cache(self, attempts: int = 5) -> None:
    """Raises if the server keeps answering {"success": false} (blocks still held)."""
    for attempt in range(attempts):
      resp = self._post("/reset_prefix_cache", root=True)
      if not isinstance(resp, dict) or resp.get("success", True):  # older servers: empty 200
        return
      time.sleep(self.backoff_s * 2 ** attempt)
    raise RolloutError(f"POST {self.root_url}/reset_prefix_cache: success=false {attempts} times "
                       "(blocks still held by running requests?)")

  def update_weight_version(self, version: str) -> bool:
    """Label the served weights (vLLM >= 0.29); False where the route does not exist."""
    resp = self._post("/update_weight_version", {"new_version": str(version)}, root=True,
                      allow_404=True)
    return resp is not None

  def weight_version(self) -> str | None:
    """The served weights' label (GET /weight_info, vLLM >= 0.29); None where there is no route."""
    resp = self._get("/weight_info", root=True, allow_404=True)
    return None if resp is None else _field(resp, "weight_version", self.root_url + "/weight_info")

  def collective_rpc(self, method: str, *, args: list | None = None, kwargs: dict | None = None,
                     timeout: float | None = None) -> Any:
    body: dict[str, Any] = {"method": method, "args": list(args or []), "kwargs": dict(kwargs or {})}
    if timeout is not None:
      body["timeout"] = timeout
    return self._post("/collective_rpc", body, root=True)

  def reload_weights(self, path: str) -> None:
    """Reload bf16 HF safetensors from `path` (a directory the server can read)."""
    self.collective_rpc("reload_weights", kwargs={"weights_path": path, "is_checkpoint_format": True})

  def served_weights(self) -> str | None:
    """The directory the embedded server serves; None where the route does not exist (vLLM)."""
    resp = self._get("/mage/weights", root=True, allow_404=True)
    return None if resp is None else resp.get("path")


# ---- response validation -------------------------------------------------------------------------
def _field(obj: Any, name: str, where: str) -> Any:
  if not isinstance(obj, dict) or obj.get(name) is None:
    raise RolloutError(f"{where}: malformed response, missing field {name!r}")
  return obj[name]


def _first_choice(resp: Any, url: str) -> dict:
  choices = _field(resp, "choices", url)
  if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
    raise RolloutError(f"{url}: malformed response, 'choices' is empty or not a list of objects")
  return choices[0]


def _int_list(value: Any, name: str, url: str) -> list[int]:
  if value is None:
    raise RolloutError(f"{url}: malformed response, missing field {name!r} "
                       "(the server must honour return_token_ids)")
  if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
    raise RolloutError(f"{url}: malformed response, {name!r} is not a list of integers")
  return value


def _retry_after(e: urllib.error.HTTPError) -> float | None:
  try:
    return max(0.0, float(e.headers.get("Retry-After", "")))
  except (TypeError, ValueError):
    return None


def _weight_versions(choice: dict, n: int, url: str) -> list[tuple[str, int, int]] | None:
  spans = choice.get("weight_versions")
  if spans is None:
    return None
  try:
    out = [(str(s["version"]), int(s["start"]), int(s["end"])) for s in spans]
  except (TypeError, KeyError, ValueError) as e:
    raise RolloutError(f"{url}: malformed response, choices[0].weight_versions: {e!r}") from e
  if out and (out[0][1] != 0 or out[-1][2] != n or any(a[2] != b[1] for a, b in zip(out, out[1:]))):
    raise RolloutError(f"{url}: malformed response, choices[0].weight_versions {out} do not tile "
                       f"the {n} completion tokens")
  return out


def _completion(url: str, choice: dict, *, text, logprobs, prompt_ids) -> Completion:
  token_ids = _int_list(choice.get("token_ids"), "choices[0].token_ids", url)
  prompt_ids = _int_list(prompt_ids, "prompt_token_ids", url)
  if not isinstance(logprobs, list) or not all(isinstance(x, (int, float)) for x in logprobs):
    raise RolloutError(f"{url}: malformed response, logprobs are not a list of numbers")
  if len(logprobs) != len(token_ids):
    raise RolloutError(f"{url}: malformed response, {len(logprobs)} logprobs for "
                       f"{len(token_ids)} token_ids (lengths must match)")
  if text is None:
    raise RolloutError(f"{url}: malformed response, missing field 'text'")
  return Completion(text=text, token_ids=token_ids, logprobs=[float(x) for x in logprobs],
                    prompt_token_ids=prompt_ids, finish_reason=str(choice.get("finish_reason") or ""),
                    weight_versions=_weight_versions(choice, len(token_ids), url))
