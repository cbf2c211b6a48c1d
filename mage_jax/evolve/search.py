"""What harness evolution compares and proposes: the score, the rule-based proposer and the LLM
authoring node.

Score: a lexicographic spec such as "success_rate:max,mean_steps:min" over a variant's
evaluation row (agent/evaluation.py `_row`: success_rate, mean_steps, output_tokens_per_task,
invalid_call_rate, gui_share, terminal_share, extra_share, ...). The first metric decides, the
next breaks ties.

Proposals are config diffs (variant.apply_diff): the rule-based proposer enumerates one-step
neighbours (prune one extra tool, add one extra tool, add one library, swap the system prompt,
change the terminal output cap); the LLM authoring node reads the results table and excerpts of
failing episodes and returns a diff. A diff that does not validate against the variant schema
is rejected and counted by reason, never evaluated.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Sequence

from mage_jax.forge import llm
from mage_jax.harness.variant import HarnessVariant, VariantError

METRICS = ("success_rate", "mean_steps", "output_tokens_per_task", "invalid_call_rate", "gui_share",
           "terminal_share", "extra_share", "mean_score", "model_calls_per_task")


@dataclasses.dataclass(frozen=True)
class Score:
  terms: tuple[tuple[str, str], ...]   # (metric, "max" | "min"), most important first

  @classmethod
  def parse(cls, spec: str) -> "Score":
    terms = []
    for part in spec.split(","):
      metric, _, direction = part.strip().partition(":")
      direction = direction or "max"
      if metric not in METRICS or direction not in ("max", "min"):
        raise ValueError(f"evolve.score: bad term {part!r}; expected <metric>:max|min with metric in {METRICS}")
      terms.append((metric, direction))
    if not terms:
      raise ValueError("evolve.score is empty")
    return cls(tuple(terms))

  def key(self, row: dict[str, Any]) -> tuple[float, ...]:
    """Smaller is better (sort ascending)."""
    return tuple(-row[m] if d == "max" else row[m] for m, d in self.terms)

  def __str__(self) -> str:
    return ",".join(f"{m}:{d}" for m, d in self.terms)


@dataclasses.dataclass
class Proposal:
  variant: HarnessVariant
  diff: dict[str, Any]
  source: str                          # rule | llm
  rationale: str = ""


@dataclasses.dataclass
class SearchSpace:
  """Where the rule-based proposer may move."""
  extra_tools: Sequence[str] = ()                     # candidates to add
  libraries: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> host tree
  system_prompts: Sequence[str] = ()
  max_output: Sequence[int] = ()


def rule_proposals(parent: HarnessVariant, space: SearchSpace) -> list[Proposal]:
  """Every one-step neighbour of `parent` in `space`, in a fixed order."""
  diffs: list[dict[str, Any]] = []
  for name in parent.extra_tools:
    diffs.append({"extra_tools": [n for n in parent.extra_tools if n != name]})
  for name in space.extra_tools:
    if name not in parent.extra_tools:
      diffs.append({"extra_tools": list(parent.extra_tools) + [name]})
  libs = dict(parent.libraries)
  for name, path in space.libraries.items():
    if name not in libs:
      diffs.append({"libraries": {**libs, name: path}})
  for prompt in space.system_prompts:
    if prompt != parent.system_prompt:
      diffs.append({"system_prompt": prompt})
  for cap in space.max_output:
    if cap != parent.max_output:
      diffs.append({"max_output": cap})
  out = []
  for d in diffs:
    try:
      out.append(Proposal(parent.apply_diff(d), d, "rule"))
    except VariantError:
      continue  # e.g. a candidate tool the parent's toolset can't describe
  return out


AUTHOR_SYSTEM = ("You improve the harness of a computer-use teacher agent: its tools, prompt, scaffold "
                 "and terminal environment. Reply with JSON only.")
AUTHOR_TEMPLATE = """Results of the harness variants evaluated so far (one row per variant):
{table}

The current best variant's config:
{config}

Excerpts of its failing episodes:
{failures}

The variant schema's fields: {fields}. extra_tools may name only: {extra_tools}.
Propose ONE change to the current best variant as a diff: an object mapping field names to their
new values (only the fields you change). Reply with JSON matching this schema:
{schema}"""
AUTHOR_SCHEMA = {"type": "object", "properties": {"diff": {"type": "object"},
                                                   "rationale": {"type": "string"}},
                 "required": ["diff"]}


@dataclasses.dataclass
class AuthorNode:
  """The LLM authoring node (forge/llm.py: its client, retries and the shared token/dollar Ledger)."""
  client: llm.ChatClient
  ledger: llm.Ledger
  node: llm.LLMNode = dataclasses.field(default_factory=lambda: llm.LLMNode(
      "harness_author", AUTHOR_TEMPLATE, AUTHOR_SCHEMA, system=AUTHOR_SYSTEM, max_retries=1))

  def propose(self, parent: HarnessVariant, table: str, failures: Sequence[str],
              rejected: dict[str, int], seed: int = 0) -> Proposal | None:
    """A validated proposal, or None with the reason counted in `rejected`."""
    from mage_jax.harness import extra_tools as xt
    inputs = {"table": table, "config": json.dumps(parent.to_dict(), indent=1),
              "failures": "\n---\n".join(failures) or "(none)",
              "fields": sorted(f.name for f in dataclasses.fields(HarnessVariant) if f.name != "name"),
              "extra_tools": sorted(xt.EXTRA_TOOLS)}
    try:
      value, _ = self.node.run(self.client, inputs, skill="harness_evolution", seed=seed, ledger=self.ledger)
    except llm.LLMNodeError:
      rejected["unparseable_reply"] = rejected.get("unparseable_reply", 0) + 1
      return None
    try:
      child = parent.apply_diff(value["diff"])
    except VariantError as e:
      reason = "invalid_diff " + str(e).split(":")[0]  # the field the message names
      rejected[reason] = rejected.get(reason, 0) + 1
      return None
    return Proposal(child, value["diff"], "llm", str(value.get("rationale", ""))[:500])
