"""Cost of the two generation modes on a recorded trace set, replayed over HTTP.

workflow    the skill's DAG with its LLM nodes (propose params, reword the instruction); every
            other node is deterministic code. Tokens: those LLM nodes' calls.
agent_loop  an LLM agent builds each package from scratch through the harness, with no
            workflow: its system prompt is the package documentation (docs/tasks.md) and the
            tool list; it looks up the preparer/checker types, writes each setup file, the
            checker, each reference and the near-miss as separate tool calls, and submits;
            the harness answers each call (the submission with the real schema and file-level
            gates). Like any agent loop it re-sends the whole conversation every turn.

No model on this machine can play the agent, so both modes are *recorded* once from oracle
responders that answer what a competent model would (the skill's own sampled params and built
package, serialised as the tool calls above), with tokens counted as ceil(chars / 4)
(replay.approx_tokens), then replayed over HTTP through the same `ChatClient`. What the ratio
shows: the structural cost of the two designs for the same tasks (a multi-turn loop re-reading
its docs and history versus a few short single-shot calls). What it does not show: a real
frontier model's verbosity, its failed attempts and retries, or its success rate; that
comparison needs a real endpoint and is pending.
"""
from __future__ import annotations

import json
import os
import random
import re
from typing import Any

from mage_jax.forge import nodes as N
from mage_jax.forge.filecheck import prepare_and_open
from mage_jax.forge.llm import CallRecord, ChatClient, PriceTable
from mage_jax.forge.replay import ReplayServer
from mage_jax.forge.skill import REGISTRY, Skill
from mage_jax.forge.workflow import NodeCache, default_workflow
from mage_jax.tasks import checkers, preparers

SEEDS = {"tokens_reduction": 0.933, "cost_reduction": 0.826, "tokens_per_task": (1_276_000, 85_000),
         "dollars_per_task": (0.906, 0.158)}
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "tasks.md")


# ---- oracle responders (what the recording is made from) -----------------------------------------
def workflow_responder(messages: list[dict[str, Any]]) -> str:
  """Answers the workflow's LLM nodes: params = the skill's seeded draw for that variation; a
  reword prefixes the instruction (so every value is kept)."""
  prompt = messages[1]["content"]
  m = re.match(r"Skill (\S+): .*?\(variation (\d+)\)", prompt, re.S)
  if m and m.group(1) in REGISTRY:
    return json.dumps(REGISTRY[m.group(1)].sample(random.Random(f"oracle:{m.group(1)}:{m.group(2)}")))
  m = re.search(r"\nInstruction: (.*)\nReply with JSON", prompt, re.S)
  if m:
    return json.dumps({"instruction": "Task: " + m.group(1)})
  return "{}"


def agent_plan(skill: Skill, seed: int) -> list[dict[str, Any]]:
  """The tool calls a competent agent makes to build one package of `skill` from scratch."""
  out = default_workflow(skill).run(seed)
  fields = skill.build(out.params) if out.params is not None else {}
  calls = [{"tool": "list_types", "args": {}}]
  calls += [{"tool": "write_setup", "args": spec} for spec in fields.get("setup", [])]
  calls.append({"tool": "write_checker", "args": fields.get("checker", {})})
  calls += [{"tool": "write_reference", "args": ref} for ref in fields.get("references", [])]
  calls.append({"tool": "write_near_miss", "args": {"calls": fields.get("near_miss")}})
  calls.append({"tool": "submit", "args": {"instruction": fields.get("instruction", ""),
                                           "kind": skill.kind, "skills": [skill.id]}})
  return calls


AGENT_SYSTEM = ("You build task packages for a computer-use agent harness, from scratch, one tool call "
                "per turn (reply with one JSON object {{\"tool\", \"args\"}}). Tools: list_types, "
                "write_setup, write_checker, write_reference, write_near_miss, submit. The package "
                "format and every preparer and checker type:\n\n{docs}")


