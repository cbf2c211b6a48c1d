"""Chat records, OpenAI / ShareGPT / ms-swift / LLaMA-Factory style, into native Episodes
(docs/data.md, "Chat records").

`messages` (or ShareGPT `conversations` with from/value) + `images` + `tools`. Assistant turns
carry `tool_calls` (or ms-swift `tool_call` messages, or an inline `<tool_call>` block);
results come as `tool` (`tool_response`, `observation`) messages. `<image>` placeholders are
consumed in order from `images`. Each tool call becomes one step; the observation before it
(the first user turn's image/text, then each tool result) is its o_t.

Transcripts as people write them have no `Action:` line and no think text (`content: null`
beside `tool_calls`), several calls in one turn, and a closing text-only turn ("Done."). The
missing parts are filled by the template (importers/fill.py, marked in meta["filled"]); a turn
with several calls is split into one step per call (`parallel_calls`); the closing text turn
becomes a terminate step or is dropped (`final_text`). Every record ends as an Episode built
through `trajectory.episode_from_dict` (the same validation as native data) or a counted skip.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator

from mage_jax.actions import schema as tools
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import fill, sources

IMAGE_PLACEHOLDER = "<image>"
_ROLE_ALIASES = {"human": "user", "gpt": "assistant", "function_call": "tool_call",
                 "observation": "tool", "tool_response": "tool", "function": "tool"}
_INLINE_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_THINK = re.compile(r"^\s*<think>(.*?)</think>", re.S)

def _bad(reason: str, kind: str = tr.INVALID_FIELD) -> tr.EpisodeError:
  return tr.EpisodeError(kind, reason)


def _jsonish(value: Any, where: str, kind: str = tr.INVALID_FIELD) -> Any:
  """Values that some formats store as JSON strings (tools, arguments, ms-swift tool_call)."""
  if isinstance(value, str):
    try:
      return json.loads(value)
    except json.JSONDecodeError as e:
      raise _bad(f"{where}: not valid JSON ({e.msg})", kind) from None
  return value


class _Images:
  """Consumes `images` in order, one per <image> placeholder or image content part."""

  def __init__(self, images: Any):
    if images is None:
      images = []
    if not isinstance(images, list):
      raise _bad("images: expected a list of paths")
    self.paths = [im.get("path") if isinstance(im, dict) else im for im in images]
    if not all(isinstance(p, str) and p for p in self.paths):
      raise _bad("images: every entry must be a path (or {\"path\": ...})")
    self.next = 0

  def take(self, where: str) -> str:
    if self.next >= len(self.paths):
      raise _bad(f"{where}: more <image> placeholders than images ({len(self.paths)})")
    self.next += 1
    return self.paths[self.next - 1]


def _content(msg: dict, imgs: _Images, where: str) -> tuple[str, list[str]]:
  """(text without image placeholders, image paths) of one message."""
  content = msg.get("content", msg.get("value"))
  if content is None:
    return "", []
  if isinstance(content, list):  # OpenAI multimodal parts
    texts, paths = [], []
    for i, part in enumerate(content):
      kind = part.get("type") if isinstance(part, dict) else None
      if kind == "text":
        texts.append(part.get("text", ""))
      elif kind in ("image", "image_url"):
        ref = part.get("image") or part.get("image_url")
        ref = ref.get("url") if isinstance(ref, dict) else ref
        if isinstance(ref, str) and ref.startswith("data:"):
          raise _bad(f"{where}.content[{i}]: inline base64 images are not supported; use files")
        paths.append(ref if isinstance(ref, str) and ref else imgs.take(f"{where}.content[{i}]"))
      else:
        raise _bad(f"{where}.content[{i}]: unknown content part {part!r:.80}")
    return "".join(texts), paths
  if not isinstance(content, str):
    raise _bad(f"{where}.content: expected a string or a list of parts")
  paths = [imgs.take(where) for _ in range(content.count(IMAGE_PLACEHOLDER))]
  return content.replace(IMAGE_PLACEHOLDER, ""), paths


def _observation(text: str, paths: list[str], where: str) -> dict:
  if len(paths) > 1:
    raise _bad(f"{where}: {len(paths)} images in one observation; expected at most one screenshot")
  text = text.strip("\n")
  return {"screenshot": paths[0] if paths else None, "text": text or None}


def _call_from(obj: Any, where: str) -> dict:
  obj = _jsonish(obj, where)
  if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
    obj = obj["function"]
  if not isinstance(obj, dict) or "name" not in obj:
    raise _bad(f"{where}: expected {{name, arguments}}")
  args = _jsonish(obj.get("arguments", {}), f"{where}.arguments", tr.INVALID_ARGUMENTS)
  return {"name": obj["name"], "arguments": args}


PARALLEL_CALLS = ("split", "skip")   # a turn with several tool calls: one step per call, or skip
FINAL_TEXT = ("terminate", "drop")    # a last assistant turn without a call: terminate(success), or drop
TEXT_ONLY_TURN = "text_only_turn"     # skip kinds of this importer (beside trajectory.py's)
PARALLEL_CALL_KIND = "parallel_calls"


def _turn_text(msg: dict, where: str) -> tuple[str | None, str, list[dict]]:
  """(think or None, content without think/inline calls, inline calls) of an assistant message."""
  content = msg.get("content", msg.get("value")) or ""
  if isinstance(content, list):  # OpenAI content parts: an assistant turn holds text parts only
    if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
               for p in content):
      raise _bad(f"{where}.content: an assistant turn's content parts must be text parts")
    content = "".join(p["text"] for p in content)
  if not isinstance(content, str):
    raise _bad(f"{where}.content: expected a string or a list of text parts")
  think = msg.get("reasoning_content")
  if think is not None and not isinstance(think, str):
    raise _bad(f"{where}.reasoning_content: expected a string")
  m = _THINK.match(content)
  if m:
    think = m.group(1) if think is None else think
    content = content[m.end():]
  calls = [_call_from(body, f"{where}.content <tool_call> #{i}")
           for i, body in enumerate(_INLINE_CALL.findall(content))]
  return think, _INLINE_CALL.sub("", content), calls


def _think_and_action(think: str | None, content: str) -> tuple[str, str]:
  """The source's think and Action summary ("" where it has none: the template fills it).

  The `Action:` line is the summary; without one, a single content line is the summary and
  several lines are reasoning (added to the think text)."""
  lines = [ln.strip() for ln in content.strip().splitlines() if ln.strip()]
  action_lines = [ln for ln in lines if ln.startswith("Action:")]
  think = (think or "").strip("\n")
  if action_lines:
    return think, action_lines[0][len("Action:"):].strip()
  if len(lines) == 1:
    return think, lines[0]
  prose = content.strip()
  return ((think + "\n\n" + prose) if think and prose else (think or prose)), ""


def _tool_results(norm: list, i: int, imgs: _Images) -> tuple[int, list[tuple[str, list[str], Any, str]]]:
  """The consecutive tool messages after norm[i]: (last index, [(text, paths, tool_call_id, where)])."""
  out = []
  while i + 1 < len(norm) and norm[i + 1][0] == "tool":
    i += 1
    _, m, where = norm[i]
    text, paths = _content(m, imgs, where)
    out.append((text, paths, m.get("tool_call_id"), where))
  return i, out


def _per_call_observations(ids: list[Any], results: list, where: str) -> list[dict] | None:
  """One observation per call: the result of call k is the observation of call k+1, and the
  last one is the observation after the turn. Results match calls by tool_call_id when every
  call and result has one, else by order. None when there is not one result per call."""
  if len(results) != len(ids):
    return None
  if all(ids) and all(r[2] for r in results):
    by_id = {r[2]: r for r in results}
    if set(by_id) != set(ids):
      raise _bad(f"{where}: tool results answer ids {sorted(map(str, by_id))}, the calls have "
                 f"{sorted(map(str, ids))}")
    results = [by_id[cid] for cid in ids]
  return [_observation(text, paths, rwhere) for text, paths, _, rwhere in results]


def _turn_calls(norm: list, i: int, where: str) -> tuple[int, dict, list[dict], list[Any]]:
  """(last index, assistant message, calls, their tool_call ids) of the turn starting at norm[i]."""
  role, m, _ = norm[i]
  msg = m if role == "assistant" else {}
  raw = msg.get("tool_calls") or []
  if not isinstance(raw, list):
    raise _bad(f"{where}.tool_calls: expected a list")
  calls = [_call_from(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(raw)]
  ids = [c.get("id") if isinstance(c, dict) else None for c in raw]
  if msg.get("function_call") is not None:  # the OpenAI API's older single-call field
    calls.append(_call_from(msg["function_call"], f"{where}.function_call"))
    ids.append(None)
  if role == "tool_call":
    calls.append(_call_from(m.get("content", m.get("value")), where))
    ids.append(None)
  while i + 1 < len(norm) and norm[i + 1][0] == "tool_call":  # ms-swift: calls as messages
    i += 1
    calls.append(_call_from(norm[i][1].get("content", norm[i][1].get("value")), norm[i][2]))
    ids.append(None)
  return i, msg, calls, ids


def episode_from_messages(record: Any, root: str = "", *, episode_id: str = "", source: str = "",
                          stage: int = 0, parallel_calls: str = "split",
                          final_text: str = "terminate") -> tr.Episode:
  """One chat record -> Episode (image paths relative to `root`); raises EpisodeError.

  parallel_calls: "split" makes one step per call of a turn with several (the result of each
  call is the next one's observation); "skip" skips the record (kind `parallel_calls`).
  final_text: a last assistant turn with no tool call becomes a terminate(success) step whose
  think is that text ("terminate") or is dropped ("drop"); meta["import"] records either.
  Think and Action text the source lacks is filled by the template (importers/fill.py) and
  marked in meta["filled"].
  """
  if parallel_calls not in PARALLEL_CALLS:
    raise ValueError(f"parallel_calls={parallel_calls!r}: expected one of {PARALLEL_CALLS}")
  if final_text not in FINAL_TEXT:
    raise ValueError(f"final_text={final_text!r}: expected one of {FINAL_TEXT}")
  if not isinstance(record, dict):
    raise _bad("expected a JSON object")
  msgs = record.get("messages", record.get("conversations"))
  if not isinstance(msgs, list) or not msgs:
    raise _bad("messages: expected a non-empty list", tr.EMPTY_EPISODE if msgs == [] else tr.INVALID_FIELD)
  imgs = _Images(record.get("images"))
  tool_spec = _jsonish(record.get("tools"), "tools")
  norm = []
  for i, m in enumerate(msgs):
    if not isinstance(m, dict):
      raise _bad(f"messages[{i}]: expected an object")
    role = m.get("role", m.get("from"))
    norm.append((_ROLE_ALIASES.get(role, role), m, f"messages[{i}]"))
  first_of_last_turn = max((k for k, (r, _, _) in enumerate(norm) if r == "assistant" or (
      r == "tool_call" and (k == 0 or norm[k - 1][0] not in ("assistant", "tool_call")))), default=-1)

  steps: list[dict] = []
  imported: dict[str, Any] = {}
  instruction, pending_obs, system = None, None, None
  empty_obs = {"screenshot": None, "text": None}
  i = 0
  while i < len(norm):
    role, m, where = norm[i]
    if role == "system":
      system = _content(m, imgs, where)[0]
    elif role in ("user", "tool"):
      text, paths = _content(m, imgs, where)
      if instruction is None:
        if role != "user":
          raise _bad(f"{where}: the first turn must be the user's task")
        instruction = text.strip()
        pending_obs = _observation("", paths, where)
      else:  # a tool result (or a later user turn) is the next observation
        while i + 1 < len(norm) and norm[i + 1][0] == "tool":  # merge parallel results
          i += 1
          t2, p2 = _content(norm[i][1], imgs, norm[i][2])
          text, paths = text + "\n" + t2, paths + p2
        pending_obs = _observation(text, paths, where)
    elif role in ("assistant", "tool_call"):
      if instruction is None:
        raise _bad(f"{where}: assistant turn before the user's task")
      turn_start = i
      i, msg, calls, ids = _turn_calls(norm, i, where)
      think, content, inline = _turn_text(msg, where)
      calls, ids = calls + inline, ids + [None] * len(inline)
      think, action = _think_and_action(think, content)
      obs, pending_obs = pending_obs or empty_obs, None
      if not calls:
        if turn_start != first_of_last_turn:
          raise _bad(f"{where}: an assistant turn without a tool call before the end of the "
                     "conversation (every step needs one call)", TEXT_ONLY_TURN)
        imported["final_text"] = final_text
        if final_text == "terminate":  # the closing message is the think; "Action:" only if written
          if not content.strip().startswith("Action:") and "\nAction:" not in content:
            think, action = "\n\n".join(p for p in (think, action) if p), ""
          steps.append({"observation": obs, "think": think, "action": action,
                        "tool_call": {"name": tools.COMPUTER_USE,
                                      "arguments": {"action": "terminate", "status": "success"}}})
      elif len(calls) == 1:
        steps.append({"observation": obs, "think": think, "action": action, "tool_call": calls[0]})
      elif parallel_calls == "skip":
        raise _bad(f"{where}: {len(calls)} tool calls in one turn (parallel_calls=skip)",
                   PARALLEL_CALL_KIND)
      else:
        i, results = _tool_results(norm, i, imgs)
        per_call = _per_call_observations(ids, results, where)
        if per_call is not None:
          between, pending_obs = per_call[:-1], per_call[-1]
        else:  # not one result per call: the results are one observation after the turn
          between = [empty_obs] * (len(calls) - 1)
          if results:
            pending_obs = _observation("\n".join(r[0] for r in results),
                                       [p for r in results for p in r[1]], results[0][3])
        # The turn's own think and Action belong to its first call; the others are filled.
        for k, (call, o) in enumerate(zip(calls, [obs] + between)):
          steps.append({"observation": o, "think": think if k == 0 else "",
                        "action": action if k == 0 else "", "tool_call": call})
        imported["split_turns"] = imported.get("split_turns", 0) + 1
    else:
      raise _bad(f"{where}: unknown role {role!r}")
    i += 1
  if imgs.next != len(imgs.paths):
    raise _bad(f"images: {len(imgs.paths)} images but {imgs.next} placeholders")
  if not steps:
    raise _bad("messages: no assistant turn with a tool call", tr.EMPTY_EPISODE)
  meta: dict[str, Any] = {"system": system} if system else {}
  filled = fill.fill_steps(steps, instruction or "")
  if filled:
    meta[fill.FILLED_KEY] = filled
  if imported:
    meta["import"] = imported
  d = {"id": record.get("id") or episode_id, "instruction": instruction or "", "steps": steps,
       "tools": tool_spec, "source": record.get("source", source), "stage": record.get("stage", stage),
       "screen_size": record.get("screen_size"), "meta": meta}
  return tr.episode_from_dict(d, root)


def read_messages_file(path: str, image_root: str | None = None, *, source: str = "",
                       stage: int = 0, parallel_calls: str = "split",
                       final_text: str = "terminate") -> Iterator[tr.Episode | tr.SkippedItem]:
  """JSON Lines (or one JSON array) of chat records; images resolve against `image_root`
  (default: the file's folder)."""
  return sources.read_records(path, episode_from_messages, image_root, source=source, stage=stage,
                              parallel_calls=parallel_calls, final_text=final_text)
