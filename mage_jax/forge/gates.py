"""Forge's package-level gates and de-duplication.

De-duplication runs before the sandbox gates (they are the expensive part). A candidate is
dropped when a kept package of the same skill has the same parameter set (`dedup_params`),
when a kept package of any skill has the same normalised instruction and the same checker
(`dedup_instruction`: the same task, whatever the skill), or when a kept package of the same
skill has the same checker and an instruction whose word 3-gram Jaccard similarity is >= `near`
(`dedup_near_instruction`: a reworded copy). The same instruction over different data (a
different checker) is a different task and is kept.

`gate_package` runs mage_jax/forge/package_gates.check_package (schema / setup / initial_zero /
reference_one for every reference / near_miss_below_one / no_blind_exploit) in the sandbox,
on the desktop for GUI and hybrid tasks, and times it; results are cached by package hash so
a resumed run does not re-gate.

The harness pauses between a solution and its score only for packages with a desktop
(`gates.settle_seconds`): measured here on 22 terminal packages (one process, quiet machine),
2.03 -> 1.23 s wall per package, the same CPU (0.6 s) and the same scores.
"""
from __future__ import annotations

import re
import time
from typing import Any

from mage_jax.agent.env import EnvConfig, LocalEnv
from mage_jax.forge.nodes import digest
from mage_jax.forge.package_gates import check_package
from mage_jax.forge.phrasing import unframe


def normalise(text: str) -> str:
  # keeps . / - inside words (file names, numbers); drops other punctuation and a final full stop
  return re.sub(r"\s+", " ", re.sub(r"[^\w\s.'\"/-]", " ", text.lower())).strip().rstrip(".").strip()


def shingles(text: str, n: int = 3) -> frozenset:
  words = normalise(text).split()
  return frozenset(tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1)))


def jaccard(a: frozenset, b: frozenset) -> float:
  return len(a & b) / max(1, len(a | b))


class Deduper:
  """Keeps the first of near-identical candidates; `seen` can be primed with accepted packages
  of earlier rounds (resume)."""

  def __init__(self, near: float = 0.9):
    self.near = near
    self.resumed: set[str] = set()                         # ids already in the suite (resume)
    self.instructions: dict[str, str] = {}                 # normalised instruction -> package id
    self.params: dict[str, str] = {}                       # skill + params hash -> package id
    self.by_skill: dict[str, list[tuple[frozenset, str, str]]] = {}

  def check(self, skill: str, params: Any, instruction: str, checker: Any, pkg_id: str) -> tuple[str, str] | None:
    """None (and remembers the candidate) or (reason, the id of the package it duplicates).
    Instructions are compared without their phrasing frame (forge/phrasing.py)."""
    instruction = unframe(instruction)
    pkey = skill + ":" + digest(params)
    if params is not None and pkey in self.params:
      return "dedup_params", self.params[pkey]
    ckey = digest(checker)
    norm = normalise(instruction) + "\0" + ckey
    if norm in self.instructions:
      return "dedup_instruction", self.instructions[norm]
    sh = shingles(instruction)
    for other, other_ckey, oid in self.by_skill.get(skill, []):
      if other_ckey == ckey and jaccard(sh, other) >= self.near:
        return "dedup_near_instruction", oid
    self.instructions[norm] = pkg_id
    if params is not None:
      self.params[pkey] = pkg_id
    self.by_skill.setdefault(skill, []).append((sh, ckey, pkg_id))
    return None


def gate_package(pkg: dict[str, Any], env_cfg: dict[str, Any] | None = None) -> dict[str, Any]:
  """One package through the harness gates in a fresh sandbox; a JSON-able summary."""
  cfg = EnvConfig(**(env_cfg or {}))
  t0 = time.monotonic()
  try:
    g = check_package(pkg, lambda: LocalEnv(cfg))
  except Exception as e:  # noqa: BLE001 - the gate machinery failed: a counted rejection, not a crash
    return {"id": pkg.get("id"), "passed": False, "rejection": "gate_error",
            "reason": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0, "scores": {}}
  return {"id": g.task_id, "passed": g.passed, "rejection": g.rejection, "reason": (g.reason or "")[:500],
          "seconds": time.monotonic() - t0, "exploit_seconds": g.exploit_seconds, "scores": g.scores,
          "exploit_errors": g.exploit_errors}
