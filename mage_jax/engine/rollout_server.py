"""The embedded rollout server: vLLM's OpenAI-server protocol over an in-process mage_jax policy.

A `ThreadingHTTPServer` on loopback that answers the routes `RolloutClient`
uses (see rollout_client.py for the protocol facts and their vLLM sources):

  GET  /health, /v1/models, /is_paused
  POST /v1/completions        token-id (or text) prompt, `logprobs` int, `return_token_ids`
  POST /v1/chat/completions   messages rendered with the Qwen3 chat template; base64
                              `image_url` parts become images (Mage-VL only, else 400)
  POST /pause?mode=, /resume  vLLM's modes abort | wait | keep (default abort; see
                              engine/generate_batcher.py); while paused new requests wait
                              (vLLM <= 0.32) or, with vllm_behaviour="0.33", get HTTP 503
                              "Generation is paused"
  POST /reset_prefix_cache    drops the rows kept for prefix reuse (engine/prefix_cache.py)
                              before the next admission; {"success": true}, as vLLM
  POST /collective_rpc        method `reload_weights`, kwargs {weights_path} (or args[0]):
                              `api.load` the HF dir, then swap the policy atomically
  POST /update_weight_version {"new_version": str}; GET /weight_info -> {"weight_version"}
plus one route of ours (vLLM has none): GET /mage/weights -> {"path", "model"}.
With vllm_behaviour="0.33" each choice also carries `weight_versions`
[{version, start, end}] (the label of the weights that sampled it), as vLLM 0.33 does.
Concurrent requests are batched continuously: they join and leave a running decode
batch over a KV cache of slots (engine/generate_batcher.py).

Log-probs are those of the processed distribution that was sampled from
(`models.sampling`: log-softmax of logits / temperature within the top-p
nucleus), like vLLM's `--logprobs-mode processed_logprobs`; temperature 0 is
greedy with the raw log-softmax. `top_logprobs` (chat) and `logprobs: k` (completions) give
the k most likely alternatives per token, and `stream: true` answers in server-sent events
(engine/openai_stream.py); errors are OpenAI's shape {"error": {"message", "type", "param",
"code"}}; GET /version answers like vLLM's, so clients send the vLLM-only fields. Slot rows, prompt lengths and the KV-cache length are
padded to buckets so a server compiles a handful of shapes, not one per request. A prompt that
starts like a live or recently finished request's prompt + completion prefills only the rest
(prefix reuse, engine/prefix_cache.py), as vLLM's automatic prefix caching.
"""
from __future__ import annotations

import base64
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import io
import json
import os
import random
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit
import uuid

import numpy as np

from mage_jax import api
from mage_jax.data.tokenizer import load_tokenizer
from mage_jax.engine import openai_stream
from mage_jax.engine.address import learner_url
from mage_jax.engine.generate_batcher import GenerateBatcher, Job, Paused
from mage_jax.models.config import IM_END_ID
from mage_jax.models.config import MageVLConfig

IMAGE_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"


class RequestError(ValueError):
  """A bad request: answered with `status`, the message and the offending field (`param`)."""

  def __init__(self, message: str, status: int = 400, param: str | None = None):
    super().__init__(message)
    self.status, self.param = status, param


class EventStream(list):
  """A response sent as server-sent events (a list of chunk dicts, then `data: [DONE]`)."""


# ---- chat rendering ------------------------------------------------------------------------------
def _decode_image(url: str, where: str) -> np.ndarray:
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  if not url.startswith("data:") or ";base64," not in url:
    raise RequestError(f"{where}: only base64 data URLs (data:image/...;base64,...) are supported")
  try:
    raw = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))
  except Exception as e:  # noqa: BLE001 - any decode failure is the client's bad input
    raise RequestError(f"{where}: image does not decode ({e})") from e


