"""What harness evolution compares and proposes: the score, the rule-based proposer and the LLM
authoring node.

Score: a lexicographic spec such as "success_rate:max:0.03,dollars_per_task:min" over a variant's
evaluation row (agent/evaluation.py `_row`: success_rate, mean_steps, output_tokens_per_task,
prompt_tokens_per_task, tokens_per_task, dollars_per_task (`priced`), invalid_call_rate,
gui_share, terminal_share, extra_share, ...). The first metric decides (up to
its optional tolerance), the next breaks ties.

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
from mage_jax.harness import extra_tools as xt
from mage_jax.harness.variant import HarnessVariant, VariantError

METRICS = ("success_rate", "mean_steps", "output_tokens_per_task", "invalid_call_rate", "gui_share",
           "terminal_share", "extra_share", "mean_score", "model_calls_per_task", "prompt_tokens_per_task",
           "tokens_per_task", "dollars_per_task")


def priced(row: dict[str, Any], prices: Any, model: str) -> dict[str, Any]:
  """`row` with `dollars_per_task` and its source: the endpoint's priced replies ("usage") when
  the policy reported any, else its prompt + completion tokens priced by `prices` (an
  llm.pricing.PriceTable) as `model` ("price_table": a scripted teacher's counted tokens)."""
  if row.get("priced_calls"):
    return dict(row, dollars_source="usage")
  return dict(row, dollars_source="price_table",
              dollars_per_task=prices.dollars(model, round(row.get("prompt_tokens_per_task", 0)),
                                              round(row.get("output_tokens_per_task", 0))))


@dataclasses.dataclass(frozen=True)
class Score:
  """Lexicographic selection; a term may carry a tolerance ("success_rate:max:0.03"): every
  variant within it of the best value of that term counts as best, and the next term decides
  among them. Tolerances absorb evaluation noise (one episode of 42 is 0.024 of success rate)
  without letting a chain of small losses add up: the bound is measured from the best, not
  from the previous pick."""
  terms: tuple[tuple[str, str, float], ...]   # (metric, "max" | "min", tolerance), most important first

  @classmethod
  def parse(cls, spec: str) -> "Score":
    terms = []
    for part in spec.split(","):
      bits = part.strip().split(":")
      metric, direction, tol = bits[0], bits[1] if len(bits) > 1 else "max", bits[2] if len(bits) > 2 else "0"
      try:
        tolerance = float(tol)
      except ValueError:
        tolerance = -1.0
      if len(bits) > 3 or metric not in METRICS or direction not in ("max", "min") or tolerance < 0:
        raise ValueError(f"evolve.score: bad term {part!r}; expected <metric>:max|min[:tolerance >= 0] "
                         f"with metric in {METRICS}")
      terms.append((metric, direction, tolerance))
    if not terms:
      raise ValueError("evolve.score is empty")
    return cls(tuple(terms))

  def key(self, row: dict[str, Any]) -> tuple[float, ...]:
    """The row's values, signed so that smaller is better (for logs and sorting)."""
    return tuple(-row[m] if d == "max" else row[m] for m, d, _ in self.terms)

  def select(self, rows: Sequence[dict[str, Any]]) -> int:
    """Index of the best row; exact ties go to the earliest."""
    alive = list(range(len(rows)))
    for i, (metric, direction, tol) in enumerate(self.terms):
      signed = {j: self.key(rows[j])[i] for j in alive}
      best = min(signed.values())
      alive = [j for j in alive if signed[j] <= best + tol]
    return alive[0]

  def __str__(self) -> str:
    return ",".join(f"{m}:{d}" + (f":{t:g}" if t else "") for m, d, t in self.terms)


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
