"""The task package format and its loader (documented in docs/tasks.md).

A package is a JSON object (a `.json` file, or `task.json` inside a directory
whose other files the package may reference by relative path):

  id, instruction, kind ("terminal" | "gui" | "hybrid"), apps, skills,
  channels (hints: subset of ["gui", "terminal"]), setup (list of preparers),
  checker (a checker spec), references (a list of {"channel", "calls"}: every
  known solution, each labelled with the channel it uses), near_miss (a list of
  tool calls), max_steps (optional).

`reference` (one list of calls) is accepted as shorthand for a single
reference whose channel is read off its calls. Channels: "terminal" (bash
only, plus computer_use terminate/wait), "gui" (computer_use only: a GUI-only
agent can run it), "hybrid" (both). The gates run every reference.

A tool call is {"name": "computer_use" | "bash", "arguments": {...}} with
optional "think" and "action" strings. In a `computer_use` coordinate, a
string "@<app>.<widget>" names a widget of a built-in app; it is resolved to
[x, y] in [0, 999] from the app's live layout when the call is executed.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any

from mage_jax.actions import schema as tools

KINDS = ("terminal", "gui", "hybrid")
CHANNELS = ("terminal", "gui", "hybrid")  # of a reference solution
_CONTROL_ACTIONS = ("terminate", "wait")   # computer_use actions that are not GUI work


class PackageError(ValueError):
  """A malformed package; the message names the file and field."""


@dataclasses.dataclass
class TaskPackage:
  id: str
  instruction: str
  kind: str
  checker: dict[str, Any]
  setup: list[dict[str, Any]] = dataclasses.field(default_factory=list)
  apps: list[str] = dataclasses.field(default_factory=list)
  skills: list[str] = dataclasses.field(default_factory=list)
  channels: list[str] = dataclasses.field(default_factory=list)
  references: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # [{channel, calls}]
  near_miss: list[dict[str, Any]] | None = None
  max_steps: int | None = None
  source: str = "<dict>"  # where it was loaded from (errors name it)
  root: str | None = None  # directory for relative files (setup scripts, python checkers)

  @property
  def needs_desktop(self) -> bool:
    return self.kind != "terminal"

  @property
  def reference(self) -> list[dict[str, Any]] | None:
    """The first (primary) reference's calls."""
    return self.references[0]["calls"] if self.references else None

  def reference_for(self, channel: str) -> list[dict[str, Any]] | None:
    """The first reference labelled `channel`, or None."""
    return next((r["calls"] for r in self.references if r["channel"] == channel), None)

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    for k in ("source", "root"):
      d.pop(k)
    if not d["references"]:
      d.pop("references")
    return {k: v for k, v in d.items() if v is not None}


def channel_of_calls(calls: list[dict[str, Any]]) -> str:
  """The channel a list of calls uses (see the module docstring)."""
  gui = any(c["name"] == tools.COMPUTER_USE and (c.get("arguments") or {}).get("action") not in _CONTROL_ACTIONS
            for c in calls)
  terminal = any(c["name"] == tools.BASH for c in calls)
  return "hybrid" if gui and terminal else "gui" if gui or not terminal else "terminal"


def check_references(d: dict[str, Any], source: str) -> list[dict[str, Any]]:
  """`references` (or the `reference` shorthand) -> [{channel, calls}], each validated."""
  if d.get("reference") is not None and d.get("references") is not None:
    raise PackageError(f"{source}: give either 'reference' or 'references', not both")
  if d.get("reference") is not None:
    calls = check_calls(d["reference"], source, "reference")
    return [{"channel": channel_of_calls(calls), "calls": calls}]
  refs = d.get("references")
  if refs is None:
    return []
  if not isinstance(refs, list) or not refs:
    raise PackageError(f"{source}: field 'references' must be a non-empty list of {{channel, calls}}")
  out = []
  for i, ref in enumerate(refs):
    where = f"references[{i}]"
    if not isinstance(ref, dict) or set(ref) != {"channel", "calls"}:
      raise PackageError(f"{source}: {where} must be an object with exactly 'channel' and 'calls'")
    if ref["channel"] not in CHANNELS:
      raise PackageError(f"{source}: {where}.channel must be one of {CHANNELS}, got {ref['channel']!r}")
    calls = check_calls(ref["calls"], source, f"{where}.calls")
    used = channel_of_calls(calls)
    if ref["channel"] != "hybrid" and used not in (ref["channel"],):
      raise PackageError(f"{source}: {where} is labelled {ref['channel']!r} but its calls use the {used} channel")
    out.append({"channel": ref["channel"], "calls": calls})
  return out


