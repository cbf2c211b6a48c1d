"""A teacher harness variant H = (F scaffold, T tools, P prompt, E terminal environment) as one config.

  T  toolset ("hybrid" | "gui", schema.TOOLSETS) + `extra_tools` (harness/extra_tools.py)
  P  `system_prompt` + `tool_descriptions` (per-tool description overrides). Not the data
     path's prompt_variants: those are the *student's* phrasings and never change here.
  F  `max_steps`, `full_responses`, `visual_turns`, `context_len`, `max_output` (the terminal
     output cap, characters)
  E  `libraries` / `cli_tools`: {name: host directory}, bound read-only into the sandbox and put
     on PYTHONPATH / PATH (harness/env.py)

`variant_id` is a hash of the canonical config (the `name` label left out, so two names for one
config share an id); it travels into every EpisodeResult (`harness`) and trajectory
(`meta.harness`). `apply_diff` is the one way a proposer changes a variant: an unknown field,
a bad value or a no-op is a `VariantError` naming the field.

The episode loop calls `schemas()`, `parse(text)`, `channel_of(name)` and `execute(env, name,
arguments)` when `EpisodeConfig.harness` is set.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Mapping

from mage_jax.actions import parsing
from mage_jax.actions import schema as tools
from mage_jax.data import prompts
from mage_jax.harness import extra_tools as xt

EXTRA_CHANNEL = "extra"


class VariantError(ValueError):
  """A harness config or diff that does not validate; the message names the field."""


_MAPPINGS = ("tool_descriptions", "libraries", "cli_tools")
_INTS = {"max_steps": 1, "full_responses": 1, "visual_turns": 0, "context_len": 256, "max_output": 100}


@dataclasses.dataclass(frozen=True)
class HarnessVariant:
  name: str = "base"
  toolset: str = "hybrid"
  extra_tools: tuple[str, ...] = ()
  system_prompt: str = prompts.SYSTEM_PROMPTS[0]
  tool_descriptions: tuple[tuple[str, str], ...] = ()
  max_steps: int = 50
  full_responses: int = 4
  visual_turns: int = 3
  context_len: int = 32_768
  max_output: int = 16_000
  libraries: tuple[tuple[str, str], ...] = ()
  cli_tools: tuple[tuple[str, str], ...] = ()

  # ---- construction / identity -------------------------------------------------------------
  @classmethod
  def from_dict(cls, d: Mapping[str, Any], where: str = "harness") -> "HarnessVariant":
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - fields)
    if unknown:
      raise VariantError(f"{where}: unknown fields {unknown}; the variant schema has {sorted(fields)}")
    kw: dict[str, Any] = {}
    for k, v in d.items():
      if k in _MAPPINGS:
        if not isinstance(v, Mapping) or not all(isinstance(a, str) and isinstance(b, str) for a, b in v.items()):
          raise VariantError(f"{where}.{k}: expected a mapping of strings to strings, got {v!r:.80}")
        kw[k] = tuple(sorted(v.items()))
      elif k == "extra_tools":
        if isinstance(v, str) or not all(isinstance(n, str) for n in v):
          raise VariantError(f"{where}.extra_tools: expected a list of tool names, got {v!r:.80}")
        kw[k] = tuple(v)
      elif k in _INTS:
        if not isinstance(v, int) or isinstance(v, bool) or v < _INTS[k]:
          raise VariantError(f"{where}.{k}: expected an integer >= {_INTS[k]}, got {v!r:.80}")
        kw[k] = v
      else:
        if not isinstance(v, str) or (k == "system_prompt" and not v.strip()):
          raise VariantError(f"{where}.{k}: expected a non-empty string, got {v!r:.80}")
        kw[k] = v
    try:
      return cls(**kw)
    except ValueError as e:
      raise VariantError(f"{where}.{e}") from None  # __post_init__ messages start with the field

  def __post_init__(self):
    if self.toolset not in tools.TOOLSETS:
      raise ValueError(f"toolset: {self.toolset!r} is not one of {sorted(tools.TOOLSETS)}")
    xt.check_names(self.extra_tools, "extra_tools")
    if len(set(self.extra_tools)) != len(self.extra_tools):
      raise ValueError(f"extra_tools: duplicates in {list(self.extra_tools)}")
    offered = set(self.tool_names())
    bad = [n for n, _ in self.tool_descriptions if n not in offered]
    if bad:
      raise ValueError(f"tool_descriptions: {bad} name no offered tool; offered: {sorted(offered)}")

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    for k in _MAPPINGS:
      d[k] = dict(getattr(self, k))
    d["extra_tools"] = list(self.extra_tools)
    return d

  @property
  def variant_id(self) -> str:
    d = self.to_dict()
    d.pop("name")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

  def apply_diff(self, diff: Any, name: str | None = None) -> "HarnessVariant":
    """A child variant: `diff` maps fields to new values; it must validate and change something."""
    if not isinstance(diff, Mapping) or not diff:
      raise VariantError(f"diff: expected a non-empty object of field -> value, got {diff!r:.80}")
    if "name" in diff:
      raise VariantError("diff.name: the name is a label, not part of the variant")
    child = HarnessVariant.from_dict({**self.to_dict(), **diff, "name": name or self.name}, where="diff")
    if child.variant_id == self.variant_id:
      raise VariantError(f"diff: changes nothing ({sorted(diff)})")
    return child

  # ---- the teacher's tools -----------------------------------------------------------------
  def tool_names(self) -> list[str]:
    return list(tools.TOOLSETS[self.toolset]) + list(self.extra_tools)

  def schemas(self) -> list[dict[str, Any]]:
    """The tools the teacher's system turn declares: base schemas, then the extra tools."""
    out = tools.toolset_schemas(self.toolset) + [xt.EXTRA_TOOLS[n].schema for n in self.extra_tools]
    overrides = dict(self.tool_descriptions)
    if overrides:
      out = [s if s["function"]["name"] not in overrides else
             {**s, "function": {**s["function"], "description": overrides[s["function"]["name"]]}}
             for s in out]
    return out

  def parse(self, text: str) -> parsing.ParseResult:
    """`parse_for_toolset`, plus calls to this variant's extra tools (validated by the tool)."""
    r = parsing.parse_for_toolset(text, self.toolset)
    if r.error_kind == parsing.INVALID_CALL and r.name in self.extra_tools and r.arguments is not None:
      reason = xt.EXTRA_TOOLS[r.name].validate(r.arguments)
      r.error_kind, r.error = (None, None) if reason is None else (parsing.INVALID_CALL, reason)
    return r

  def channel_of(self, name: str | None) -> str | None:
    return EXTRA_CHANNEL if name in self.extra_tools else parsing.channel_of(name)

  def execute(self, env, name: str, arguments: dict[str, Any]):
    """One parsed call on `env`; an extra tool runs as the bash command it stands for."""
    if name in self.extra_tools:
      return env.step(tools.BASH, {"command": xt.EXTRA_TOOLS[name].to_bash(arguments)})
    return env.step(name, arguments)

  # ---- wiring into the episode loop and the environment ------------------------------------
  def episode_config(self, base):
    """`base` (an EpisodeConfig) with this variant's scaffold and the variant itself."""
    return dataclasses.replace(base, max_steps=self.max_steps, full_responses=self.full_responses,
                               visual_turns=self.visual_turns, context_len=self.context_len,
                               toolset=self.toolset, harness=self)


def uses_extra_tools(episode) -> int:
  """How many steps of a trajectory called a tool outside the student's fixed schema."""
  return sum(s.tool_call is not None and s.tool_call.name not in tools.TOOL_NAMES for s in episode.steps)
