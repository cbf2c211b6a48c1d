"""Shared builders for the skill modules: value pools, tool calls, package fields, `define`.

A skill module calls `domain(...)`, `capability(...)` and `define(...)` (one per atomic skill);
`define` registers a `forge.skill.Skill` whose `param_schema` is read off a sampled parameter set.
Every reference list gets the final `terminate` call appended here, so skills list only the work.
"""
from __future__ import annotations

import json
import random
from typing import Any, Callable

from mage_jax.tasks.builtin.suite import DONE, H, app, bash, click, drag, fill, key, move, scroll, type_, wait
from mage_jax.forge import skill as skill_lib

__all__ = ["DONE", "H", "app", "bash", "click", "drag", "fill", "key", "move", "scroll", "type_", "wait",
           "py", "package", "define", "domain", "capability", "schema_of", "distinct", "csv_text", "against_order",
           "WORDS", "NAMES", "CITIES", "ITEMS", "CATEGORIES", "COLORS"]

WORDS = ["amber", "birch", "cobalt", "delta", "ember", "falcon", "garnet", "harbor", "indigo", "jasper",
         "kestrel", "lumen", "maple", "nectar", "onyx", "pepper", "quartz", "raven", "saffron", "tundra",
         "umber", "velvet", "willow", "xenon", "yarrow", "zephyr"]
NAMES = ["Ada", "Bram", "Cleo", "Dara", "Emil", "Faye", "Gus", "Hana", "Ivo", "Juno", "Kai", "Lena",
         "Milo", "Nora", "Otto", "Pia", "Quin", "Rosa", "Sven", "Tara"]
CITIES = ["Oslo", "Lima", "Kyoto", "Perth", "Cairo", "Quito", "Porto", "Dakar", "Hanoi", "Malmo"]
ITEMS = ["pen", "ink", "pad", "clip", "tape", "glue", "ruler", "stamp", "card", "file", "brush", "chalk"]
CATEGORIES = ["fruit", "veg", "dairy", "bakery", "grain", "meat"]
COLORS = {"red": [220, 40, 40], "green": [40, 180, 60], "blue": [40, 70, 220], "yellow": [240, 210, 30],
          "black": [0, 0, 0], "white": [255, 255, 255], "purple": [130, 50, 160], "orange": [245, 140, 20]}

DOMAINS: dict[str, str] = {}          # domain id -> description
CAPABILITIES: dict[str, str] = {}     # "<domain>.<capability>" -> description


def domain(id: str, description: str) -> None:
  DOMAINS[id] = description


def capability(id: str, description: str) -> None:
  CAPABILITIES[id] = description


def py(code: str, action: str | None = None) -> dict[str, Any]:
  """A bash call that runs a Python script (heredoc: no shell quoting inside)."""
  return bash(f"python - <<'PY'\n{code.strip()}\nPY", action or "Run a Python script")


def distinct(r: random.Random, pool: list[Any], k: int) -> list[Any]:
  return r.sample(pool, k)


def against_order(values: list[Any], largest_first: bool) -> list[Any]:
  """The values with the first two placed against the order a sorting task asks for, so the input
  never starts out sorted (else the untouched state, or a copy of it, would already pass)."""
  a, b = sorted(values[:2], reverse=not largest_first)
  return [a, b] + values[2:]


def csv_text(rows: list[list[Any]], sep: str = ",") -> str:
  return "".join(sep.join(str(c) for c in row) + "\n" for row in rows)


def package(instruction: str, setup: list[dict[str, Any]], checker: dict[str, Any], near: list[dict[str, Any]],
            terminal: list | None = None, gui: list | None = None, hybrid: list | None = None,
            max_steps: int | None = None) -> dict[str, Any]:
  """The task-package fields `Skill.build` returns: every given reference, labelled by channel."""
  refs = [{"channel": ch, "calls": calls + [DONE]}
          for ch, calls in (("terminal", terminal), ("gui", gui), ("hybrid", hybrid)) if calls]
  if not refs:
    raise ValueError("a skill package needs at least one reference")
  out = {"instruction": instruction, "setup": setup, "checker": checker, "references": refs,
         "near_miss": near + [DONE]}
  if max_steps:
    out["max_steps"] = max_steps
  return out


def schema_of(value: Any, top: bool = True) -> dict[str, Any]:
  """A JSON schema that the sampled value (and any of the same shape) satisfies: the top-level object
  has fixed keys; nested objects are maps (their keys are data: file names, people, ...)."""
  if isinstance(value, bool):
    return {"type": "boolean"}
  if isinstance(value, int):
    return {"type": "integer"}
  if isinstance(value, float):
    return {"type": "number"}
  if isinstance(value, str):
    return {"type": "string"}
  if isinstance(value, list):
    items = [schema_of(v, False) for v in value]
    same = bool(items) and all(i == items[0] for i in items)  # rows of mixed cells: no item schema
    return {"type": "array", **({"items": items[0]} if same else {})}
  if isinstance(value, dict) and top:
    return {"type": "object", "properties": {k: schema_of(v, False) for k, v in value.items()},
            "required": sorted(value)}
  if isinstance(value, dict):
    vals = [schema_of(v, False) for v in value.values()]
    same = bool(vals) and all(v == vals[0] for v in vals)
    return {"type": "object", **({"additionalProperties": vals[0]} if same else {})}
  if value is None:
    return {"type": "null"}
  raise TypeError(f"no JSON schema for {type(value).__name__}")


_NO_TEXT = ("mkdir", "script", "app", "png", "pdf")   # preparers whose files hold no parameter text


def _leaves(value: Any) -> list[str]:
  if isinstance(value, dict):  # a database's column declarations are not its data
    return [x for k, v in value.items() if k != "columns" for x in _leaves(v)]
  if isinstance(value, list):
    return [x for v in value for x in _leaves(v)]
  return [str(value)]


def derived_mentions(build: Callable[[dict[str, Any]], dict[str, Any]]):
  """The default `mentions`: for each prepared file, the parameter values that the instruction
  mentions and that the file's preparer spec writes (the file-level gate checks they got there)."""
  def mentions(params: dict[str, Any]) -> dict[str, list[str]]:
    fields = build(params)
    named = sorted({v for v in _leaves(params) if len(v) >= 2 and v in fields["instruction"]})
    out = {}
    for step in fields["setup"]:
      if "path" in step and step["type"] not in _NO_TEXT:
        text = "\n".join(_leaves({k: v for k, v in step.items() if k not in ("type", "path")}))
        hits = [v for v in named if v in text]
        if hits:
          out[step["path"]] = hits[:4]
    return out
  return mentions


def define(id: str, description: str, sample: Callable[[random.Random], dict[str, Any]],
           build: Callable[[dict[str, Any]], dict[str, Any]], kind: str = "terminal",
           apps: tuple[str, ...] = ("shell",),
           mentions: Callable[[dict[str, Any]], dict[str, list[str]]] | None = None) -> skill_lib.Skill:
  """Registers one atomic skill; the parameters must round-trip through JSON (LLM nodes propose them)."""
  example = sample(random.Random(0))
  if json.loads(json.dumps(example)) != example:
    raise skill_lib.TaxonomyError(f"skill {id}: sampled params do not round-trip through JSON")
  return skill_lib.register(skill_lib.Skill(
      id=id, description=description, kind=kind, apps=tuple(apps), sample=sample, build=build,
      param_schema=schema_of(example), mentions=mentions or derived_mentions(build)))
