"""Policies: scripted (reference solutions), an OpenAI-compatible chat endpoint, and a
mage_jax checkpoint run in process through the model's generate.
"""
from __future__ import annotations

import base64
import io
import json
import re
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.agent.episode import Policy, PolicyOutput, PolicyRequest
from mage_jax.data.tokenizer import load_tokenizer
from mage_jax.llm.client import ChatClient
from mage_jax.llm.client import from_config
from mage_jax.tasks.package import CHANNELS


class ScriptedPolicy:
  """Replays a task's reference (or near-miss) calls, resolving '@app.widget' coordinates.

  `which`: "reference" (the first), "reference:<channel>" (the first reference of that channel,
  e.g. "reference:gui" for the channel ablation; a task without one fails at step 1), "near_miss".
  """

  def __init__(self, which: str = "reference"):
    kind, _, channel = which.partition(":")
    if kind not in ("reference", "near_miss") or (channel and (kind != "reference" or channel not in CHANNELS)):
      raise ValueError(f"policy.which={which!r}: expected reference, reference:<{'|'.join(CHANNELS)}> or near_miss")
    self.which, self.channel = kind, channel

  def act(self, request: PolicyRequest) -> PolicyOutput:
    if self.channel:
      calls = request.task.reference_for(self.channel) or []
    else:
      calls = getattr(request.task, self.which) or []
    i = request.t - 1
    if i >= len(calls):
      call = {"name": tools.COMPUTER_USE, "arguments": {"action": "terminate", "status": "failure"},
              "action": "Stop: the script is exhausted"}
    else:
      call = calls[i]
    args = request.resolve(call["arguments"])
    summary = call.get("action") or f"{call['name']} {args.get('action', '')}".strip()
    think = call.get("think") or f"Step {request.t} of the scripted solution: {summary}."
    return PolicyOutput(text=tools.format_response(think, summary, call["name"], args))


def wrong_call(call: dict[str, Any]) -> dict[str, Any]:
  """A slip in place of `call` (the noisy scripted student and teachers): a bash command becomes
  the no-op `true`, a click lands on the screen corner, typed text is reversed."""
  args = dict(call.get("arguments") or {})
  if call["name"] == "bash":
    return {"name": "bash", "arguments": {"command": "true"}, "action": "Run `true` (a wrong step)"}
  if "coordinate" in args:
    args["coordinate"] = [0, 0]
  elif "text" in args:
    args["text"] = args["text"][::-1] + "x"
  return dict(call, arguments=args, action="A wrong step")


# ---- prompt tokens -> chat messages ------------------------------------------------------------
_TURN_RE = re.compile(r"<\|im_start\|>(system|user|assistant)\n(.*?)(?:<\|im_end\|>\n?|$)", re.DOTALL)
_IMAGE_RE = re.compile(r"<\|vision_start\|>(?:<\|image_pad\|>)+<\|vision_end\|>")


def _png_data_url(image: np.ndarray) -> str:
  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format="PNG")
  return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def prompt_to_messages(prompt_text: str, images: Sequence[np.ndarray]) -> list[dict[str, Any]]:
  """The rendered prompt (decoded, special tokens kept) as OpenAI chat messages.

  Turns are split at <|im_start|>role; each image block becomes an image_url
  part (base64 PNG) in order. The trailing empty assistant turn is dropped.
  """
  messages, k = [], 0
  for role, body in _TURN_RE.findall(prompt_text):
    if role == "assistant" and not body:
      continue
    pieces, pos, parts = _IMAGE_RE.split(body), 0, []
    for j, piece in enumerate(pieces):
      if piece:
        parts.append({"type": "text", "text": piece})
      if j < len(pieces) - 1:
        if k >= len(images):
          raise ValueError(f"prompt has more image blocks than the {len(images)} images given")
        parts.append({"type": "image_url", "image_url": {"url": _png_data_url(images[k])}})
        k += 1
    if all(p["type"] == "text" for p in parts):
      messages.append({"role": role, "content": "".join(p["text"] for p in parts)})
    else:
      messages.append({"role": role, "content": parts})
  if k != len(images):
    raise ValueError(f"prompt has {k} image blocks but {len(images)} images")
  return messages


TOOL_PROTOCOLS = ("text", "native")


