"""LLM nodes: a prompt template, a JSON-schema output, bounded retries, a fallback, and cost.

Talks to any OpenAI-compatible `POST {base_url}/chat/completions` (vLLM,
`launch.serve` = mage_jax/engine/rollout_server.py, forge/replay.py). One call of an
`LLMNode`:

  1. renders its template (`str.format` over the node's inputs; JSON-dumped when
     a value is not a string) into a system + user message;
  2. asks the endpoint, pulls the first JSON value out of the reply (```json
     fences or the first {...} / [...] span) and validates it against the node's
     schema (`jsonschema` when importable, else `validate_schema` below);
  3. on an invalid reply, appends the reply and the validation error to the
     conversation and asks again, at most `max_retries` more times;
  4. when retries run out, returns `fallback(inputs)` (e.g. the skill's seeded
     sampler) marked `fallback=True`, or raises `LLMNodeError` if there is none.

The transport is the shared client (mage_jax/llm/client.py: auth from an env var, vLLM-only
fields only for vLLM, retries honouring Retry-After, a concurrency limit). Every call's
`usage` (prompt, completion, cached tokens) goes into a `Ledger` and is converted to dollars
by a `PriceTable` (mage_jax/llm/pricing.py, $ per million tokens per model name); a reply
without `usage` is estimated from characters and counted as `estimated`.
A dead endpoint is an `EndpointError` naming the URL, the skill and the node: it
is not retried into a fallback, since every later task would fail the same way.
"""
from __future__ import annotations

import dataclasses
import json
import re
import threading
from typing import Any, Callable

from mage_jax.llm import client as client_lib
from mage_jax.llm.client import EndpointError  # noqa: F401 - re-exported: callers catch llm.EndpointError
from mage_jax.llm.pricing import DEFAULT_PRICES, PriceTable  # noqa: F401 - re-exported

class LLMNodeError(RuntimeError):
  """An LLM node's reply stayed invalid after every retry and the node has no fallback."""


class SchemaError(ValueError):
  """A value that does not match a JSON schema; the message holds the JSON path."""


# ---- JSON schema -----------------------------------------------------------------------------------
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(value: Any, name: str) -> bool:
  if name == "integer":
    return isinstance(value, int) and not isinstance(value, bool)
  if name == "number":
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  return isinstance(value, _TYPES[name])


