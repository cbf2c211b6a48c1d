"""Token counts from a response's `usage`, priced by a per-model table ($ per 1M tokens).

`usage.prompt_tokens_details.cached_tokens` (OpenAI; vLLM with prefix caching) is a subset of
`prompt_tokens`, billed at the model's `cached` price (its `prompt` price when the table has
none). A reply without `usage` is counted by the character estimate ceil(chars / 4) and marked
`estimated`, so a report can say which figures were measured and which guessed.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

# $ per 1M tokens. A frontier-API-like list price, so a run against a server that does not
# name its price still yields dollars; override per model name in the config's `prices`.
DEFAULT_PRICES = {"default": {"prompt": 0.60, "completion": 2.40}}
PRICE_KEYS = ("prompt", "completion", "cached")


def approx_tokens(text: str) -> int:
  """The labelled fallback when a reply carries no `usage`: ceil(chars / 4)."""
  return math.ceil(len(text) / 4)


@dataclasses.dataclass(frozen=True)
class Usage:
  prompt_tokens: int = 0
  completion_tokens: int = 0
  cached_tokens: int = 0          # of prompt_tokens
  estimated: bool = False         # True: counted by approx_tokens, the reply had no usage

  @classmethod
  def from_response(cls, usage: Any, prompt_text: str, completion_text: str) -> "Usage":
    if not isinstance(usage, dict) or "prompt_tokens" not in usage:
      return cls(approx_tokens(prompt_text), approx_tokens(completion_text), 0, True)
    details = usage.get("prompt_tokens_details") or {}
    return cls(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
               int(details.get("cached_tokens") or 0), False)

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class PriceTable:
  prices: dict[str, dict[str, float]] = dataclasses.field(default_factory=lambda: dict(DEFAULT_PRICES))

  def __post_init__(self):
    for model, row in self.prices.items():
      unknown = set(row) - set(PRICE_KEYS)
      missing = {"prompt", "completion"} - set(row)
      if unknown or missing:
        raise ValueError(f"prices[{model!r}]: keys must be prompt, completion (and optionally "
                         f"cached), $ per 1M tokens; missing {sorted(missing)}, unknown {sorted(unknown)}")

  def row(self, model: str) -> dict[str, float]:
    p = self.prices.get(model) or self.prices.get("default")
    if p is None:
      raise KeyError(f"price table has no entry for model {model!r} and no 'default'")
    return p

  def dollars(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
    p = self.row(model)
    cached = min(cached_tokens, prompt_tokens)
    return ((prompt_tokens - cached) * p["prompt"] + cached * p.get("cached", p["prompt"])
            + completion_tokens * p["completion"]) / 1e6