def _field(d: dict[str, Any], key: str, typ: type | tuple[type, ...], source: str, required: bool = True):
  if key not in d:
    if required:
      raise PackageError(f"{source}: missing field {key!r}")
    return None
  if not isinstance(d[key], typ):
    raise PackageError(f"{source}: field {key!r} must be {typ}, got {type(d[key]).__name__}")
  return d[key]


def resolve_placeholder_free(call: dict[str, Any]) -> dict[str, Any]:
  """The call with '@widget' coordinates replaced by a dummy point (for schema checks)."""
  args = copy.deepcopy(call.get("arguments"))
  if isinstance(args, dict) and isinstance(args.get("coordinate"), str) and args["coordinate"].startswith("@"):
    args["coordinate"] = [0, 0]
  return args


def check_calls(calls: Any, source: str, field: str) -> list[dict[str, Any]]:
  if not isinstance(calls, list) or not calls:
    raise PackageError(f"{source}: {field} must be a non-empty list of tool calls")
  for i, call in enumerate(calls):
    if not isinstance(call, dict) or "name" not in call:
      raise PackageError(f"{source}: {field}[{i}] must be an object with 'name' and 'arguments'")
    reason = tools.validate_call(call["name"], resolve_placeholder_free(call))
    if reason:
      raise PackageError(f"{source}: {field}[{i}]: {reason}")
  return calls


def package_from_dict(d: dict[str, Any], source: str = "<dict>", root: str | None = None) -> TaskPackage:
  if not isinstance(d, dict):
    raise PackageError(f"{source}: a task package must be a JSON object")
  kind = _field(d, "kind", str, source)
  if kind not in KINDS:
    raise PackageError(f"{source}: field 'kind' must be one of {KINDS}, got {kind!r}")
  channels = _field(d, "channels", list, source, required=False) or []
  if not set(channels) <= {"gui", "terminal"}:
    raise PackageError(f"{source}: field 'channels' may only hold 'gui' and 'terminal'")
  setup = _field(d, "setup", list, source, required=False) or []
  for i, step in enumerate(setup):
    if not isinstance(step, dict) or not isinstance(step.get("type"), str):
      raise PackageError(f"{source}: setup[{i}] must be an object with a string 'type'")
  pkg = TaskPackage(
      id=_field(d, "id", str, source), instruction=_field(d, "instruction", str, source), kind=kind,
      checker=_field(d, "checker", dict, source), setup=setup,
      apps=_field(d, "apps", list, source, required=False) or [],
      skills=_field(d, "skills", list, source, required=False) or [], channels=channels,
      references=check_references(d, source),
      near_miss=(check_calls(d["near_miss"], source, "near_miss") if d.get("near_miss") is not None else None),
      max_steps=_field(d, "max_steps", int, source, required=False), source=source, root=root)
  unknown = set(d) - {f.name for f in dataclasses.fields(TaskPackage)} - {"reference"}
  if unknown:
    raise PackageError(f"{source}: unknown fields {sorted(unknown)}")
  from mage_jax.tasks import checkers, preparers  # validate spec types early
  checkers.validate_spec(pkg.checker, f"{source}: checker")
  for i, step in enumerate(pkg.setup):
    preparers.validate_spec(step, f"{source}: setup[{i}]")
  return pkg


def load_package(path: str) -> TaskPackage:
  """A task directory (with task.json) or a .json file."""
  if os.path.isdir(path):
    root, file = path, os.path.join(path, "task.json")
  else:
    root, file = os.path.dirname(os.path.abspath(path)), path
  try:
    with open(file) as f:
      d = json.load(f)
  except FileNotFoundError:
    raise PackageError(f"{file}: not found") from None
  except json.JSONDecodeError as e:
    raise PackageError(f"{file}:{e.lineno}: invalid JSON ({e.msg})") from None
  return package_from_dict(d, source=file, root=root)


def load_suite(path: str) -> list[TaskPackage]:
  """Every package under a directory: `*.json` files and subdirectories with task.json."""
  out = []
  for entry in sorted(os.listdir(path)):
    full = os.path.join(path, entry)
    if entry.endswith(".json") or os.path.isfile(os.path.join(full, "task.json")):
      out.append(load_package(full))
  return out


def save_package(pkg: TaskPackage, directory: str) -> str:
  """Writes a package as a directory with task.json; returns the directory."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "task.json"), "w") as f:
    json.dump(pkg.to_dict(), f, indent=1)
  return directory