def flatten_messages(messages: Any) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
  """OpenAI messages -> messages with string content (images as vision blocks) + images in order."""
  if not isinstance(messages, list) or not messages:
    raise RequestError("'messages' must be a non-empty list")
  out, images = [], []
  for i, m in enumerate(messages):
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
      raise RequestError(f"messages[{i}]: needs a 'role' string")
    content = m.get("content")
    if content is None:
      content = ""
    if isinstance(content, list):
      pieces = []
      for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
          pieces.append(str(part.get("text", "")))
        elif kind == "image_url":
          url = (part.get("image_url") or {}).get("url", "")
          images.append(_decode_image(url, f"messages[{i}].content[{j}].image_url"))
          pieces.append(IMAGE_BLOCK)
        else:
          raise RequestError(f"messages[{i}].content[{j}]: unsupported part type {kind!r}")
      content = "".join(pieces)
    elif not isinstance(content, str):
      raise RequestError(f"messages[{i}].content: must be a string or a list of parts")
    out.append({**m, "content": content})
  return out, images


def render_chat(template: str, messages: list[dict[str, Any]], **kwargs) -> str:
  """The chat template rendered as transformers' apply_chat_template does (sandboxed jinja)."""
  import jinja2.ext   # only to render a chat template (start-up cost)
  from jinja2.sandbox import ImmutableSandboxedEnvironment   # only to render a chat template (start-up cost)
  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[jinja2.ext.loopcontrols])
  env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
  return env.from_string(template).render(messages=messages, add_generation_prompt=True, **kwargs)