def agent_loop_task(client: ChatClient, skill: Skill, seed: int) -> CallRecord:
  """One package built by the agent loop; the harness answers each tool call."""
  with open(DOCS, encoding="utf-8") as f:
    docs = f.read()
  messages = [{"role": "system", "content": AGENT_SYSTEM.format(docs=docs)},
              {"role": "user", "content": f"Build one task package (variation {seed}) for skill "
                                          f"{skill.id}: {skill.description}. Kind: {skill.kind}."}]
  rec = CallRecord(skill=skill.id, node="agent_loop")
  setup, pkg = [], {}
  for _ in range(64):
    text, usage = client.chat(messages, skill=skill.id, node="agent_loop")
    rec.add_usage(usage)
    messages.append({"role": "assistant", "content": text})
    call = json.loads(text)
    tool, args = call["tool"], call["args"]
    if tool == "list_types":
      result = {"preparers": list(preparers.TYPES), "checkers": list(checkers.TYPES)}
    elif tool == "write_setup":
      setup.append(args)
      result = {"ok": True, "files": N.canonical(list(_file_report(args)))}
    elif tool == "submit":
      pkg = {"setup": setup, **args}
      result = {"accepted": True, "id": f"{skill.id}-{N.digest(pkg)[:10]}"}
    else:
      result = {"ok": True}
    if tool == "submit":
      break
    messages.append({"role": "user", "content": "Tool result: " + json.dumps(result)})
  rec.price(client)
  return rec


def _file_report(spec: dict[str, Any]):
  for path, info in prepare_and_open([spec]).items():
    yield {"path": path, "opens": info["error"] is None, "chars": len(info["text"])}


class AgentResponder:
  """Replays `agent_plan` turn by turn: the number of assistant turns so far picks the call."""

  def __call__(self, messages: list[dict[str, Any]]) -> str:
    m = re.search(r"\(variation (\d+)\) for skill (\S+):", messages[1]["content"])
    plan = agent_plan(REGISTRY[m.group(2)], int(m.group(1)))
    turn = sum(msg["role"] == "assistant" for msg in messages)
    return json.dumps(plan[min(turn, len(plan) - 1)])


# ---- the comparison ------------------------------------------------------------------------------
def compare(skills: list[str], seeds_per_skill: int, trace_dir: str,
            prices: PriceTable | None = None, record: bool = True) -> dict[str, Any]:
  """Records (if `record`) and replays both modes for the same (skill, seed) tasks; returns
  per-task tokens and dollars of each mode and the reductions, beside the seeds' figures."""
  prices = prices or PriceTable()
  jobs = [(s, 7_000 + i) for s in skills for i in range(seeds_per_skill)]
  wf_path, ag_path = os.path.join(trace_dir, "workflow.jsonl"), os.path.join(trace_dir, "agent_loop.jsonl")
  wf_recs, ag_recs = [], []
  with ReplayServer(wf_path, responder=workflow_responder if record else None, mode="workflow") as srv:
    client = ChatClient(srv.url, prices=prices)
    for s, seed in jobs:
      out = default_workflow(REGISTRY[s], llm_params=True, reword=True).run(seed, NodeCache(None), client)
      wf_recs += [CallRecord(**c) for c in out.llm_calls]
  with ReplayServer(ag_path, responder=AgentResponder() if record else None, mode="agent_loop") as srv:
    client = ChatClient(srv.url, prices=prices)
    for s, seed in jobs:
      ag_recs.append(agent_loop_task(client, REGISTRY[s], seed))
  n = max(1, len(jobs))

  def per_task(recs):
    return {"tokens": sum(r.prompt_tokens + r.completion_tokens for r in recs) / n,
            "prompt_tokens": sum(r.prompt_tokens for r in recs) / n,
            "completion_tokens": sum(r.completion_tokens for r in recs) / n,
            "requests": sum(r.requests for r in recs) / n, "dollars": sum(r.dollars for r in recs) / n}
  wf, ag = per_task(wf_recs), per_task(ag_recs)
  return {"tasks": len(jobs), "skills": len(skills), "workflow": wf, "agent_loop": ag,
          "tokens_reduction": 1 - wf["tokens"] / max(1e-9, ag["tokens"]),
          "cost_reduction": 1 - wf["dollars"] / max(1e-12, ag["dollars"]),
          "seeds": SEEDS, "token_count": "ceil(chars/4) (replay.approx_tokens)",
          "frontier_endpoint": "pending"}
