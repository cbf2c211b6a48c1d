"""Typed workflow nodes. Each node declares input ports (name -> type) and one output type;
`workflow.Workflow` type-checks the wiring when it is built and runs the nodes in order.

Nodes: sample | llm_params -> build -> [phrase] -> [llm_reword] -> setup, checker, prepare,
package, file_gate.

Types flowing between nodes (all JSON values, so every node output can be cached on disk):
  seed     int                          the engine's root input
  params   dict                         a skill's parameters (valid against its param_schema)
  fields   dict                         Skill.build's package fields
  setup    list                         validated preparer specs (the harness's setup list)
  checker  dict                         a validated checker spec
  files    {path: {text, error}}        each prepared file opened with its library
  package  dict                         a task package (package.py format)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from typing import Any, Callable

from mage_jax.forge import consistency, phrasing
from mage_jax.forge import filecheck
from mage_jax.forge.llm import LLMNode
from mage_jax.forge.skill import Skill
from mage_jax.tasks import checkers
from mage_jax.tasks import preparers
from mage_jax.tasks.package import PackageError, package_from_dict

# Part of every node's cache key: bump when a node's behaviour changes (e.g. a new file reader),
# so cached outputs of the old behaviour are not read back.
ENGINE_VERSION = 2

TYPES = ("seed", "params", "fields", "setup", "checker", "files", "package")


class Rejected(Exception):
  """A node refuses its input: the task is dropped and counted under `reason`."""

  def __init__(self, reason: str, detail: str):
    super().__init__(f"{reason}: {detail}")
    self.reason, self.detail = reason, detail


@dataclasses.dataclass
class Context:
  skill: Skill
  seed: int
  client: Any = None                 # llm.ChatClient when the workflow has LLM nodes
  llm_calls: list = dataclasses.field(default_factory=list)  # llm.CallRecord of this run
  gate_events: list = dataclasses.field(default_factory=list)  # consistency verdicts of reworded replies


@dataclasses.dataclass
class Node:
  name: str
  kind: str
  inputs: dict[str, str]
  output: str
  config: dict[str, Any] = dataclasses.field(default_factory=dict)  # part of the cache key
  cacheable: bool = True

  def run(self, ctx: Context, **inputs: Any) -> Any:
    raise NotImplementedError


def canonical(value: Any) -> str:
  return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def digest(value: Any) -> str:
  return hashlib.sha256(canonical(value).encode()).hexdigest()


# ---- parameters ----------------------------------------------------------------------------------
@dataclasses.dataclass
class SampleNode(Node):
  """Seeded deterministic draw from the skill's value pools. `avoid` ({param: [values]}, set by
  a refinement round) redraws (up to 32 times) while a top-level value is one to avoid."""

  def run(self, ctx: Context, seed: int = 0) -> dict[str, Any]:
    avoid = {k: {canonical(v) for v in vs} for k, vs in self.config.get("avoid", {}).items()}
    rng = random.Random(f"{ctx.skill.id}:{ctx.seed}")
    params = ctx.skill.sample(rng)
    for _ in range(32):
      if not any(canonical(params.get(k)) in vs for k, vs in avoid.items()):
        break
      params = ctx.skill.sample(rng)
    return params


@dataclasses.dataclass
class LLMParamsNode(Node):
  """An LLM proposes params against the skill's param_schema; the seeded draw is its fallback."""
  max_retries: int = 2

  def run(self, ctx: Context, seed: int = 0) -> dict[str, Any]:
    s = ctx.skill
    node = LLMNode(self.name, PARAMS_PROMPT, s.param_schema, max_retries=self.max_retries,
                   fallback=lambda inputs: SampleNode("fallback", "sample", {}, "params").run(ctx))
    example = SampleNode("example", "sample", {}, "params").run(Context(s, ctx.seed + 10**6))
    value, rec = node.run(ctx.client, {"skill_id": s.id, "description": s.description,
                                       "example": example, "seed": ctx.seed}, skill=s.id, seed=ctx.seed)
    ctx.llm_calls.append(rec)
    return value