# ---- the server ----------------------------------------------------------------------------------
class RolloutServer:
  def __init__(self, policy_or_path, *, host: str = "127.0.0.1", port: int = 0, model_name: str = "mage",
               load_kwargs: dict[str, Any] | None = None, vllm_behaviour: str = "0.32",
               max_batch: int = 32):
    if vllm_behaviour not in ("0.32", "0.33"):
      raise ValueError(f"vllm_behaviour={vllm_behaviour!r}: '0.32' (requests wait while paused) or "
                       "'0.33' (HTTP 503 while paused, per-choice weight_versions)")
    self.model_name, self.vllm_behaviour = model_name, vllm_behaviour
    self.load_kwargs = dict(load_kwargs or {})
    if isinstance(policy_or_path, str):
      self._policy, self._path = self._load(policy_or_path), os.path.abspath(policy_or_path)
    else:
      self._policy, self._path = policy_or_path, None
    self._label = "0"                 # vLLM's weight version label
    self.batcher = GenerateBatcher(lambda: (self._policy, self._label), max_batch=max_batch,
                                   reject_while_paused=vllm_behaviour == "0.33")
    self._template: str | None = None
    self.httpd = ThreadingHTTPServer((host, port), _handler(self))
    self.httpd.daemon_threads = True
    # The URL this host uses; other hosts reach a non-loopback bind at rl.engine_advertise_url.
    self.url = learner_url(host, self.httpd.server_address[1])
    self._thread: threading.Thread | None = None

  # ---- lifecycle ---------------------------------------------------------------------------------
  def start(self) -> "RolloutServer":
    self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="rollout-server")
    self._thread.start()
    return self

  def stop(self) -> None:
    self.batcher.stop()  # release waiters so their threads can finish
    self.httpd.shutdown()
    self.httpd.server_close()

  def __enter__(self) -> "RolloutServer":
    return self.start() if self._thread is None else self

  def __exit__(self, *exc) -> None:
    self.stop()

  # ---- weights -----------------------------------------------------------------------------------
  def _load(self, path: str):
    return api.load(path, **self.load_kwargs)

  def reload_weights(self, path: str) -> None:
    if not os.path.isdir(path):
      raise RequestError(f"reload_weights: {path} is not a directory", status=500)
    try:
      policy = self._load(path)
    except Exception as e:  # noqa: BLE001 - reported to the caller, the old weights stay live
      raise RequestError(f"reload_weights({path}) failed: {type(e).__name__}: {e}", status=500) from e
    with self.batcher.cond:  # a batch snapshots the policy under this lock: the swap is atomic
      self._policy, self._path, self._template = policy, os.path.abspath(path), None

  @property
  def served_path(self) -> str | None:
    return self._path

  # ---- pause and weight labels ------------------------------------------------------------------
  def pause(self, mode: str = "abort") -> None:
    try:
      self.batcher.pause(mode)
    except ValueError as e:
      raise RequestError(str(e), status=422) from e

  def resume(self) -> None:
    self.batcher.resume()

  @property
  def paused(self) -> bool:
    return self.batcher.paused

  @property
  def _inflight(self) -> int:
    return self.batcher.inflight

  def update_weight_version(self, body: dict[str, Any]) -> dict[str, Any]:
    version = body.get("new_version")
    if not isinstance(version, str):
      raise RequestError("update_weight_version needs body {\"new_version\": <string>}", status=422)
    with self.batcher.cond:
      self._label = version
    return {"success": True, "new_version": version}

  # ---- generation --------------------------------------------------------------------------------
  def _chat_template(self, policy) -> str:
    if self._template is None:
      folder = self._path or ""
      file = os.path.join(folder, "chat_template.jinja")
      if folder and os.path.isfile(file):
        with open(file, encoding="utf-8") as f:
          self._template = f.read()
      else:
        self._template = policy._tokenizer().chat_template or load_tokenizer("").chat_template
    return self._template

  def generate(self, body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    if body.get("model") not in (None, self.model_name):
      raise RequestError(f"The model `{body['model']}` does not exist (serving `{self.model_name}`).",
                         status=404)
    max_tokens = _int_field(body, "max_tokens", 16)
    if max_tokens < 1:
      raise RequestError("'max_tokens' must be >= 1")
    temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
    top_p = float(body.get("top_p", 1.0) if body.get("top_p") is not None else 1.0)
    if temperature < 0 or not 0 < top_p <= 1:
      raise RequestError(f"temperature={temperature} must be >= 0 and top_p={top_p} in (0, 1]")
    seed = body.get("seed")
    seed = random.getrandbits(31) if seed is None else int(seed)
    k = _top_k_field(body, chat)
    if body.get("n") not in (None, 1):
      raise RequestError("'n' > 1 is not supported here (one choice per request)", param="n")
    stream = body.get("stream")
    if stream not in (None, True, False):
      raise RequestError(f"'stream' must be a boolean, got {stream!r}", param="stream")
    if body.get("stream_options") is not None and not stream:
      raise RequestError("'stream_options' is only allowed when 'stream' is true", param="stream_options")
    policy = self._policy
    prompt, images = self._prompt(policy, body, chat=chat)
    vision = policy._vision_inputs(prompt, images)[1] if images else {}
    job = Job(prompt, max_tokens, temperature, top_p, seed, vision)
    try:
      self.batcher.submit(job)
    except Paused as e:
      raise RequestError(str(e), status=503) from e
    top = openai_stream.top_alternatives(policy, prompt, images, job.tokens, temperature, top_p, k) if k else None
    resp = self._response(policy, body, chat, prompt, job, top)
    if not stream:
      return resp
    return EventStream(self._stream(policy, body, chat, job, resp))

  def _stream(self, policy, body, chat: bool, job: Job, resp: dict[str, Any]):
    tok = policy._tokenizer()
    skip = bool(body.get("skip_special_tokens", True))
    visible = job.tokens[:-1] if job.finish == "stop" else job.tokens
    deltas = openai_stream.text_deltas(lambda ids: tok.decode(ids, skip_special_tokens=skip), visible)
    deltas += [""] * (len(job.tokens) - len(visible))
    choice = resp["choices"][0]
    per_token = None
    if chat and choice.get("logprobs"):
      per_token = choice["logprobs"]["content"]
    elif not chat and choice.get("logprobs"):
      lp = choice["logprobs"]
      per_token = [{"tokens": [lp["tokens"][i]], "token_logprobs": [lp["token_logprobs"][i]],
                    "text_offset": [lp["text_offset"][i]],
                    "top_logprobs": None if lp["top_logprobs"] is None else [lp["top_logprobs"][i]]}
                   for i in range(len(lp["tokens"]))]
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return openai_stream.stream_chunks(resp, deltas, per_token, chat=chat, include_usage=include_usage)

  def _prompt(self, policy, body: dict[str, Any], *, chat: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    if chat:
      messages, images = flatten_messages(body.get("messages"))
      if images and not isinstance(policy.cfg, MageVLConfig):
        raise RequestError("image_url parts need a Mage-VL model; this server runs text-only Qwen3")
      kwargs = body.get("chat_template_kwargs") or {}
      text = render_chat(self._chat_template(policy), messages, **kwargs)
      prompt = policy.encode(text)
    else:
      images, prompt = [], body.get("prompt")
      if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]  # a batch of one
      if isinstance(prompt, str):
        prompt = policy.encode(prompt)
      elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        prompt = np.asarray(prompt, np.int32)
      else:
        raise RequestError("'prompt' must be a string or a non-empty list of token ids (one prompt)")
    vocab = policy.cfg.text.vocab_size if isinstance(policy.cfg, MageVLConfig) else policy.cfg.vocab_size
    if len(prompt) == 0 or prompt.min() < 0 or prompt.max() >= vocab:
      raise RequestError(f"prompt token ids must be in [0, {vocab}) and non-empty")
    if images:
      try:
        prompt, _ = policy._vision_inputs(prompt, images)  # expand <|image_pad|> as the model sees it
      except ValueError as e:
        raise RequestError(str(e)) from e
    return prompt, images

  def _response(self, policy, body, chat: bool, prompt: np.ndarray, job: Job,
                top: list[list[tuple[int, float]]] | None) -> dict[str, Any]:
    tokens, logprobs, finish = job.tokens, job.logprobs, job.finish
    tok = policy._tokenizer()
    skip = bool(body.get("skip_special_tokens", True))
    text = tok.decode(tokens[:-1] if finish == "stop" else tokens, skip_special_tokens=skip)
    pieces = [tok.decode([t], skip_special_tokens=False) for t in tokens]
    usage = {"prompt_tokens": len(prompt), "completion_tokens": len(tokens),
             "total_tokens": len(prompt) + len(tokens)}
    want_ids = bool(body.get("return_token_ids"))
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish,
                              "stop_reason": None if finish != "stop" else IM_END_ID}
    resp: dict[str, Any] = {"created": int(time.time()), "model": self.model_name, "usage": usage}
    if chat:
      resp.update(id=f"chatcmpl-{uuid.uuid4().hex}", object="chat.completion")
      choice["message"] = {"role": "assistant", "content": text}
      if body.get("logprobs"):
        def alts(i):
          return [{"token": (a := tok.decode([t], skip_special_tokens=False)), "logprob": v,
                   "bytes": list(a.encode())} for t, v in (top[i] if top else [])]
        choice["logprobs"] = {"content": [
            {"token": p, "logprob": lp, "bytes": list(p.encode()), "top_logprobs": alts(i)}
            for i, (p, lp) in enumerate(zip(pieces, logprobs))]}
      if want_ids:
        resp["prompt_token_ids"] = [int(t) for t in prompt]
    else:
      resp.update(id=f"cmpl-{uuid.uuid4().hex}", object="text_completion")
      choice["text"] = text
      if body.get("logprobs") is not None:
        offsets = np.cumsum([0] + [len(p) for p in pieces[:-1]]).tolist() if pieces else []
        choice["logprobs"] = {"tokens": pieces, "token_logprobs": logprobs, "text_offset": offsets,
                              # vLLM: the sampled token, plus k alternatives when logprobs=k > 0
                              "top_logprobs": [
                                  {p: lp, **{tok.decode([t], skip_special_tokens=False): v for t, v in
                                             (top[i] if top else [])}}
                                  for i, (p, lp) in enumerate(zip(pieces, logprobs))]}
      if want_ids:
        choice["prompt_token_ids"] = [int(t) for t in prompt]
    if want_ids:
      choice["token_ids"] = tokens
    if self.vllm_behaviour == "0.33" and finish != "abort":
      choice["weight_versions"] = [{"version": job.label, "start": 0, "end": len(tokens)}]
    resp["choices"] = [choice]
    return resp

  # ---- control routes ----------------------------------------------------------------------------
  def collective_rpc(self, body: dict[str, Any]) -> dict[str, Any]:
    method = body.get("method")
    if method is None:
      raise RequestError("Missing 'method' in request body")
    if method != "reload_weights":
      raise RequestError(f"collective_rpc method {method!r} is not supported here (only reload_weights)")
    kwargs, args = body.get("kwargs") or {}, body.get("args") or []
    path = kwargs.get("weights_path") or (args[0] if args else None)
    if not path:
      raise RequestError("reload_weights needs kwargs.weights_path (or args[0]): an HF directory")
    self.reload_weights(str(path))
    return {"results": [None]}


