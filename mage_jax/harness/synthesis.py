"""Step-level reasoning synthesis: one LLM call per kept step writes its `<think>`, `Action:` and
tool call; the call is verified against the executed one.

The request is the step's context window exactly as the student will see it (data/render.py's
`render_prompt` with the student's tools and first system prompt, as chat messages with the
screenshots) plus one user message naming the executed call. Earlier steps in the window show
their synthesized turns (an episode is synthesized in order), as the student's data will.

Verification (`call_difference`): the reply must parse as one three-part turn
(actions/parsing.py; otherwise its parse error kind is the rejection reason), with a non-empty
think and Action line, and its tool call must equal the executed one after normalisation:
argument order is ignored, a bash command's whitespace runs are collapsed (a quoted string's
inner spacing is the one case this can miss), key names compare case-insensitively,
numbers by value, coordinates within `coord_tolerance` on the 0..999 grid; typed text must be
identical (its spaces are what gets typed). A kept step takes the synthesized think and
Action with the *executed* call. The optional judge node (forge/llm.py) rejects a step whose
think contradicts its action.

Imported episodes (data/importers) have their template-filled think / Action parts rewritten by
`refill` instead: only the filled parts change, and a rejected step keeps the template text.

An episode with a rejected step is dropped (`on_reject="drop_episode"`) or keeps the
teacher's original turn for that step (`"keep_original"`). Calls, tokens and dollars go into a
forge `Ledger`; rejections are counted by reason.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mage_jax.actions import parsing
from mage_jax.actions import schema as tools
from mage_jax.agent.policies import prompt_to_messages
from mage_jax.data import render as render_lib
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import fill
from mage_jax.forge import llm

SKILL, NODE = "reasoning_synthesis", "step_reasoning"
INSTRUCTION = (
    "The action executed at this step was:\n<tool_call>\n{call}\n</tool_call>\n"
    "Write the assistant turn that leads to exactly this action: your reasoning about the current "
    "observation inside <think></think>, then one line \"Action: <imperative one-line summary>\", "
    "then exactly this tool call inside <tool_call></tool_call>. Write nothing after it.")
JUDGE = llm.LLMNode(
    "step_judge",
    "A computer-use agent wrote this reasoning and summary before one action.\n<think>\n{think}\n</think>\n"
    "Action: {action}\nExecuted call: {call}\nDoes the reasoning contradict the call (e.g. it names a "
    "different target, text, file or command than the call acts on)? Reply with JSON matching: {schema}",
    {"type": "object", "properties": {"contradicts": {"type": "boolean"}, "reason": {"type": "string"}},
     "required": ["contradicts"]},
    system="You check training data for a computer-use agent. Reply with JSON only.", max_retries=1)


@dataclasses.dataclass(frozen=True)
class SynthesisConfig:
  full_responses: int = 4
  visual_turns: int = 3
  context_len: int = 32_768
  coord_tolerance: int = 5          # on the 0..999 grid, per axis
  judge: bool = False
  on_reject: str = "drop_episode"   # | keep_original
  workers: int = 4                  # episodes synthesized at once (steps of one episode are in order)

  def __post_init__(self):
    if self.on_reject not in ("drop_episode", "keep_original"):
      raise ValueError(f"synthesis.on_reject={self.on_reject!r}: expected drop_episode | keep_original")


def _collapse(s: str) -> str:
  return " ".join(s.split())


def _same_value(key: str, executed: Any, proposed: Any, tol: int) -> bool:
  if key == "coordinate":
    return (isinstance(proposed, list) and len(proposed) == len(executed)
            and all(abs(a - b) <= tol for a, b in zip(executed, proposed)))
  if key == "command":
    return isinstance(proposed, str) and _collapse(executed) == _collapse(proposed)
  if key == "keys":
    return [k.strip().lower() for k in executed] == [k.strip().lower() for k in proposed]
  if isinstance(executed, (int, float)) and not isinstance(executed, bool):
    return isinstance(proposed, (int, float)) and not isinstance(proposed, bool) and executed == proposed
  return executed == proposed


def call_difference(executed: tr.ToolCall, name: str, arguments: dict[str, Any], tol: int) -> str | None:
  """None if the proposed call equals the executed one after normalisation, else what differs."""
  if name != executed.name:
    return f"tool {name!r} != executed {executed.name!r}"
  if set(arguments) != set(executed.arguments):
    return f"arguments {sorted(arguments)} != executed {sorted(executed.arguments)}"
  for key, value in executed.arguments.items():
    if not _same_value(key, value, arguments[key], tol):
      return f"{key}: {json.dumps(arguments[key])[:60]} != executed {json.dumps(value)[:60]}"
  return None


@dataclasses.dataclass
class SynthesisReport:
  episodes: int = 0
  episodes_kept: int = 0
  steps: int = 0
  steps_kept: int = 0
  rejected: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  examples: list[str] = dataclasses.field(default_factory=list)  # a few rejections, for the log

  def to_dict(self, ledger: llm.Ledger | None = None) -> dict[str, Any]:
    d = {"episodes": self.episodes, "episodes_kept": self.episodes_kept, "steps": self.steps,
         "steps_kept": self.steps_kept, "step_acceptance": round(self.steps_kept / max(1, self.steps), 4),
         "rejected": dict(self.rejected), "examples": self.examples[:10]}
    if ledger is not None:
      d["llm"] = ledger.totals()
    return d


class Synthesizer:
  def __init__(self, client: llm.ChatClient, cfg: SynthesisConfig = SynthesisConfig(),
               ledger: llm.Ledger | None = None, renderer: render_lib.Renderer | None = None):
    self.client, self.cfg = client, cfg
    self.ledger = ledger if ledger is not None else llm.Ledger()
    self.renderer = renderer or render_lib.Renderer(render_lib.RenderConfig(
        full_responses=cfg.full_responses, visual_turns=cfg.visual_turns, context_len=cfg.context_len,
        prompt_variants=False, train_all_turns=False, mask_think_body=False))
    self.report = SynthesisReport()
    self._lock = threading.Lock()

  def messages(self, ep: tr.Episode, t: int) -> list[dict[str, Any]]:
    """The step's context window as the student sees it, then the executed call."""
    prompt, images = self.renderer.render_prompt(ep, t)
    text = self.renderer.tok.decode([int(i) for i in prompt], skip_special_tokens=False)
    call = ep.steps[t - 1].tool_call
    return prompt_to_messages(text, images) + [
        {"role": "user", "content": INSTRUCTION.format(call=tools.tool_call_json(call.name, call.arguments))}]

  def _ask(self, messages, node: str) -> str:
    rec = llm.CallRecord(skill=SKILL, node=node)
    try:
      text, usage = self.client.chat(messages, skill=SKILL, node=node)
      rec.add_usage(usage)
    finally:
      rec.price(self.client)
      self.ledger.add(rec)
    return text

  def step(self, ep: tr.Episode, t: int) -> tuple[tr.Step | None, str | None]:
    """(the synthesized step, None) or (None, the rejection reason)."""
    executed = ep.steps[t - 1].tool_call
    try:
      msgs = self.messages(ep, t)
    except ValueError:
      return None, "context_not_rendered"
    try:
      reply = self._ask(msgs, NODE)
    except llm.EndpointError:
      return None, "endpoint_error"
    parsed = parsing.parse_response(reply)
    if not parsed.ok:
      return None, f"parse:{parsed.error_kind}"
    if not parsed.think.strip():
      return None, "empty_think"
    if not parsed.summary.strip():
      return None, "empty_action"
    why = call_difference(executed, parsed.name, parsed.arguments, self.cfg.coord_tolerance)
    if why:
      self._example(f"{ep.id} step {t}: call_mismatch: {why}")
      return None, "call_mismatch"
    if self.cfg.judge:
      try:
        verdict, _ = JUDGE.run(self.client, {"think": parsed.think, "action": parsed.summary,
                                             "call": tools.tool_call_json(executed.name, executed.arguments)},
                               skill=SKILL, ledger=self.ledger)
      except (llm.LLMNodeError, llm.EndpointError):
        return None, "judge_unanswered"
      if verdict["contradicts"]:
        self._example(f"{ep.id} step {t}: judge: {str(verdict.get('reason', ''))[:120]}")
        return None, "judge_contradiction"
    return tr.Step(ep.steps[t - 1].observation, parsed.think.strip("\n"), parsed.summary.strip(), executed), None

  def _example(self, text: str) -> None:
    with self._lock:
      if len(self.report.examples) < 10:
        self.report.examples.append(text)

  def episode(self, ep: tr.Episode) -> tr.Episode | None:
    steps = list(ep.steps)
    kept, reasons = 0, []
    for t in range(1, len(steps) + 1):
      new, reason = self.step(dataclasses.replace(ep, steps=steps), t)
      if new is not None:
        steps[t - 1] = new
        kept += 1
      else:
        reasons.append(reason)
    ok = not reasons or self.cfg.on_reject == "keep_original"
    with self._lock:
      r = self.report
      r.episodes += 1
      r.steps += len(steps)
      r.steps_kept += kept
      r.rejected.update(reasons)
      r.episodes_kept += ok
    if not ok:
      return None
    return dataclasses.replace(ep, steps=steps, meta={**ep.meta, "synthesis": {
        "steps_synthesized": kept, "steps_original": len(steps) - kept}})

  def refill(self, ep: tr.Episode) -> tr.Episode:
    """Rewrites the template-filled parts of an imported episode (meta["filled"]) with the LLM:
    a kept step takes the reply's think and/or Action only where the template wrote them (the
    source's own text stays) and its mark becomes "llm"; a rejected step keeps the template's
    text and mark. The episode is never dropped. Steps are counted in `report` as in `episode`."""
    marks = ep.meta.get(fill.FILLED_KEY) or []
    steps, new_marks, reasons = list(ep.steps), [], []
    for mark in marks:
      t = mark["step"]
      new, reason = self.step(dataclasses.replace(ep, steps=steps), t)
      if new is None:
        reasons.append(reason)
        new_marks.append(mark)
        continue
      old = steps[t - 1]
      steps[t - 1] = tr.Step(old.observation, new.think if "think" in mark else old.think,
                             new.action if "action" in mark else old.action, old.tool_call)
      new_marks.append({**mark, **{part: fill.LLM for part in ("think", "action") if part in mark}})
    with self._lock:
      r = self.report
      r.episodes += 1
      r.episodes_kept += 1
      r.steps += len(marks)
      r.steps_kept += len(marks) - len(reasons)
      r.rejected.update(reasons)
    if not marks:
      return ep
    return dataclasses.replace(ep, steps=steps, meta={**ep.meta, fill.FILLED_KEY: new_marks})

  def run(self, episodes) -> list[tr.Episode]:
    with ThreadPoolExecutor(max(1, self.cfg.workers)) as ex:
      return [e for e in ex.map(self.episode, list(episodes)) if e is not None]


def synthesize_file(in_path: str, out_path: str, client: llm.ChatClient, cfg: SynthesisConfig,
                    ledger: llm.Ledger) -> dict[str, Any]:
  """Trajectories in -> synthesized trajectories out (trajectory JSONL, launch.pack's input)."""
  read = tr.ReadReport()
  syn = Synthesizer(client, cfg, ledger)
  out = syn.run(tr.read_all([in_path], report=read))
  tr.write_episodes(out_path, out)
  return {**syn.report.to_dict(ledger), "read": read.to_dict()}
