r"""A skill's generation workflow: a small DAG of typed nodes (forge/nodes.py), type-checked
when built, run with a content-addressed per-node cache on disk (so a run resumes).

  wf = default_workflow(skill, llm_params=False, reword=False)
  outcome = wf.run(seed=7, cache=NodeCache(dir), client=None)

The default DAG:

  seed -> sample | llm_params -> build -> [phrase] -> [llm_reword] -> setup  -> prepare -----------\
                                                      \-> checker -> package -> file_gate -> package

A node's cache key is the hash of its kind, name, config, the skill's fingerprint (the source
of its sample/build/mentions) and the hashes of its inputs' values, so an edited skill or a
refined node re-runs and everything else is read back.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import time
from typing import Any

from mage_jax.forge import nodes as N
from mage_jax.forge.llm import EndpointError
from mage_jax.forge.skill import Skill


class WorkflowError(ValueError):
  """A workflow whose nodes don't connect; the message names the skill and the node."""


@dataclasses.dataclass
class Outcome:
  skill: str
  seed: int
  package: dict[str, Any] | None = None
  params: dict[str, Any] | None = None
  reason: str | None = None         # why it was rejected
  node: str | None = None           # the node that rejected it
  detail: str | None = None
  llm_calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)
  cache_hits: int = 0
  node_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
  gate_events: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # consistency verdicts


