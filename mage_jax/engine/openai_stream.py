"""What the embedded rollout server adds for the official `openai` SDK: `top_logprobs`
alternatives and server-sent-event streaming, in vLLM's response shapes.

top_logprobs: the slot engine returns only the sampled token's log-prob, so the alternatives
come from one teacher-forced forward pass (`api.Policy.logits`) over prompt + completion after
decoding (padded to a power-of-two length), processed as the sampler processed them (temperature, then the top-p nucleus; raw
log-softmax at temperature 0), like vLLM's `--logprobs-mode processed_logprobs`. Tokens outside
the nucleus have log-prob -inf, reported as -9999.0 as vLLM does.

Streaming: the completion is decoded first, then sent as vLLM's chunks (one per token: a first
chat chunk with the role, text deltas whose concatenation is the non-streamed text, a last
chunk with `finish_reason`, a usage chunk when `stream_options.include_usage`, then
`data: [DONE]`). So a streamed answer equals the plain one, but its first token arrives only
when the whole completion is done.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np

from mage_jax.engine.generate_batcher import bucket

MAX_TOP_LOGPROBS = 20   # OpenAI's and vLLM's default cap
NEG_INF_LOGPROB = -9999.0


def processed_logprobs(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
  """[T, V] logits -> [T, V] log-probs of the distribution sampled from (models.sampling's
  process_logits: temperature, then the smallest prefix by probability reaching top_p)."""
  x = logits.astype(np.float64) / (temperature if temperature > 0 else 1.0)
  if temperature > 0 and top_p < 1.0:
    order = np.argsort(-x, axis=-1, kind="stable")
    sorted_x = np.take_along_axis(x, order, -1)
    p = np.exp(sorted_x - sorted_x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    before = np.cumsum(p, -1) - p            # mass of the tokens ranked above
    drop = np.zeros_like(x, dtype=bool)
    np.put_along_axis(drop, order, before >= top_p, -1)
    x = np.where(drop, -np.inf, x)
  m = x.max(-1, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def top_alternatives(policy, prompt: np.ndarray, images: list, tokens: list[int], temperature: float,
                     top_p: float, k: int) -> list[list[tuple[int, float]]]:
  """For each completion token, the k most likely (token id, log-prob) under the processed
  distribution at that position."""
  if not tokens or k <= 0:
    return [[] for _ in tokens]
  seq = np.concatenate([np.asarray(prompt, np.int32), np.asarray(tokens[:-1], np.int32)])
  # padded at the end to a power-of-two length, so a server compiles a few shapes, not one per
  # request; causal attention keeps the real positions' logits unchanged
  padded = np.concatenate([seq, np.zeros(bucket(len(seq), 64) - len(seq), np.int32)])
  logits = np.asarray(policy.logits(padded, images or None))[len(seq) - len(tokens):len(seq)]
  logp = processed_logprobs(logits, temperature, top_p)
  top = np.argsort(-logp, axis=-1, kind="stable")[:, :k]
  return [[(int(t), max(NEG_INF_LOGPROB, float(row[t]))) for t in ids] for row, ids in zip(logp, top)]


def sse(obj: Any) -> bytes:
  return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def text_deltas(decode, tokens: list[int]) -> list[str]:
  """One text delta per token whose concatenation is decode(tokens); a token that ends inside a
  multi-byte character gets "" and its text arrives with the token that completes it."""
  out, sent = [], ""
  for i in range(1, len(tokens) + 1):
    text = decode(tokens[:i])
    if text.endswith("\ufffd") and i < len(tokens):
      out.append("")
      continue
    out.append(text[len(sent):])
    sent = text
  return out


def stream_chunks(resp: dict[str, Any], deltas: list[str], per_token_logprobs: list[Any] | None,
                  *, chat: bool, include_usage: bool) -> Iterator[dict[str, Any]]:
  """The non-streamed response `resp` as vLLM's stream chunks (dicts, in order)."""
  choice = resp["choices"][0]
  head = {"id": resp["id"], "created": resp["created"], "model": resp["model"],
          "object": "chat.completion.chunk" if chat else "text_completion"}

  def chunk(**fields):
    base = {"index": 0, "logprobs": None, "finish_reason": None}
    return {**head, "choices": [{**base, **fields}]}

  if chat:
    yield chunk(delta={"role": "assistant", "content": ""})
  for i, text in enumerate(deltas):
    lp = None
    if per_token_logprobs is not None:
      lp = {"content": [per_token_logprobs[i]]} if chat else per_token_logprobs[i]
    yield chunk(**({"delta": {"content": text}} if chat else {"text": text}), logprobs=lp)
  last = {"finish_reason": choice["finish_reason"], "stop_reason": choice.get("stop_reason")}
  yield chunk(**({"delta": {}} if chat else {"text": ""}), **last)
  if include_usage:
    yield {**head, "choices": [], "usage": resp["usage"]}