def _small_validate(value: Any, schema: dict[str, Any], path: str) -> None:
  """The subset of JSON schema skills use: type, enum, const, properties, required,
  additionalProperties (bool), items, min/maxItems, min/maxLength, minimum/maximum, pattern."""
  t = schema.get("type")
  if t is not None:
    names = t if isinstance(t, list) else [t]
    if not any(_is_type(value, n) for n in names):
      raise SchemaError(f"{path}: expected {t}, got {type(value).__name__} {value!r:.60}")
  if "enum" in schema and value not in schema["enum"]:
    raise SchemaError(f"{path}: {value!r:.60} is not one of {schema['enum']}")
  if "const" in schema and value != schema["const"]:
    raise SchemaError(f"{path}: expected {schema['const']!r}")
  if isinstance(value, dict):
    for key in schema.get("required", []):
      if key not in value:
        raise SchemaError(f"{path}: missing required property {key!r}")
    props = schema.get("properties", {})
    for key, sub in value.items():
      if key in props:
        _small_validate(sub, props[key], f"{path}.{key}")
      elif schema.get("additionalProperties") is False:
        raise SchemaError(f"{path}: unexpected property {key!r}")
  if isinstance(value, list):
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
      raise SchemaError(f"{path}: {len(value)} items outside [{schema.get('minItems', 0)}, "
                        f"{schema.get('maxItems', 'inf')}]")
    if isinstance(schema.get("items"), dict):
      for i, sub in enumerate(value):
        _small_validate(sub, schema["items"], f"{path}[{i}]")
  if isinstance(value, str):
    if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
      raise SchemaError(f"{path}: string length {len(value)} out of range")
    if "pattern" in schema and not re.search(schema["pattern"], value):
      raise SchemaError(f"{path}: {value!r:.60} does not match {schema['pattern']!r}")
  if _is_type(value, "number"):
    if "minimum" in schema and value < schema["minimum"]:
      raise SchemaError(f"{path}: {value} < minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
      raise SchemaError(f"{path}: {value} > maximum {schema['maximum']}")


def validate_schema(value: Any, schema: dict[str, Any]) -> None:
  """Raises SchemaError naming the JSON path of the first violation."""
  try:
    import jsonschema   # only when a schema is checked (start-up cost)
  except ImportError:  # a small validator covers what skills' param_schema use
    return _small_validate(value, schema, "$")
  try:
    jsonschema.validate(value, schema)
  except jsonschema.ValidationError as e:
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
    raise SchemaError(f"{where}: {e.message}") from None


def extract_json(text: str) -> Any:
  """The first JSON value in a model reply: a ```json fence, else the first {...} or [...] span
  that parses. Raises SchemaError (fed back to the model) when there is none."""
  fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
  candidates = [fence.group(1)] if fence else []
  candidates.append(text)
  decoder = json.JSONDecoder()
  for cand in candidates:
    for i, ch in enumerate(cand):
      if ch in "{[":
        try:
          return decoder.raw_decode(cand[i:])[0]
        except json.JSONDecodeError:
          continue
  raise SchemaError(f"no JSON object in the reply ({text[:80]!r})")


# ---- cost ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class CallRecord:
  skill: str
  node: str
  prompt_tokens: int = 0
  completion_tokens: int = 0
  cached_tokens: int = 0   # of prompt_tokens (usage.prompt_tokens_details.cached_tokens)
  estimated: int = 0       # requests whose reply had no `usage` (tokens counted as ceil(chars / 4))
  dollars: float = 0.0
  requests: int = 0        # LLM requests (1 + re-asks)
  retries: int = 0         # re-asks after an invalid reply
  fallback: bool = False   # retries ran out; the fallback's value was used
  errors: list[str] = dataclasses.field(default_factory=list)  # the validation errors fed back

  def add_usage(self, usage: dict[str, Any]) -> None:
    self.requests += 1
    self.prompt_tokens += usage["prompt_tokens"]
    self.completion_tokens += usage["completion_tokens"]
    self.cached_tokens += usage.get("cached_tokens", 0)
    self.estimated += int(bool(usage.get("estimated")))

  def price(self, client: "ChatClient") -> None:
    self.dollars = client.prices.dollars(client.model, self.prompt_tokens, self.completion_tokens,
                                         self.cached_tokens)


TOTAL_KEYS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "estimated", "retries")


def totals(recs: list[CallRecord]) -> dict[str, Any]:
  out = {"calls": len(recs), **{k: sum(getattr(r, k) for r in recs) for k in TOTAL_KEYS}}
  out["dollars"] = round(sum(r.dollars for r in recs), 6)
  out["fallbacks"] = sum(r.fallback for r in recs)
  return out


class Ledger:
  """Thread-safe running totals of LLM-node calls (per skill and node, and overall)."""

  def __init__(self):
    self._lock = threading.Lock()
    self.records: list[CallRecord] = []

  def add(self, rec: CallRecord) -> None:
    with self._lock:
      self.records.append(rec)

  def totals(self) -> dict[str, Any]:
    """Overall, plus `by_node` ("skill/node" -> the same totals)."""
    with self._lock:
      recs = list(self.records)
    by_node: dict[str, list[CallRecord]] = {}
    for r in recs:
      by_node.setdefault(f"{r.skill}/{r.node}", []).append(r)
    return {**totals(recs), "by_node": {k: totals(v) for k, v in sorted(by_node.items())}}


