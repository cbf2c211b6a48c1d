"""The library's floors (docs/ARCHITECTURE.md): which package may import which, no package-level
cycle, no library module importing the top-level `configs` or `launch`, no package over a fifth of
the library. Imports are read from the source with `ast`, so imports made inside functions count.
"""
from __future__ import annotations

import ast
import collections
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "mage_jax")

# What each package (or top-level module) may import, besides itself. Keep in step with
# docs/ARCHITECTURE.md; a new package must be added here with its floor.
ALLOWED: dict[str, set[str]] = {
    "actions": set(),
    "models": {"sharding"},
    "llm": set(),
    "sharding": set(),
    "data": {"actions", "models", "sharding"},
    "weights": {"models", "sharding"},
    "report": {"data"},
    "machine": {"actions"},
    "tasks": {"machine", "actions", "data"},
    "agent": {"api", "tasks", "machine", "actions", "data", "llm", "models", "weights"},
    "engine": {"api", "models", "data", "weights", "sharding"},
    "train": {"models", "data", "weights", "actions", "sharding", "report"},
    "rl": {"api", "engine", "train", "agent", "tasks", "machine", "data", "models", "weights", "report", "actions",
           "sharding"},
    "forge": {"agent", "tasks", "machine", "actions", "llm", "data"},
    "harness": {"forge", "agent", "tasks", "machine", "actions", "data", "llm"},
    "evolve": {"harness", "forge", "agent", "tasks", "machine", "actions", "data", "llm"},
    "runs": {"api", "evolve", "harness", "forge", "rl", "train", "engine", "agent", "tasks", "machine", "report",
             "data", "weights", "models", "actions", "llm", "sharding"},
    "bench": {"api", "runs", "rl", "train", "engine", "agent", "tasks", "machine", "report", "data", "weights",
              "models", "actions", "llm", "sharding"},
    "api": {"models", "weights", "data", "sharding", "actions"},
}
MAX_SHARE = 0.20


def _node(rel_parts: tuple[str, ...]) -> str:
  """mage_jax/<pkg>/... -> pkg; mage_jax/<module>.py -> module."""
  return rel_parts[1][:-3] if len(rel_parts) == 2 else rel_parts[1]


def _target(module: str) -> str | None:
  parts = module.split(".")
  if parts[0] != "mage_jax" or len(parts) < 2:
    return None
  return parts[1]


def _library_files():
  for dirpath, _, files in os.walk(LIB):
    for name in files:
      if name.endswith(".py"):
        full = os.path.join(dirpath, name)
        yield full, tuple(os.path.relpath(full, ROOT).split(os.sep))


def _imports():
  """(importer node, imported top name or node, file, line) for every import in the library."""
  out = []
  for full, parts in _library_files():
    tree = ast.parse(open(full, encoding="utf-8").read(), full)
    me = _node(parts)
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        assert node.level == 0, f"{full}:{node.lineno}: relative import"
        names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
      else:
        continue
      for name in names:
        out.append((me, name, os.path.join(*parts), node.lineno))
  return out


def _edges():
  edges = collections.defaultdict(list)
  for me, name, where, line in _imports():
    target = _target(name)
    if target and target != me and target in ALLOWED:
      edges[(me, target)].append(f"{where}:{line}")
  return edges


def test_every_import_goes_down_a_floor():
  nodes = {_node(parts) for _, parts in _library_files()} - {"__init__"}
  assert not nodes - set(ALLOWED), f"packages missing from ALLOWED (give them a floor): {nodes - set(ALLOWED)}"
  bad = [f"{a} -> {b} ({sites[0]}{' ...' if len(sites) > 1 else ''})" for (a, b), sites in _edges().items()
         if b not in ALLOWED[a]]
  assert not bad, "imports against the floors:\n" + "\n".join(sorted(bad))


