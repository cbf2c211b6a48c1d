"""AgentNet (OpenCUA) trajectories into native Episodes (docs/data.md, "AgentNet").

The record format (xlang-ai/OpenCUA data/cot-generate README, the released
agentnet_ubuntu_*.jsonl and agentnet_win_mac_*.jsonl files): {task_id, instruction,
[natural_language_task, actual_task], traj: [{index, image, value: {code, observation,
thought, action, reflection, last_step_correct, last_step_redundant}}], [task_completed,
alignment_score, efficiency_score, task_difficulty, reason]}. `image` is the screenshot file
seen before the step (resolved against the image folder); `code` is PyAutoGUI (plus the agent
functions `computer.terminate(status=...)`, `computer.wait()`, `computer.triple_click(x, y)`)
with coordinates relative to the screen (0..1).

PyAutoGUI maps onto our action space through actions/pyautogui.py (shared with the OSWorld
set-up steps): clicks, drags, moves, scrolls (50 pixels per wheel click), typing, key presses
and hotkeys, terminate and wait. Anything else (tripleClick, hscroll, keyDown/keyUp, a
right-button drag, a key name we do not know, code that is not a plain call) is unmappable,
counted by kind (`unmappable:<what>`): the episode is skipped (on_unmappable="skip"), or cut
before that step ("truncate", the dropped steps counted in meta["import"]["dropped"]).

A step whose code holds several calls (moveTo then dragTo, write then press) becomes one step
per call; the later ones see the same screenshot. think = the previous step's `reflection`
(AgentNet's reflection at step t judges action t from the next screenshot, so it is known at
step t+1, as OpenCUA's generator uses it) followed by this step's `thought`; the Action line is
`action` (its first line). A missing one is filled by the template and marked in meta["filled"].
"""
from __future__ import annotations

from typing import Any, Iterator

from mage_jax.actions import pyautogui
from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import fill, sources

UNMAPPABLE = "unmappable"          # skip kind prefix: unmappable:<what>
ON_UNMAPPABLE = ("skip", "truncate")
INSTRUCTION_FIELDS = ("instruction", "natural_language_task", "actual_task")


def _bad(reason: str, kind: str = tr.INVALID_FIELD) -> tr.EpisodeError:
  return tr.EpisodeError(kind, reason)


def _text(value: dict, field: str, where: str) -> str:
  v = value.get(field)
  if v is None:
    return ""
  if not isinstance(v, str):
    raise _bad(f"{where}.value.{field}: expected a string")
  return v.strip()


def _coord_space(traj: list[dict]) -> str:
  """relative when every x/y in the record's code is within 0..1 (AgentNet's), else pixel."""
  for entry in traj:
    code = entry.get("value", {}).get("code") if isinstance(entry, dict) else None
    try:
      calls = pyautogui.parse_code(code) if isinstance(code, str) else []
    except pyautogui.Unmappable:
      continue
    for _, p in calls:
      for k in ("x", "y"):
        v = p.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1:
          return "pixel"
  return "relative"


