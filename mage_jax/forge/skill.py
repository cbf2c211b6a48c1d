"""The contract between Forge's skill library and its workflow engine.

A `Skill` is one atomic skill of the taxonomy (`taxonomy.json`) with the
deterministic pieces of its generation workflow:

  sample(rng) -> params        draws parameters from the skill's value pools (seeded; no model)
  build(params) -> fields      params -> task-package fields: instruction, setup (preparer specs),
                               checker, references ([{channel, calls}]), near_miss, max_steps?
  mentions(params) -> {path: [values]}
                               values each prepared file must hold (the file-level gate opens the
                               file with its library and looks for them)

`param_schema` is the JSON schema of `params`, so an LLM node can propose
parameters (or reword them) in place of `sample`; `build` then turns any valid
params into a package. The engine (`forge/workflow.py`) wraps a skill into a
DAG of nodes (params -> preparers -> setup -> checker -> package -> gates); the
skill modules (`forge/skills/<domain>.py`) only register skills.

Skill ids are stable (`<domain>.<capability>.<name>`) and travel into every
task package (`skills`), trajectory and evaluation result.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pkgutil
import random
from typing import Any, Callable

TAXONOMY_FILE = os.path.join(os.path.dirname(__file__), "taxonomy.json")
KINDS = ("terminal", "gui", "hybrid")


class TaxonomyError(ValueError):
  """A malformed taxonomy or skill registry; the message names the file and the skill."""


@dataclasses.dataclass(frozen=True)
class Skill:
  id: str                                         # "<domain>.<capability>.<name>"
  description: str                                # one line
  kind: str                                       # terminal | gui | hybrid
  apps: tuple[str, ...]                           # two or more: a multi-application skill
  sample: Callable[[random.Random], dict[str, Any]]
  build: Callable[[dict[str, Any]], dict[str, Any]]
  param_schema: dict[str, Any]
  mentions: Callable[[dict[str, Any]], dict[str, list[str]]] = lambda params: {}

  @property
  def domain(self) -> str:
    return self.id.split(".")[0]

  @property
  def capability(self) -> str:
    return self.id.split(".")[1]

  @property
  def multi_app(self) -> bool:
    return len(self.apps) > 1


REGISTRY: dict[str, Skill] = {}


def register(skill: Skill) -> Skill:
  """Adds a skill; a malformed id, unknown kind or a second skill with the same id is an error."""
  parts = skill.id.split(".")
  if len(parts) != 3 or not all(p and p.replace("_", "").isalnum() for p in parts):
    raise TaxonomyError(f"skill id {skill.id!r}: expected <domain>.<capability>.<name>")
  if skill.kind not in KINDS:
    raise TaxonomyError(f"skill {skill.id}: kind must be one of {KINDS}, got {skill.kind!r}")
  if skill.id in REGISTRY:
    raise TaxonomyError(f"skill {skill.id}: registered twice")
  REGISTRY[skill.id] = skill
  return skill


def load_taxonomy(path: str = TAXONOMY_FILE) -> dict[str, Any]:
  """The versioned taxonomy: {"version", "domains": [{"id", "description", "capabilities":
  [{"id", "description", "skills": [{"id", "description"}]}]}]}; errors name the file and entry."""
  try:
    with open(path) as f:
      tax = json.load(f)
  except FileNotFoundError:
    raise TaxonomyError(f"{path}: not found") from None
  except json.JSONDecodeError as e:
    raise TaxonomyError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
  if not isinstance(tax, dict) or not isinstance(tax.get("version"), int) or not isinstance(tax.get("domains"), list):
    raise TaxonomyError(f"{path}: expected an object with an integer 'version' and a list 'domains'")
  seen: set[str] = set()
  for d in tax["domains"]:
    for c in d.get("capabilities", []):
      for s in c.get("skills", []):
        sid = s.get("id") if isinstance(s, dict) else None
        where = f"{path}: domain {d.get('id')!r}, capability {c.get('id')!r}"
        if not isinstance(sid, str) or not isinstance(s.get("description"), str) or not s["description"].strip():
          raise TaxonomyError(f"{where}: every skill needs a string 'id' and a one-line 'description'")
        if sid.split(".")[:2] != [d.get("id"), c.get("id")]:
          raise TaxonomyError(f"{where}: skill {sid!r} must be named <domain>.<capability>.<name>")
        if sid in seen:
          raise TaxonomyError(f"{where}: skill {sid!r} appears twice")
        seen.add(sid)
  return tax


def taxonomy_skill_ids(tax: dict[str, Any]) -> list[str]:
  return [s["id"] for d in tax["domains"] for c in d.get("capabilities", []) for s in c.get("skills", [])]


def import_skill_modules(modules: list[str]) -> None:
  """Each name is a module or a package (every submodule is imported); errors name it."""
  for name in modules:
    try:
      mod = importlib.import_module(name)
      if hasattr(mod, "__path__"):
        for info in pkgutil.iter_modules(mod.__path__):
          importlib.import_module(f"{name}.{info.name}")
    except TaxonomyError:
      raise
    except Exception as e:  # noqa: BLE001
      raise TaxonomyError(f"skill module {name}: import failed: {type(e).__name__}: {e}") from e