# ---- client ----------------------------------------------------------------------------------------
class ChatClient(client_lib.ChatClient):
  """The shared client (mage_jax/llm/client.py: auth, retries, concurrency, usage) with a
  node's sampling defaults; `chat` returns (text, usage dict) and names the skill and node in
  errors."""

  def __init__(self, base_url: str, model: str = "mage", *, temperature: float = 0.0,
               max_tokens: int = 512, **endpoint: Any):
    super().__init__(base_url, model, **endpoint)
    self.temperature, self.max_tokens = temperature, max_tokens

  def chat(self, messages: list[dict[str, Any]], *, skill: str = "?", node: str = "?",
           seed: int | None = None) -> tuple[str, dict[str, Any]]:
    reply = self.complete(messages, where=f"LLM node {node!r} of skill {skill!r}: ",
                          temperature=self.temperature, max_tokens=self.max_tokens, seed=seed)
    return reply.text, reply.usage.as_dict()


def client_from_config(block: Any) -> ChatClient:
  """A node client from a config section (configs/common.py endpoint_fields + max_tokens, temperature)."""
  get = block.get if hasattr(block, "get") else lambda k, d=None: getattr(block, k, d)
  return client_lib.from_config(block, factory=ChatClient, max_tokens=get("max_tokens", 512),
                                temperature=get("temperature", 0.0))


# ---- node ------------------------------------------------------------------------------------------
RETRY_TEMPLATE = ("Your reply was not valid: {error}\nReply again with only one JSON value that "
                  "matches this JSON schema:\n{schema}")


def render(template: str, inputs: dict[str, Any]) -> str:
  """`str.format` over inputs; non-string values are JSON-dumped. A missing field is a KeyError
  naming it."""
  values = {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in inputs.items()}
  try:
    return template.format(**values)
  except KeyError as e:
    raise KeyError(f"prompt template needs input {e.args[0]!r}; inputs are {sorted(inputs)}") from None


@dataclasses.dataclass
class LLMNode:
  """One LLM call with a validated JSON output. `template` and `system` are format strings over
  the node's inputs (plus `schema`, the JSON-dumped output schema)."""
  name: str
  template: str
  schema: dict[str, Any]
  system: str = "You generate data for computer-use training tasks. Reply with JSON only."
  max_retries: int = 2
  fallback: Callable[[dict[str, Any]], Any] | None = None
  check: Callable[[Any], None] | None = None  # extra validation (raise ValueError with a reason)

  def run(self, client: ChatClient, inputs: dict[str, Any], *, skill: str, seed: int | None = None,
          ledger: Ledger | None = None) -> tuple[Any, CallRecord]:
    schema_text = json.dumps(self.schema, sort_keys=True)
    ctx = dict(inputs, schema=schema_text)
    messages = [{"role": "system", "content": render(self.system, ctx)},
                {"role": "user", "content": render(self.template, ctx)}]
    rec = CallRecord(skill=skill, node=self.name)
    value, ok = None, False
    try:
      for attempt in range(self.max_retries + 1):
        text, usage = client.chat(messages, skill=skill, node=self.name,
                                  seed=None if seed is None else seed + attempt)
        rec.add_usage(usage)
        try:
          value = extract_json(text)
          validate_schema(value, self.schema)
          if self.check is not None:
            self.check(value)
          ok = True
          break
        except (SchemaError, ValueError) as e:
          rec.errors.append(str(e)[:300])
          if attempt < self.max_retries:
            rec.retries += 1
            messages = messages + [{"role": "assistant", "content": text[:2000]},
                                   {"role": "user", "content": RETRY_TEMPLATE.format(
                                       error=str(e)[:300], schema=schema_text)}]
    finally:  # tokens spent count even when the endpoint dies mid-node
      rec.price(client)
    if not ok:
      if self.fallback is None:
        if ledger is not None:
          ledger.add(rec)
        raise LLMNodeError(f"LLM node {self.name!r} of skill {skill!r}: no valid reply after "
                           f"{rec.requests} requests; last error: {rec.errors[-1]}")
      rec.fallback = True
      value = self.fallback(inputs)
    if ledger is not None:
      ledger.add(rec)
    return value, rec