class OpenAIChatPolicy:
  """Any OpenAI-compatible /v1/chat/completions endpoint (a hosted API, vLLM, the embedded
  rollout server) through the shared client (mage_jax/llm/client.py: auth from the env var
  `api_key_env`, retries, concurrency, usage).

  Asks for sampled-token log-probs; from vLLM only (the client detects it) also the prompt and
  completion token ids (`return_token_ids`) with special tokens kept, fields a strict hosted API
  rejects. The server applies its own chat template to the messages, so the recorded prompt ids
  are the server's, not ours. `tool_protocol`: "text" (the tools are declared in the rendered
  system turn and the model writes <tool_call> in its text, as the student does) or "native"
  (the episode's tool schemas go in `tools` and the reply's `tool_calls` are written back as
  the text protocol, for endpoints that answer tools only natively).
  """

  VLLM_FIELDS = {"return_token_ids": True, "skip_special_tokens": False}

  def __init__(self, base_url: str, model: str, *, max_tokens: int = 1024, temperature: float = 1.0,
               top_p: float = 1.0, tokenizer=None, extra_body: dict[str, Any] | None = None,
               tool_protocol: str = "text", client=None, **endpoint: Any):
    if tool_protocol not in TOOL_PROTOCOLS:
      raise ValueError(f"policy.tool_protocol={tool_protocol!r}: expected one of {TOOL_PROTOCOLS}")
    self.client = client or ChatClient(base_url, model, **endpoint)
    self.model, self.max_tokens = model, max_tokens
    self.temperature, self.top_p = temperature, top_p
    self.extra_body, self.tool_protocol = extra_body or {}, tool_protocol
    self._tok = tokenizer

  def _tokenizer(self):
    if self._tok is None:
      self._tok = load_tokenizer("")
    return self._tok

  def messages(self, request: PolicyRequest) -> list[dict[str, Any]]:
    text = self._tokenizer().decode([int(i) for i in request.prompt_tokens], skip_special_tokens=False)
    return prompt_to_messages(text, request.images)

  def request_fields(self, request: PolicyRequest) -> dict[str, Any]:
    """The standard OpenAI fields of one request (the vLLM-only ones are VLLM_FIELDS)."""
    fields = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p,
              "logprobs": True, **self.extra_body}
    if self.tool_protocol == "native":
      fields["tools"] = request.episode.tools
    return fields

  def act(self, request: PolicyRequest) -> PolicyOutput:
    reply = self.client.complete(self.messages(request), where=f"policy (step {request.t}): ",
                                 vllm_fields=self.VLLM_FIELDS, **self.request_fields(request))
    choice, msg, resp = reply.choice, reply.message, reply.response
    text = reply.text
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if reasoning and "<think>" not in text:  # a server-side reasoning parser split the think part off
      text = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + text.lstrip("\n")
    text += native_calls_as_text(msg.get("tool_calls"))
    logprobs = None
    if choice.get("logprobs") and choice["logprobs"].get("content") is not None:
      logprobs = [float(c["logprob"]) for c in choice["logprobs"]["content"]]
    return PolicyOutput(text=text, prompt_ids=resp.get("prompt_token_ids") or choice.get("prompt_token_ids"),
                        completion_ids=choice.get("token_ids"), logprobs=logprobs,
                        output_tokens=reply.usage.completion_tokens, prompt_tokens=reply.usage.prompt_tokens,
                        dollars=reply.dollars)


def native_calls_as_text(tool_calls: Any) -> str:
  """A reply's native `tool_calls` written as the text protocol (<tool_call> JSON lines); an
  argument string that is not JSON is kept verbatim, so the parser reports it as a bad call."""
  out = ""
  for call in tool_calls or []:
    fn = call.get("function") or {}
    try:
      args = json.loads(fn.get("arguments") or "{}")
      line = tools.tool_call_json(str(fn.get("name", "")), args)
    except (json.JSONDecodeError, TypeError):
      line = '{"name": "' + str(fn.get("name", "")) + '", "arguments": ' + str(fn.get("arguments")) + "}"
    out += "\n<tool_call>\n" + line + "\n</tool_call>"
  return out


class CheckpointPolicy:
  """A mage_jax checkpoint in process: `api.Policy.generate` on the exact rendered prompt."""

  def __init__(self, policy, *, max_new_tokens: int = 512, greedy: bool = True, temperature: float = 1.0,
               top_p: float = 1.0, seed: int = 0):
    if isinstance(policy, str):
      from mage_jax import api   # loads JAX and the model: only for an in-process checkpoint
      policy = api.load(policy)
    self.policy, self.max_new_tokens, self.greedy = policy, max_new_tokens, greedy
    self.temperature, self.top_p, self.seed = temperature, top_p, seed
    self._calls = 0

  def act(self, request: PolicyRequest) -> PolicyOutput:
    self._calls += 1
    gen = self.policy.generate(request.prompt_tokens, self.max_new_tokens, images=request.images or None,
                               greedy=self.greedy, temperature=self.temperature, top_p=self.top_p,
                               seed=self.seed + self._calls)
    ids = [int(i) for i in gen.tokens]
    text = self.policy.decode([i for i in ids if i != 151645])
    return PolicyOutput(text=text, prompt_ids=[int(i) for i in request.prompt_tokens], completion_ids=ids,
                        logprobs=[float(x) for x in gen.logprobs], output_tokens=len(ids))


CONFIG_KINDS = ("scripted", "openai", "checkpoint")


def factory_from_config(p) -> Callable[[Any], Policy]:
  """A config's `policy` section (configs/eval.py) -> task -> Policy, for the kinds this floor
  builds: scripted (the reference), openai (an endpoint; one client, so its concurrency limit
  spans the episodes running at once), checkpoint (an HF directory run in this process)."""
  if p.kind == "scripted":
    return lambda task: ScriptedPolicy(p.which)
  if p.kind == "openai":
    shared = from_config(p)
    return lambda task: OpenAIChatPolicy(p.base_url, p.model, max_tokens=p.max_tokens,
                                         temperature=p.temperature, top_p=p.top_p,
                                         tool_protocol=p.get("tool_protocol", "text"), client=shared)
  if p.kind == "checkpoint":
    if not p.checkpoint:
      raise ValueError("policy.kind=checkpoint needs --config.policy.checkpoint=<HF dir>")
    shared = CheckpointPolicy(p.checkpoint, max_new_tokens=p.max_tokens, greedy=p.greedy,
                              temperature=p.temperature, top_p=p.top_p)
    return lambda task: shared
  raise ValueError(f"unknown policy.kind {p.kind!r}; expected {' | '.join(CONFIG_KINDS)}")