PARAMS_PROMPT = ("Skill {skill_id}: {description}\nPropose one new, realistic parameter set for a "
                 "task of this skill (variation {seed}). Example of a valid set: {example}\n"
                 "Reply with one JSON object matching this schema: {schema}")


@dataclasses.dataclass
class RewordNode(Node):
  """An LLM rewords the instruction. Every reply passes the consistency gate (forge/consistency.py:
  literals, checker values, ordering / comparison / negation words) and, with config `judge`, an
  LLM judge that must answer same=true; a reply that fails is fed back and retried, and when the
  retries run out the original stays (the fallback). Every verdict goes to ctx.gate_events, so the
  round report counts rejected rewordings by reason."""
  max_retries: int = 1

  def run(self, ctx: Context, fields: dict[str, Any]) -> dict[str, Any]:
    original, checker = fields["instruction"], fields.get("checker")
    keep = filecheck.literal_values(original)

    def check(value: dict[str, Any]) -> None:
      found = consistency.problems(original, value["instruction"], checker)
      if not found and self.config.get("judge"):
        found = self._judge(ctx, original, value["instruction"], checker)
      ctx.gate_events.append({"reasons": sorted({consistency.reason_of(p) for p in found})})
      if found:
        raise ValueError("the rewording changes what the task asks: " + "; ".join(found)[:300])

    node = LLMNode(self.name, REWORD_PROMPT, REWORD_SCHEMA, max_retries=self.max_retries,
                   fallback=lambda inputs: {"instruction": original}, check=check)
    value, rec = node.run(ctx.client, {"instruction": original, "keep": keep}, skill=ctx.skill.id,
                          seed=ctx.seed)
    ctx.llm_calls.append(rec)
    return dict(fields, instruction=value["instruction"])

  def _judge(self, ctx: Context, original: str, reworded: str, checker: Any) -> list[str]:
    judge = LLMNode(self.name + "_judge", consistency.JUDGE_PROMPT, consistency.JUDGE_SCHEMA,
                    system=consistency.JUDGE_SYSTEM, max_retries=1,
                    fallback=lambda inputs: {"same": False, "why": "no valid judge reply"})
    verdict, rec = judge.run(ctx.client, consistency.judge_inputs(original, reworded, checker),
                             skill=ctx.skill.id, seed=ctx.seed)
    ctx.llm_calls.append(rec)
    return [] if verdict["same"] else [f"judge_disagrees: {str(verdict.get('why', ''))[:150]}"]


REWORD_PROMPT = ("Reword this task instruction for a computer-use agent without changing what it "
                 "asks. Keep these values verbatim: {keep}\nInstruction: {instruction}\n"
                 "Reply with JSON matching: {schema}")
REWORD_SCHEMA = {"type": "object", "required": ["instruction"],
                 "properties": {"instruction": {"type": "string", "minLength": 10}}}


@dataclasses.dataclass
class PhraseNode(Node):
  """A seeded frame around the instruction (forge/phrasing.py); the consistency gate must pass,
  else the bare instruction stays."""

  def run(self, ctx: Context, fields: dict[str, Any]) -> dict[str, Any]:
    original = fields["instruction"]
    framed = phrasing.frame(original, ctx.skill.id, ctx.seed)
    if consistency.problems(original, framed, fields.get("checker")):
      return fields
    return dict(fields, instruction=framed)