def _top_k_field(body: dict[str, Any], chat: bool) -> int:
  """How many alternatives per token: chat `top_logprobs` (needs `logprobs: true`), completions
  `logprobs` (an int); at most openai_stream.MAX_TOP_LOGPROBS."""
  name = "top_logprobs" if chat else "logprobs"
  k = _int_field(body, name, 0)
  if chat and k and not body.get("logprobs"):
    raise RequestError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
  if not 0 <= k <= openai_stream.MAX_TOP_LOGPROBS:
    raise RequestError(f"'{name}' must be in [0, {openai_stream.MAX_TOP_LOGPROBS}], got {k}", param=name)
  return k


def _int_field(body: dict[str, Any], name: str, default: int) -> int:
  value = body.get(name, default)
  if value is None:
    return default
  if not isinstance(value, int) or isinstance(value, bool):
    raise RequestError(f"'{name}' must be an integer, got {value!r}", param=name)
  return value


def _handler(server: RolloutServer):
  class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
      pass

    def _send(self, code: int, obj: Any = None) -> None:
      body = b"" if obj is None else json.dumps(obj).encode()
      self.send_response(code)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      self.wfile.write(body)

    def _error(self, code: int, message: str, param: str | None = None) -> None:
      kind = {400: "BadRequestError", 404: "NotFoundError", 422: "UnprocessableEntityError",
              503: "ServiceUnavailableError"}.get(code, "InternalServerError")
      self._send(code, {"error": {"message": message, "type": kind, "param": param, "code": code}})

    def _send_events(self, chunks: EventStream) -> None:
      # no Content-Length: the body ends when the connection closes, as a streamed reply may
      self.send_response(200)
      self.send_header("Content-Type", "text/event-stream")
      self.send_header("Cache-Control", "no-cache")
      self.send_header("Connection", "close")
      self.end_headers()
      self.close_connection = True
      for c in chunks:
        self.wfile.write(openai_stream.sse(c))
      self.wfile.write(openai_stream.sse(b"[DONE]"))
      self.wfile.flush()

    def _json_body(self) -> dict[str, Any]:
      raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
      if not raw:
        return {}
      try:
        body = json.loads(raw)
      except json.JSONDecodeError as e:
        raise RequestError(f"JSON decode error: {e}") from e
      if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
      return body

    def _dispatch(self, routes: dict[str, Any]) -> None:
      route = urlsplit(self.path).path.rstrip("/") or "/"
      try:
        body = self._json_body() if self.command == "POST" else {}
        if route not in routes:
          return self._error(404, f"{self.command} {route}: no such route")
        code, obj = routes[route](body)
        if isinstance(obj, EventStream):
          return self._send_events(obj)
        self._send(code, obj)
      except RequestError as e:
        self._error(e.status, str(e), e.param)
      except Exception as e:  # noqa: BLE001 - a server bug must still answer, not hang the client
        self._error(500, f"{type(e).__name__}: {e}")

    def do_GET(self):
      self._dispatch({
          "/health": lambda b: (200, None),
          # the vLLM release whose protocol this server speaks (clients then send vLLM's fields)
          "/version": lambda b: (200, {"version": server.vllm_behaviour + ".0", "server": "mage_jax"}),
          "/v1/models": lambda b: (200, {"object": "list", "data": [
              {"id": server.model_name, "object": "model", "owned_by": "mage_jax",
               "root": server.served_path}]}),
          "/is_paused": lambda b: (200, {"is_paused": server.paused}),
          "/weight_info": lambda b: (200, {"weight_version": server._label}),
          "/mage/weights": lambda b: (200, {"path": server.served_path, "model": server.model_name}),
      })

    def do_POST(self):
      query = parse_qs(urlsplit(self.path).query)
      mode = query.get("mode", ["abort"])[-1]
      self._dispatch({
          "/v1/completions": lambda b: (200, server.generate(b, chat=False)),
          "/v1/chat/completions": lambda b: (200, server.generate(b, chat=True)),
          "/pause": lambda b: (server.pause(mode), (200, {"status": "paused"}))[1],
          "/resume": lambda b: (server.resume(), (200, {"status": "resumed"}))[1],
          "/reset_prefix_cache": lambda b: (200, {"success": server.batcher.reset_prefix_cache()}),
          "/collective_rpc": lambda b: (200, server.collective_rpc(b)),
          "/update_weight_version": lambda b: (200, server.update_weight_version(b)),
      })

  return Handler
