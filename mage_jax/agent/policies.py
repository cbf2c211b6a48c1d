"""Policies: scripted (reference solutions), an OpenAI-compatible chat endpoint, and a
mage_jax checkpoint run in process through the model's generate.
"""
from __future__ import annotations

import base64
import io
import json
import re
import urllib.request
from typing import Any, Sequence

import numpy as np
from PIL import Image

from mage_jax.actions import schema as tools
from mage_jax.agent.episode import PolicyOutput, PolicyRequest
from mage_jax.agent.tasks.package import CHANNELS


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


class OpenAIChatPolicy:
  """Any OpenAI-compatible /v1/chat/completions endpoint (vLLM, the embedded rollout server).

  Asks for sampled-token log-probs and (vLLM's `return_token_ids`) the prompt and
  completion token ids; records them when the server returns them. The server
  applies its own chat template to the messages, so the recorded prompt ids are
  the server's, not ours.
  """

  def __init__(self, base_url: str, model: str, *, api_key: str = "EMPTY", max_tokens: int = 1024,
               temperature: float = 1.0, top_p: float = 1.0, timeout: float = 300.0,
               tokenizer=None, extra_body: dict[str, Any] | None = None):
    self.url = base_url.rstrip("/") + "/chat/completions"
    self.model, self.api_key, self.max_tokens = model, api_key, max_tokens
    self.temperature, self.top_p, self.timeout = temperature, top_p, timeout
    self.extra_body = extra_body or {}
    self._tok = tokenizer

  def _tokenizer(self):
    if self._tok is None:
      from mage_jax.data.tokenizer import load_tokenizer
      self._tok = load_tokenizer("")
    return self._tok

  def request_body(self, request: PolicyRequest) -> dict[str, Any]:
    text = self._tokenizer().decode([int(i) for i in request.prompt_tokens], skip_special_tokens=False)
    return {"model": self.model, "messages": prompt_to_messages(text, request.images),
            "max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p,
            "logprobs": True, "return_token_ids": True, "skip_special_tokens": False,
            **self.extra_body}

  def act(self, request: PolicyRequest) -> PolicyOutput:
    body = json.dumps(self.request_body(request)).encode()
    req = urllib.request.Request(self.url, data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"})
    with urllib.request.urlopen(req, timeout=self.timeout) as r:
      resp = json.loads(r.read())
    choice = resp["choices"][0]
    msg = choice["message"]
    text = msg.get("content") or ""
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if reasoning and "<think>" not in text:  # a server-side reasoning parser split the think part off
      text = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + text.lstrip("\n")
    logprobs = None
    if choice.get("logprobs") and choice["logprobs"].get("content") is not None:
      logprobs = [float(c["logprob"]) for c in choice["logprobs"]["content"]]
    usage = resp.get("usage") or {}
    return PolicyOutput(text=text, prompt_ids=resp.get("prompt_token_ids") or choice.get("prompt_token_ids"),
                        completion_ids=choice.get("token_ids"), logprobs=logprobs,
                        output_tokens=usage.get("completion_tokens"))


class CheckpointPolicy:
  """A mage_jax checkpoint in process: `api.Policy.generate` on the exact rendered prompt."""

  def __init__(self, policy, *, max_new_tokens: int = 512, greedy: bool = True, temperature: float = 1.0,
               top_p: float = 1.0, seed: int = 0):
    if isinstance(policy, str):
      from mage_jax import api
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