# ---- package pieces ------------------------------------------------------------------------------
@dataclasses.dataclass
class BuildNode(Node):
  def run(self, ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    fields = ctx.skill.build(params)
    missing = [k for k in ("instruction", "checker", "references") if k not in fields]
    if missing:
      raise Rejected("build", f"Skill.build returned no {missing}")
    return fields


@dataclasses.dataclass
class SetupNode(Node):
  """The harness's setup list, every preparer spec validated."""

  def run(self, ctx: Context, fields: dict[str, Any]) -> list[dict[str, Any]]:
    setup = list(fields.get("setup", []))
    for i, spec in enumerate(setup):
      try:
        preparers.validate_spec(spec, f"setup[{i}]")
      except ValueError as e:
        raise Rejected("setup_spec", str(e)) from None
    return setup


@dataclasses.dataclass
class CheckerNode(Node):
  """The checker (rubric) spec, validated against the harness's checker types."""

  def run(self, ctx: Context, fields: dict[str, Any]) -> dict[str, Any]:
    try:
      checkers.validate_spec(fields["checker"], "checker")
    except ValueError as e:
      raise Rejected("checker_spec", str(e)) from None
    return fields["checker"]


@dataclasses.dataclass
class PrepareNode(Node):
  """Runs the file-writing preparers on the host and opens every file with its library."""

  def run(self, ctx: Context, setup: list[dict[str, Any]]) -> dict[str, Any]:
    return filecheck.prepare_and_open(setup)


CHANNELS_OF_KIND = {"terminal": ["terminal"], "gui": ["gui"], "hybrid": ["gui", "terminal"]}


@dataclasses.dataclass
class PackageNode(Node):
  """Assembles the package; its id is the skill id plus a hash of what the task asks."""

  def run(self, ctx: Context, params: dict[str, Any], fields: dict[str, Any], setup: list,
          checker: dict[str, Any]) -> dict[str, Any]:
    s = ctx.skill
    body = {"instruction": fields["instruction"], "setup": setup, "checker": checker}
    pkg = {"id": f"{s.id}-{digest(body)[:10]}", "instruction": fields["instruction"], "kind": s.kind,
           "apps": list(s.apps), "skills": [s.id] + [x for x in fields.get("skills", []) if x != s.id],
           "channels": fields.get("channels", CHANNELS_OF_KIND[s.kind]), "setup": setup,
           "checker": checker, "references": fields["references"]}
    for key in ("near_miss", "max_steps"):
      if fields.get(key) is not None:
        pkg[key] = fields[key]
    try:
      package_from_dict(pkg, source=pkg["id"])
    except (PackageError, ValueError) as e:
      raise Rejected("schema", str(e)) from None
    return pkg


@dataclasses.dataclass
class FileGateNode(Node):
  """File-level gate: every prepared file opened; every value `mentions` names is in its file."""

  def run(self, ctx: Context, package: dict[str, Any], files: dict[str, Any],
          params: dict[str, Any]) -> dict[str, Any]:
    problem = filecheck.check_mentions(files, ctx.skill.mentions(params))
    if problem:
      raise Rejected("file_gate", problem)
    return package


# kind -> (class, input ports, output type)
PORTS: dict[str, tuple[Callable[..., Node], dict[str, str], str]] = {
    "sample": (SampleNode, {"seed": "seed"}, "params"),
    "llm_params": (LLMParamsNode, {"seed": "seed"}, "params"),
    "llm_reword": (RewordNode, {"fields": "fields"}, "fields"),
    "phrase": (PhraseNode, {"fields": "fields"}, "fields"),
    "build": (BuildNode, {"params": "params"}, "fields"),
    "setup": (SetupNode, {"fields": "fields"}, "setup"),
    "checker": (CheckerNode, {"fields": "fields"}, "checker"),
    "prepare": (PrepareNode, {"setup": "setup"}, "files"),
    "package": (PackageNode, {"params": "params", "fields": "fields", "setup": "setup",
                              "checker": "checker"}, "package"),
    "file_gate": (FileGateNode, {"package": "package", "files": "files", "params": "params"}, "package"),
}


def make(kind: str, name: str | None = None, **config: Any) -> Node:
  """A node of a known kind with its standard ports; `config` is part of its cache key."""
  if kind not in PORTS:
    raise ValueError(f"unknown node kind {kind!r}; known: {sorted(PORTS)}")
  cls, inputs, output = PORTS[kind]
  extra = {k: config.pop(k) for k in ("max_retries",) if k in config}
  return cls(name or kind, kind, dict(inputs), output, config, **extra)