def test_no_package_level_cycle():
  graph = collections.defaultdict(set)
  for a, b in _edges():
    graph[a].add(b)
  seen, stack, cycles = set(), [], []

  def visit(v, path):
    if v in path:
      cycles.append(path[path.index(v):] + [v])
      return
    if v in seen:
      return
    seen.add(v)
    for w in sorted(graph[v]):
      visit(w, path + [v])
  for v in sorted(graph):
    visit(v, [])
  assert not cycles, f"package cycles: {cycles}"


def test_the_library_never_imports_configs_or_launch():
  bad = [f"{where}:{line} imports {name}" for _, name, where, line in _imports()
         if name.split(".")[0] in ("configs", "launch")]
  assert not bad, "\n".join(bad)


def test_no_package_holds_more_than_a_fifth_of_the_library():
  lines = collections.Counter()
  for full, parts in _library_files():
    lines[_node(parts)] += sum(1 for _ in open(full, encoding="utf-8"))
  total = sum(lines.values())
  biggest, n = lines.most_common(1)[0]
  assert n / total <= MAX_SHARE, f"{biggest}: {n} of {total} lines ({n / total:.1%} > {MAX_SHARE:.0%})"


@pytest.mark.parametrize("source, message", [
    ("import configs.models\n", "imports configs"),
    ("def f():\n  from mage_jax.rl import loop\n", "tasks -> rl"),
])
def test_the_checks_catch_a_planted_violation(tmp_path, monkeypatch, source, message):
  """The checks above read the real tree; plant a bad import in a copy of one package's file."""
  pkg = tmp_path / "mage_jax" / "tasks"
  pkg.mkdir(parents=True)
  (pkg / "planted.py").write_text(source)
  monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
  monkeypatch.setattr(sys.modules[__name__], "LIB", str(tmp_path / "mage_jax"))
  with pytest.raises(AssertionError, match=message):
    test_the_library_never_imports_configs_or_launch()
    test_every_import_goes_down_a_floor()


def test_the_cycle_check_catches_a_planted_cycle(tmp_path, monkeypatch):
  for pkg, other in (("tasks", "agent"), ("agent", "tasks")):
    (tmp_path / "mage_jax" / pkg).mkdir(parents=True)
    (tmp_path / "mage_jax" / pkg / "planted.py").write_text(f"def f():\n  import mage_jax.{other}.x\n")
  monkeypatch.setattr(sys.modules[__name__], "LIB", str(tmp_path / "mage_jax"))
  monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
  with pytest.raises(AssertionError, match="package cycles"):
    test_no_package_level_cycle()


def test_every_import_inside_a_function_says_why():
  """An import made inside a function hides a dependency from a reader of the file's head: allowed
  for an optional dependency or a start-up cost, and then the line says which (a `#` comment)."""
  bare = []
  for full, parts in _library_files():
    src = open(full, encoding="utf-8").read()
    lines = src.splitlines()
    for fn in ast.walk(ast.parse(src, full)):
      if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for node in ast.walk(fn):
          if isinstance(node, (ast.Import, ast.ImportFrom)) and not any(
              "#" in lines[i - 1] for i in range(node.lineno, node.end_lineno + 1)):
            bare.append(f"{os.path.join(*parts)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
  assert not bare, "imports inside functions without a reason:\n" + "\n".join(sorted(set(bare)))


def test_the_reason_check_catches_a_bare_function_import(tmp_path, monkeypatch):
  (tmp_path / "mage_jax" / "tasks").mkdir(parents=True)
  (tmp_path / "mage_jax" / "tasks" / "planted.py").write_text(
      "def f():\n  import json  # stdlib: fine with a reason\n\n\ndef g():\n  import csv\n")
  monkeypatch.setattr(sys.modules[__name__], "LIB", str(tmp_path / "mage_jax"))
  monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
  with pytest.raises(AssertionError, match=r"planted.py:6: import csv"):
    test_every_import_inside_a_function_says_why()
