"""The skill library: one module per domain registers one `Skill` per taxonomy entry.

  load_all()                 imports every domain module (idempotent); returns the library's skills
  taxonomy_from_registry()   the taxonomy document the registry defines (what taxonomy.json holds)
  package_dict(skill, params, task_id)  a full task-package dict (docs/tasks.md) for one param set

`python -m launch.skillcheck --write_taxonomy` rewrites taxonomy.json from the registry (bump
`VERSION` when a skill is added, removed or renamed); tests/test_forge_skills.py asserts they match.
Importing this package registers nothing: `load_all()` (or importing a domain module) does.
"""
from __future__ import annotations

import importlib
from typing import Any

from mage_jax.forge import skill as skill_lib
from mage_jax.forge.skills.base import CAPABILITIES, DOMAINS

VERSION = 3
# module -> the domain it declares, in taxonomy order (the document's order must not depend on which
# module a caller happened to import first).
DOMAIN_MODULES = {"shell": "shell", "text": "text", "csvdata": "csv", "spreadsheet": "xlsx",
                  "document": "docx", "slides": "pptx", "pdf": "pdf", "image": "image",
                  "sqlite": "sqlite", "desktop": "desktop", "report": "report",
                  "pipeline": "pipeline", "convert": "convert", "chain": "chain", "apps": "apps", "web": "web"}


def load_all() -> dict[str, skill_lib.Skill]:
  """The library's skills (the registry may also hold skills registered elsewhere, e.g. by tests)."""
  for name in DOMAIN_MODULES:
    importlib.import_module(f"mage_jax.forge.skills.{name}")
  return {sid: s for sid, s in skill_lib.REGISTRY.items() if s.domain in DOMAINS}


def taxonomy_from_registry() -> dict[str, Any]:
  doms: dict[str, dict[str, Any]] = {}
  for s in load_all().values():
    d = doms.setdefault(s.domain, {"id": s.domain, "description": DOMAINS[s.domain], "capabilities": {}})
    cid = f"{s.domain}.{s.capability}"
    c = d["capabilities"].setdefault(cid, {"id": s.capability, "description": CAPABILITIES[cid], "skills": []})
    c["skills"].append({"id": s.id, "description": s.description, "kind": s.kind, "apps": list(s.apps)})
  # Domains in DOMAIN_MODULES order, not in the order their modules happened to be imported (a test
  # that imported one module first reordered the document: a fresh-clone failure of
  # test_taxonomy_file_matches_the_registry_exactly). Inside a domain, one module's own order.
  order = [*DOMAIN_MODULES.values(), *(d for d in DOMAINS if d not in DOMAIN_MODULES.values())]
  return {"version": VERSION, "domains": [{**doms[d], "capabilities": list(doms[d]["capabilities"].values())}
                                          for d in order if d in doms]}


def package_dict(skill: skill_lib.Skill, params: dict[str, Any], task_id: str) -> dict[str, Any]:
  fields = skill.build(params)
  channels = {"terminal": ["terminal"], "gui": ["gui"], "hybrid": ["gui", "terminal"]}[skill.kind]
  return {"id": task_id, "kind": skill.kind, "apps": list(skill.apps), "skills": [skill.id],
          "channels": channels, **fields}