def agentnet_episode(record: Any, root: str = "", *, episode_id: str = "", source: str = "agentnet",
                     stage: int = 2, instruction_field: str = "instruction",
                     on_unmappable: str = "skip") -> tr.Episode:
  """One AgentNet record -> Episode; raises EpisodeError (kind `unmappable:<what>` for an action
  we cannot express, unless on_unmappable="truncate" cuts the episode before it)."""
  if on_unmappable not in ON_UNMAPPABLE:
    raise ValueError(f"on_unmappable={on_unmappable!r}: expected one of {ON_UNMAPPABLE}")
  if instruction_field not in INSTRUCTION_FIELDS:
    raise ValueError(f"instruction_field={instruction_field!r}: expected one of {INSTRUCTION_FIELDS}")
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  instruction = record.get(instruction_field) or record.get("instruction")
  if not isinstance(instruction, str) or not instruction.strip():
    raise _bad(f"{instruction_field}: expected a non-empty string")
  traj = record.get("traj")
  if not isinstance(traj, list) or not traj:
    raise _bad("traj: expected a non-empty list of steps", tr.EMPTY_EPISODE if traj == [] else tr.INVALID_FIELD)
  space = _coord_space(traj)
  steps: list[dict] = []
  split_turns, dropped, incorrect, redundant = 0, {}, [], []
  prev_reflection = ""
  size: tuple[int, int] | None = None
  for t, entry in enumerate(traj):
    where = f"traj[{t}]"
    value = entry.get("value") if isinstance(entry, dict) else None
    if not isinstance(value, dict):
      raise _bad(f"{where}.value: expected an object")
    image = entry.get("image")
    if not isinstance(image, str) or not image:
      raise _bad(f"{where}.image: expected a screenshot file name")
    code = value.get("code")
    if not isinstance(code, str) or not code.strip():
      raise _bad(f"{where}.value.code: expected PyAutoGUI code")
    if space == "pixel" and size is None:
      size = sources.image_size(image, root, f"{where}.image")
    position = pyautogui.relative_position if space == "relative" else pyautogui.pixel_position(*size)
    try:
      calls = pyautogui.to_calls(code, position)
    except pyautogui.Unmappable as u:
      if on_unmappable == "skip" or not steps:
        raise _bad(f"{where}.value.code: {u.detail} ({code.strip()[:80]!r})", f"{UNMAPPABLE}:{u.what}") from None
      dropped[f"{UNMAPPABLE}:{u.what}"] = len(traj) - t
      break
    thought = _text(value, "thought", where)
    think = "\n\n".join(p for p in (prev_reflection, thought) if p)
    action = _text(value, "action", where).split("\n")[0].strip()
    if action.startswith("Action:"):
      action = action[len("Action:"):].strip()
    for k, args in enumerate(calls):
      steps.append({"observation": {"screenshot": image, "text": None}, "think": think if k == 0 else "",
                    "action": action if k == 0 else "",
                    "tool_call": {"name": tools.COMPUTER_USE, "arguments": args}})
    split_turns += len(calls) > 1
    if value.get("last_step_correct") is False:
      incorrect.append(len(steps))
    if value.get("last_step_redundant") is True:
      redundant.append(len(steps))
    prev_reflection = _text(value, "reflection", where)
  meta: dict[str, Any] = {"agentnet": {
      k: record[k] for k in ("task_id", "natural_language_task", "actual_task", "task_completed",
                             "alignment_score", "efficiency_score", "task_difficulty", "reason")
      if k in record}}
  meta["agentnet"].update(coord_space=space, incorrect_steps=incorrect, redundant_steps=redundant)
  filled = fill.fill_steps(steps, instruction.strip())
  if filled:
    meta[fill.FILLED_KEY] = filled
  imported = {k: v for k, v in (("split_turns", split_turns), ("dropped", dropped)) if v}
  if imported:
    meta["import"] = imported
  completed = record.get("task_completed")
  outcome = None if dropped or not isinstance(completed, bool) else ("success" if completed else "failure")
  d = {"id": str(record.get("task_id") or episode_id), "instruction": instruction.strip(),
       "steps": steps, "tools": [tools.COMPUTER_USE], "source": source, "stage": stage,
       "outcome": outcome, "screen_size": list(size) if size else None, "meta": meta}
  return tr.episode_from_dict(d, root)


def read_agentnet_file(path: str, image_root: str | None = None, *, source: str | None = None,
                       stage: int | None = None, instruction_field: str = "instruction",
                       on_unmappable: str = "skip") -> Iterator[tr.Episode | tr.SkippedItem]:
  """AgentNet JSONL; screenshots resolve against `image_root` (the unzipped images folder;
  default: the file's folder)."""
  return sources.read_records(path, agentnet_episode, image_root, source=source or "agentnet",
                              stage=2 if stage is None else stage, instruction_field=instruction_field,
                              on_unmappable=on_unmappable)
