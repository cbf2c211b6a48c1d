"""The one task loader: a suite name (builtin | realapps) or a directory of packages, filtered by
task ids and kinds. launch.eval, launch.collect, launch.evolve and launch.rl all load through it."""
from __future__ import annotations

from mage_jax.tasks.package import TaskPackage, load_suite
from mage_jax.tasks.realapps.suite import realapp_packages

NAMED = ("builtin", "realapps")


def load_tasks(suite: str, ids: str = "", kinds: str = "", field: str = "config") -> list[TaskPackage]:
  """`suite` -> packages; `ids` ("a,b") keeps those (an unknown id is an error naming
  `<field>.tasks`); `kinds` ("gui,hybrid") keeps those kinds. May return an empty list."""
  if suite == "builtin":
    from mage_jax.tasks.builtin import builtin_packages   # the built-in suite builds its packages on call
    pkgs = builtin_packages()
  elif suite == "realapps":
    pkgs = realapp_packages()
  else:
    pkgs = load_suite(suite)
  if ids:
    wanted = ids.split(",")
    missing = set(wanted) - {p.id for p in pkgs}
    if missing:
      raise ValueError(f"{field}.tasks: unknown task ids {sorted(missing)}")
    pkgs = [p for p in pkgs if p.id in wanted]
  if kinds:
    pkgs = [p for p in pkgs if p.kind in kinds.split(",")]
  return pkgs
