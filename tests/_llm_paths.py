"""The five LLM paths of the recipe, each run for one call through an endpoint config
(configs/common.py endpoint_fields + base_url, model): Forge's params node, the
harness-evolution author, the teacher policy (OpenAIChatPolicy), step reasoning synthesis and
the synthesis judge. Shared by the strict-stub and the real-vLLM tests."""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from mage_jax.actions import schema as tools
from mage_jax.agent.episode import PolicyRequest
from mage_jax.agent.policies import OpenAIChatPolicy
from mage_jax.tasks.builtin import builtin_packages
from mage_jax.data import trajectory as tr
from mage_jax.evolve.search import AuthorNode
from mage_jax.forge import llm
from mage_jax.harness import synthesis
from mage_jax.harness.variant import HarnessVariant
from mage_jax.llm.client import from_config

CLICK = tr.ToolCall("computer_use", {"action": "left_click", "coordinate": [113, 158]})


def episode() -> tr.Episode:
  task = next(t for t in builtin_packages() if t.id == "gui_click_red")
  return tr.Episode(id=task.id, instruction=task.instruction, source="teacher",
                    steps=[tr.Step(tr.Observation(None, None), "teacher think", "Click Red", CLICK)])


def stub_responder(body: dict[str, Any]) -> dict[str, Any] | str:
  """What a competent model answers on each path (the strict stub's replies)."""
  from mage_jax.forge.cost import workflow_responder
  messages = body["messages"]
  last = messages[-1]["content"] if isinstance(messages[-1]["content"], str) else ""
  if "Executed call" in last:                                   # the judge
    return json.dumps({"contradicts": False, "reason": "consistent"})
  if "The action executed at this step was" in last:            # reasoning synthesis
    return tools.format_response("The Red button is on screen.", "Click Red", CLICK.name, CLICK.arguments)
  if "harness" in str(messages[0].get("content", "")).lower() and "diff" in last:  # the author
    return json.dumps({"diff": {"max_output": 2000}, "rationale": "shorter observations"})
  if body.get("tools"):                                         # the teacher, native tool calls
    return {"role": "assistant", "content": "<think>\nClick it.\n</think>\n\nAction: Click Red",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": CLICK.name, "arguments": json.dumps(CLICK.arguments)}}]}
  if len(messages) >= 2:
    return workflow_responder(messages)                         # Forge's params and reword nodes
  return json.dumps({"ok": True})


def run_paths(endpoint: dict[str, Any], *, max_tokens: int = 64, tool_protocol: str = "native") -> dict[str, Any]:
  """One call per path; returns each path's outcome and what it recorded."""
  from mage_jax.data.tokenizer import load_tokenizer
  from mage_jax.forge.skill import REGISTRY
  from mage_jax.forge.workflow import NodeCache, default_workflow
  block = dict(endpoint, max_tokens=max_tokens, temperature=0.0)
  out: dict[str, Any] = {}
  # Forge: a workflow whose params node asks the endpoint
  client = llm.client_from_config(dict(block, model=endpoint.get("model", "mage")))
  wf = default_workflow(REGISTRY["test.text.upper"], llm_params=True, reword=False, max_retries=0)
  res = wf.run(7, NodeCache(None), client)
  out["forge"] = res.llm_calls
  # the harness-evolution author
  author = AuthorNode(llm.client_from_config(block), llm.Ledger())
  rejected: dict[str, int] = {}
  out["author"] = (author.propose(HarnessVariant(name="seed", max_steps=6), "table", [], rejected),
                   author.ledger.totals(), rejected)
  # the teacher policy: the rendered prompt of a one-line task
  tok = load_tokenizer("")
  prompt = "<|im_start|>user\nClick the red button.<|im_end|>\n<|im_start|>assistant\n"
  ep = tr.Episode(id="t", instruction="Click the red button.", steps=[],
                  tools=tools.toolset_schemas("hybrid"))
  policy = OpenAIChatPolicy(endpoint["base_url"], endpoint.get("model", "mage"), max_tokens=max_tokens,
                            temperature=0.0, tool_protocol=tool_protocol, tokenizer=tok,
                            client=from_config(block))
  out["teacher"] = (policy.act(PolicyRequest(None, 1, ep, np.asarray(tok.encode(prompt), np.int32), [],
                                             lambda a: a)), policy.client)
  # reasoning synthesis (its step) and the judge node
  ledger = llm.Ledger()
  syn = synthesis.Synthesizer(llm.client_from_config(block), synthesis.SynthesisConfig(), ledger)
  out["synthesis"] = (syn.step(episode(), 1), [r for r in ledger.records if r.node == synthesis.NODE])
  judge_ledger = llm.Ledger()
  try:
    verdict = synthesis.JUDGE.run(syn.client, {"think": "The Red button is on screen.", "action": "Click Red",
                                               "call": tools.tool_call_json(CLICK.name, CLICK.arguments)},
                                  skill=synthesis.SKILL, ledger=judge_ledger)[0]
  except llm.LLMNodeError as e:   # a model that never answers valid JSON (a random one)
    verdict = e
  out["judge"] = (verdict, judge_ledger.records)
  return out