def skill_fingerprint(skill: Skill) -> str:
  parts = [skill.id, skill.kind, json.dumps(skill.param_schema, sort_keys=True)]
  for fn in (skill.sample, skill.build, skill.mentions):
    try:
      parts.append(inspect.getsource(fn))
    except (OSError, TypeError):
      parts.append(getattr(getattr(fn, "__code__", None), "co_code", b"").hex())
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class NodeCache:
  """Content-addressed JSON files: <dir>/<key[:2]>/<key>.json. Writes are atomic (rename)."""

  def __init__(self, directory: str | None):
    self.dir = directory

  def _path(self, key: str) -> str:
    return os.path.join(self.dir, key[:2], key + ".json")

  def get(self, key: str) -> tuple[bool, Any]:
    if not self.dir:
      return False, None
    try:
      with open(self._path(key)) as f:
        return True, json.load(f)["value"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
      return False, None

  def put(self, key: str, value: Any) -> None:
    if not self.dir:
      return
    path = self._path(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump({"value": value}, f)
    os.replace(tmp, path)


class Workflow:
  """Nodes plus wiring {node: {port: upstream node or "seed"}}; checked at construction."""

  def __init__(self, skill: Skill, nodes: list[N.Node], wiring: dict[str, dict[str, str]], output: str):
    self.skill, self.output = skill, output
    self.nodes = {}
    for n in nodes:
      if n.name in self.nodes or n.name == "seed":
        raise WorkflowError(f"skill {skill.id}: node name {n.name!r} used twice (or reserved)")
      self.nodes[n.name] = n
    self.wiring = wiring
    self.order = self._check()
    self.fingerprint = skill_fingerprint(skill)

  def _check(self) -> list[str]:
    sid = self.skill.id
    types = {"seed": "seed", **{name: n.output for name, n in self.nodes.items()}}
    for name, n in self.nodes.items():
      wires = self.wiring.get(name, {})
      for port, want in n.inputs.items():
        src = wires.get(port)
        if src is None:
          raise WorkflowError(f"skill {sid}: node {name!r} ({n.kind}) has no input wired to port {port!r}")
        if src not in types:
          raise WorkflowError(f"skill {sid}: node {name!r} port {port!r} is wired to unknown node {src!r}")
        if types[src] != want:
          raise WorkflowError(f"skill {sid}: node {name!r} port {port!r} takes {want!r} but node {src!r} "
                              f"outputs {types[src]!r}")
      extra = set(wires) - set(n.inputs)
      if extra:
        raise WorkflowError(f"skill {sid}: node {name!r} ({n.kind}) has no ports {sorted(extra)}")
    order, state = [], {}

    def visit(name: str, path: tuple[str, ...]) -> None:
      if name == "seed" or state.get(name) == "done":
        return
      if state.get(name) == "visiting":
        raise WorkflowError(f"skill {sid}: cycle through nodes {' -> '.join(path + (name,))}")
      state[name] = "visiting"
      for src in self.wiring.get(name, {}).values():
        visit(src, path + (name,))
      state[name] = "done"
      order.append(name)
    for name in self.nodes:
      visit(name, ())
    if self.output not in self.nodes or self.nodes[self.output].output != "package":
      raise WorkflowError(f"skill {sid}: output node {self.output!r} must exist and output 'package'")
    return order

  def describe(self) -> dict[str, Any]:
    return {"skill": self.skill.id, "nodes": [{"name": n, "kind": self.nodes[n].kind,
                                               "config": self.nodes[n].config,
                                               "inputs": self.wiring.get(n, {})} for n in self.order]}

  def run(self, seed: int, cache: NodeCache | None = None, client: Any = None) -> Outcome:
    """Every node in order; a `Rejected` (or a node's exception) ends the run as a rejection
    naming the node. LLM endpoint errors propagate (every later task would fail the same way)."""
    cache = cache or NodeCache(None)
    ctx = N.Context(self.skill, seed, client)
    out = Outcome(self.skill.id, seed)
    values: dict[str, Any] = {"seed": seed}
    hashes: dict[str, str] = {"seed": N.digest(seed)}
    for name in self.order:
      node, t0 = self.nodes[name], time.monotonic()
      inputs = {port: values[src] for port, src in self.wiring.get(name, {}).items()}
      key = N.digest({"v": N.ENGINE_VERSION, "kind": node.kind, "name": name, "config": node.config, "skill": self.fingerprint,
                      "inputs": {p: hashes[s] for p, s in self.wiring.get(name, {}).items()}})
      hit, value = cache.get(key) if node.cacheable else (False, None)
      if hit and isinstance(value, dict) and "__rejected__" in value:
        out.reason, out.node, out.detail = value["__rejected__"], name, value["detail"]
        out.cache_hits += 1
        return out
      if hit:
        out.cache_hits += 1
      else:
        n_calls = len(ctx.llm_calls)
        try:
          value = node.run(ctx, **inputs)
        except N.Rejected as e:
          out.reason, out.node, out.detail = e.reason, name, e.detail
          cache.put(key, {"__rejected__": e.reason, "detail": e.detail})
          return out
        except EndpointError:
          raise
        except Exception as e:  # noqa: BLE001 - a crashing skill function rejects one task, counted
          out.reason, out.node, out.detail = "node_error", name, f"{type(e).__name__}: {e}"
          return out
        finally:
          out.llm_calls += [dataclasses.asdict(r) for r in ctx.llm_calls[n_calls:]]
          out.gate_events = list(ctx.gate_events)
        if node.cacheable:
          cache.put(key, value)
      out.node_seconds[name] = time.monotonic() - t0
      values[name], hashes[name] = value, N.digest(value)
      if node.output == "params" and out.params is None:
        out.params = value
    out.package = values[self.output]
    return out


def default_workflow(skill: Skill, *, llm_params: bool = False, reword: bool = False,
                     avoid: dict[str, list[Any]] | None = None, max_retries: int = 2,
                     judge: bool = False, phrase: bool = False) -> Workflow:
  """The standard DAG of a skill (see the module docstring). `avoid` prunes value pools of the
  sample node (a refinement round sets it from rejected tasks); `judge` adds the LLM judge to the
  reword node's consistency gate; `phrase` the seeded instruction frame (forge/phrasing.py)."""
  if llm_params:
    first = N.make("llm_params", "params", max_retries=max_retries)
  else:
    first = N.make("sample", "params", **({"avoid": avoid} if avoid else {}))
  ns = [first, N.make("build")]
  wiring = {"params": {"seed": "seed"}, "build": {"params": "params"}}
  fields = "build"
  if phrase:
    ns.append(N.make("phrase"))
    wiring["phrase"] = {"fields": fields}
    fields = "phrase"
  if reword:
    ns.append(N.make("llm_reword", "reword", max_retries=max_retries, **({"judge": True} if judge else {})))
    wiring["reword"] = {"fields": fields}
    fields = "reword"
  ns += [N.make("setup"), N.make("checker"), N.make("prepare"), N.make("package"), N.make("file_gate")]
  wiring.update({"setup": {"fields": fields}, "checker": {"fields": fields}, "prepare": {"setup": "setup"},
                 "package": {"params": "params", "fields": fields, "setup": "setup", "checker": "checker"},
                 "file_gate": {"package": "package", "files": "prepare", "params": "params"}})
  return Workflow(skill, ns, wiring, "file_gate")
