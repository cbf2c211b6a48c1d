"""The proof task family (issue 12): small templated tasks with a train / held-out split fixed by
parameter value, for showing that SFT and RL lift held-out success on a tiny model.

Templates (`TEMPLATES`, name -> kind); every instance is 2-3 steps with one obvious solution:

  make_file     terminal  "Create a file named notes3.txt holding the word goldwolf"
                          echo goldwolf > notes3.txt
  count_lines   terminal  "Write the number of lines in memo5.txt to plan2.txt"
                          wc -l < memo5.txt > plan2.txt        (the count is nowhere in the task)
  click_colour  gui       "Click the red button": 3 coloured buttons at random slots of a 4 x 3
                          grid on a 640x400 screen; only the screenshot says where red is
  file_and_click hybrid   make_file's shell step, then click_colour's click

The split is fixed by VALUE, independent of the run's seed (issue 36: high-entropy values):
  - the values come from pools that are config fields (`config.family`, configs/proof.py;
    mage_jax/tasks/proof_pools.py reads them): by default 1,440 compound words <part A><part
    B> ("goldwolf", 36 x 40 parts) and 840 file names <base><digit>.txt ("memo5.txt", 84 x 10), a
    quarter of each held out by `family.split_seed` (1,080 / 360 words, 630 / 210 file names),
    and a fifth of the train values kept for the RL suite (`family.rl_fraction`: 216 words and
    126 file names no train-suite instance holds);
    after a space every default word is 2 Qwen3 tokens and every file name 3, and every token a
    held-out value uses is used by train values (tests/test_proof_family.py, real tokenizer);
  - (colour, slot) pairs: 6 colours x 12 slots of a 4 x 3 grid, 3 slots per colour held out;
    train screens show train pairs only (targets and distractors), held-out targets are held-out
    pairs;
  - held-out values are absent from every train task: `value_pools` refuses pools where a held-out
    word or file name occurs in the templates' text or in a train value (PoolError naming the
    field), as it refuses pools too small, overlapping splits and values with whitespace or shell
    metacharacters.
The instance seed only picks which instances of a split are drawn.

  pf.value_pools(family)      # {"words": {"train": [...], "heldout": [...]}, "file_names": {...},
                              #  "colour_slots": {...}}; family = config.family (None: defaults)
  pf.all_texts(family)        # every instruction, setup file and reference text (think, Action,
                              # tool-call arguments) any instance of either split can hold, with
                              # every value: the vocabulary the family uses
  pf.token_report(tok, family)  # tokens per value; held-out tokens no train value uses
  pf.check_suite(tasks, "heldout", family)  # a written suite holds this config's held-out values
Every function below takes `family=` too (default pools when None).

Commands, as run by hand (W is any folder; the environment must be 640x400, as here):
  python -c "from mage_jax.tasks import proof_family as pf; pf.write_suite('heldout', 'W/suite_heldout')"
  python -m launch.eval --config=configs/eval.py:scripted --config.suite=W/suite_heldout \\
      --config.env.width=640 --config.env.height=400 --config.report=False --workdir=W/eval_scripted
      # 240/240 solved, ~4 min on the loaded 2-core machine
  python -c "from mage_jax.runs import proof_teacher as pt; pt.collect_teacher_data('W/teacher')"
  python -m launch.pack --config=configs/data_tiny.py:W/teacher --out=W/packed
      # samples: terminal ~770 tokens, GUI ~1,100 tokens + 1,440 patches, hybrid ~1,300 + 1,920
  python -m pytest -q tests/test_proof_family.py
The full pipeline (teacher data -> SFT -> eval -> RL -> eval) is configs/proof.py.
"""
from __future__ import annotations

import collections
import functools
import json
import os
import random
import re
import shutil
from typing import Any, Iterator, Mapping

from mage_jax.tasks import proof_pools as pools_lib
from mage_jax.tasks.package import TaskPackage, package_from_dict, save_package
from mage_jax.tasks.proof_pools import PoolError  # noqa: F401  (raised by value_pools)

TEMPLATES = {"make_file": "terminal", "count_lines": "terminal", "click_colour": "gui",
             "file_and_click": "hybrid"}
SPLITS = ("train", "heldout")
DEFAULT_PER_TEMPLATE = {"train": 100, "heldout": 60}
SCREEN = (640, 400)
H = "/home/user"

# filler lines of count_lines' input: no digits, so the count is in no file
FILLER = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta")
SLOT_COLS, SLOT_ROWS = 4, 3
BUTTON_W = 120
COLOURS = pools_lib.COLOURS   # the default colours (a config's own: value_pools(family))


def slot_xy(slot: int) -> tuple[int, int]:
  """Window coordinates of a slot's button (the app sits at +0+0, so also screen pixels)."""
  c, r = slot % SLOT_COLS, slot // SLOT_COLS
  return 20 + c * 155, 50 + r * 110


def _check_split(split: str) -> None:
  if split not in SPLITS:
    raise ValueError(f"split={split!r}: expected one of {SPLITS}")


# ---- value pools (proof_pools: specs, split, checks) ------------------------------------------
def value_pools(family: Mapping[str, Any] | None = None) -> dict[str, dict[str, list]]:
  """{"words": {"train": [...], "heldout": [...]}, "file_names": {...}, "colour_slots": {...}} of a
  `config.family` section (None: the defaults). Checked: PoolError naming the config field when a
  pool is too small, the splits overlap, a value has whitespace or a shell metacharacter, or a
  held-out value occurs anywhere a train task can hold text."""
  fields = pools_lib.family_fields(family)
  key = json.dumps(fields, sort_keys=True, default=str)
  files = tuple(os.path.getmtime(v[5:]) for v in fields["pools"].values()
                if isinstance(v, str) and v.startswith("file:") and os.path.isfile(v[5:]))
  # fresh lists for the caller: the cached ones stay as checked
  return {kind: {split: list(v) for split, v in d.items()} for kind, d in _value_pools(key, files).items()}


@functools.lru_cache(maxsize=8)
def _value_pools(key: str, files: tuple) -> dict[str, dict[str, list]]:
  del files   # part of the cache key only: an edited pool file is read again
  pools = pools_lib.split_pools(json.loads(key))
  pools_lib.check_heldout_absent(pools, _train_text(pools))
  return pools


def words(split: str, family: Mapping[str, Any] | None = None) -> list[str]:
  _check_split(split)
  return value_pools(family)["words"][split]


def file_names(split: str, family: Mapping[str, Any] | None = None) -> list[str]:
  _check_split(split)
  return value_pools(family)["file_names"][split]


def colour_slots(split: str, family: Mapping[str, Any] | None = None) -> list[tuple[str, int]]:
  _check_split(split)
  return value_pools(family)["colour_slots"][split]


def _colours(pools: dict[str, dict[str, list]]) -> list[str]:
  return list(dict.fromkeys(c for split in SPLITS for c, _ in pools["colour_slots"][split]))


# Placeholders for the values in a template's text: where they sit, and with which letters
# around them (near_miss writes "{word}s"), is read off the templates themselves.
_SLOT_MARK = {"words": "#W#", "file_names": "#N#"}
RL_LABEL = "rl"   # the RL suite's draw: the only train-split draw that may use the rl_only values


def _train_text(pools: dict[str, dict[str, list]]) -> str:
  """Everything a train task can hold, one item a line: each template's package with placeholder
  values (its fixed text), the colours, and every train value in each form the templates give it."""
  colours = _colours(pools)
  w, n = _SLOT_MARK["words"], _SLOT_MARK["file_names"]
  params = {"name": n, "word": w, "src": n, "dst": n, "lines": [" ".join(FILLER)],
            "colour": colours[0], "slot": 0, "others": [(colours[1], 1), (colours[2], 2)]}
  fixed = "\n".join(json.dumps(_BUILD[t](params)) for t in TEMPLATES)
  lines = [re.sub("#[WN]#", "\n", fixed), " ".join(colours)]
  for kind, mark in _SLOT_MARK.items():
    forms = set(re.findall(rf"([A-Za-z]*){mark}([A-Za-z]*)", fixed))
    lines += [a + v + b for v in pools[kind]["train"] for a, b in forms]
  return "\n".join(lines)


def all_texts(family: Mapping[str, Any] | None = None, splits: tuple[str, ...] = SPLITS) -> Iterator[str]:
  """Every text an instance of either split can put before the model or ask of it: instructions,
  setup file contents, and the reference's think lines, Action lines and tool-call arguments
  (JSON), with every value of every pool in each place the templates use it (for the vocabulary
  the family uses). Click coordinates are resolved on the screen at play time: digits only."""
  pools = value_pools(family)
  colours = _colours(pools)
  filler = [f"{a} {b}" for a in FILLER for b in FILLER]   # every word at a line's start and after one
  for split in splits:
    _check_split(split)
    ws, ns, pairs = (pools[k][split] for k in ("words", "file_names", "colour_slots"))
    for i in range(max(len(ws), len(ns), len(pairs))):
      colour, slot = pairs[i % len(pairs)]
      others = [(c, (slot + 1 + j) % (SLOT_COLS * SLOT_ROWS)) for j, c in enumerate(c for c in colours if c != colour)][:2]
      p = {"name": ns[i % len(ns)], "word": ws[i % len(ws)], "src": ns[i % len(ns)],
           "dst": ns[(i + 1) % len(ns)], "lines": filler, "colour": colour, "slot": slot,
           "others": others}
      for t in TEMPLATES:
        d = _BUILD[t](p)
        yield d["instruction"]
        yield from (s["content"] for s in d["setup"] if s["type"] == "text")
        for call in d["reference"]:
          yield call["think"]
          yield call["action"]
          yield json.dumps(call["arguments"])


def token_report(tok, family: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """proof_pools.token_report of a family's pools (tokens per value, held-out tokens no train value uses)."""
  return pools_lib.token_report(value_pools(family), tok)


# ---- call builders (templated think / action text: the teacher's words) ----------------------
def _bash(cmd: str, think: str, action: str) -> dict[str, Any]:
  return {"name": "bash", "arguments": {"command": cmd}, "think": think, "action": action}


def click_step(colour: str, think: str) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": f"@buttons.button:{colour}"},
          "think": think, "action": f"Click the {colour} button"}


def done_step(think: str) -> dict[str, Any]:
  return {"name": "computer_use", "arguments": {"action": "terminate", "status": "success"},
          "think": think, "action": "Finish: the task is complete"}


def _buttons_app(target: str, target_slot: int, others: list[tuple[str, int]]) -> dict[str, Any]:
  buttons = [(target, target_slot)] + others
  buttons.sort(key=lambda b: b[1])  # screen order, so the target's place in the list says nothing
  return {"type": "app", "config": {
      "kind": "buttons", "name": "buttons", "out": f"{H}/clicked.json", "width": SCREEN[0], "height": SCREEN[1],
      "buttons": [c for c, _ in buttons], "colors": {c: c for c, _ in buttons},
      "places": {c: list(slot_xy(s)) for c, s in buttons}}}


# ---- templates: params -> package dict --------------------------------------------------------
def _make_file(p: dict[str, Any]) -> dict[str, Any]:
  name, word = p["name"], p["word"]
  return dict(
      instruction=f"Create a file named {name} holding the word {word}",
      setup=[], checker={"type": "file_text", "path": name, "equals": word},
      reference=[_bash(f"echo {word} > {name}", f"The file {name} must hold the word {word} , so I echo it into the file.",
                       f"Write {word} to {name}"),
                 done_step(f"The file {name} now holds {word} , so the task is done.")],
      near_miss=[_bash(f"echo {word}s > {name}", f"I echo the word into {name} .", f"Write {word}s to {name}"),
                 done_step("Done.")])


def _count_lines(p: dict[str, Any]) -> dict[str, Any]:
  src, dst, lines = p["src"], p["dst"], p["lines"]
  return dict(
      instruction=f"Write the number of lines in {src} to {dst}",
      setup=[{"type": "text", "path": src, "content": "\n".join(lines) + "\n"}],
      checker={"type": "file_text", "path": dst, "equals": str(len(lines))},
      reference=[_bash(f"wc -l < {src} > {dst}", f"I count the lines of {src} with wc and write the number to {dst} .",
                       f"Count the lines of {src} into {dst}"),
                 done_step(f"The line count of {src} is now in {dst} , so the task is done.")],
      near_miss=[_bash(f"wc -l {src} > {dst}", f"I count the lines of {src} .", f"Count the lines of {src}"),
                 done_step("Done.")])


def _click_colour(p: dict[str, Any]) -> dict[str, Any]:
  colour, others = p["colour"], p["others"]
  return dict(
      instruction=f"Click the {colour} button",
      setup=[_buttons_app(colour, p["slot"], others)],
      checker={"type": "app_state", "path": "clicked.json", "expected": {"clicked": colour}},
      reference=[click_step(colour, f"I find the {colour} button on the screen and click it."),
                 done_step(f"I clicked the {colour} button, so the task is done.")],
      near_miss=[click_step(others[0][0], "I click a button."), done_step("Done.")])


def _file_and_click(p: dict[str, Any]) -> dict[str, Any]:
  name, word, colour, others = p["name"], p["word"], p["colour"], p["others"]
  return dict(
      instruction=f"Create a file named {name} holding the word {word} and click the {colour} button",
      setup=[_buttons_app(colour, p["slot"], others)],
      checker={"type": "all", "checks": [
          {"type": "file_text", "path": name, "equals": word},
          {"type": "app_state", "path": "clicked.json", "expected": {"clicked": colour}}]},
      reference=[_bash(f"echo {word} > {name}", f"First the file: {name} must hold {word} , so I echo it into the file.",
                       f"Write {word} to {name}"),
                 click_step(colour, f"Now I find the {colour} button on the screen and click it."),
                 done_step(f"{name} holds {word} and I clicked the {colour} button, so the task is done.")],
      near_miss=[_bash(f"echo {word} > {name}", f"I echo {word} into {name} .", f"Write {word} to {name}"),
                 click_step(others[0][0], "I click a button."), done_step("Done.")])


_BUILD = {"make_file": _make_file, "count_lines": _count_lines, "click_colour": _click_colour,
          "file_and_click": _file_and_click}


# ---- parameter sampling -----------------------------------------------------------------------
def _screen(rng: random.Random, split: str, pools: dict[str, dict[str, list]]) -> tuple[str, int, list[tuple[str, int]]]:
  """A target (colour, slot) of the split and two distractors at other slots in other colours
  (train screens use train pairs only, so no held-out pair is ever on a train screen)."""
  colour, slot = rng.choice(pools["colour_slots"][split])
  allowed = set(pools["colour_slots"]["train"]) if split == "train" else None
  colours = _colours(pools)
  others: list[tuple[str, int]] = []
  while len(others) < 2:
    c, s = rng.choice(colours), rng.randrange(SLOT_COLS * SLOT_ROWS)
    if c in {colour, *(o[0] for o in others)} or s in {slot, *(o[1] for o in others)}:
      continue
    if allowed is not None and (c, s) not in allowed:
      continue
    others.append((c, s))
  return colour, slot, others


def _params(template: str, rng: random.Random, split: str, pools: dict[str, dict[str, list]]) -> dict[str, Any]:
  ws, ns = pools["words"][split], pools["file_names"][split]
  if template == "make_file":
    return {"name": rng.choice(ns), "word": rng.choice(ws)}
  if template == "count_lines":
    src, dst = rng.sample(ns, 2)
    return {"src": src, "dst": dst, "lines": [" ".join(rng.choices(FILLER, k=2)) for _ in range(rng.randint(3, 12))]}
  colour, slot, others = _screen(rng, split, pools)
  p = {"colour": colour, "slot": slot, "others": others}
  if template == "file_and_click":
    p.update(name=rng.choice(ns), word=rng.choice(ws))
  return p


def instance_params(split: str, seed: int = 0, per_template: int | None = None,
                    family: Mapping[str, Any] | None = None, exclude: Mapping[str, Any] | None = None,
                    label: str = "") -> list[tuple[str, dict[str, Any]]]:
  """(template, params) of every instance, in `instances` order: distinct within a template.
  Values come from `value_pools(family)`; `seed` only picks which instances are drawn.
  exclude {"words": [...], "file_names": [...]}: values left out of the split's pools (the RL
  suite's: the train values no train-suite instance uses); `label` (default: the split) names
  the draw, so another label draws other instances. A train-split draw leaves out the pools'
  `rl_only` values (config.family.rl_fraction) unless its label is RL_LABEL (the RL suite's)."""
  _check_split(split)
  pools = value_pools(family)
  if split == "train" and label != RL_LABEL:   # the values reserved for RL stay out of SFT's tasks
    for kind in _SLOT_MARK:
      reserved = set(pools[kind]["rl_only"])
      pools[kind]["train"] = [v for v in pools[kind]["train"] if v not in reserved]
  for kind, values in (exclude or {}).items():
    if kind not in _SLOT_MARK:
      raise ValueError(f"exclude: unknown value kind {kind!r}; expected one of {sorted(_SLOT_MARK)}")
    gone = set(values)
    pools[kind][split] = [v for v in pools[kind][split] if v not in gone]
  if len(pools["words"][split]) < 1 or len(pools["file_names"][split]) < 2:
    raise ValueError(f"{split} split with {sum(len(v) for v in (exclude or {}).values())} values excluded: "
                     f"{len(pools['words'][split])} words and {len(pools['file_names'][split])} file names "
                     "left; the templates need >= 1 word and >= 2 file names (enlarge config.family.pools "
                     "or draw fewer train instances)")
  n = per_template or DEFAULT_PER_TEMPLATE[split]
  out = []
  for template in TEMPLATES:
    rng = random.Random(f"proof:{template}:{label or split}:{seed}")
    seen: set[str] = set()
    tries = 0
    while len(seen) < n:
      tries += 1
      if tries > 50 * n:
        raise ValueError(f"{template}/{split}: only {len(seen)} distinct instances, asked for {n}")
      p = _params(template, rng, split, pools)
      key = json.dumps(p, sort_keys=True)
      if key not in seen:
        seen.add(key)
        out.append((template, p))
  return out


def build(template: str, params: dict[str, Any], id: str) -> TaskPackage:
  d = _BUILD[template](params)
  kind = TEMPLATES[template]
  d.update(id=id, kind=kind, max_steps=6,
           channels={"terminal": ["terminal"], "gui": ["gui"], "hybrid": ["gui", "terminal"]}[kind],
           apps=[] if kind == "terminal" else ["tk"], skills=["proof", f"proof:{template}"])
  return package_from_dict(d, source=f"proof_family:{id}")


def instances(split: str, seed: int = 0, per_template: int | None = None,
              family: Mapping[str, Any] | None = None, exclude: Mapping[str, Any] | None = None,
              label: str = "") -> list[TaskPackage]:
  """Deterministic instances of a split (ids proof_<template>_<label or split>_<i>); exclude and
  label as in `instance_params`."""
  counters: collections.Counter = collections.Counter()
  out = []
  for template, p in instance_params(split, seed, per_template, family, exclude, label):
    out.append(build(template, p, f"proof_{template}_{label or split}_{counters[template]:03d}"))
    counters[template] += 1
  return out


def template_of(task_id: str) -> str:
  """The template of an instance id (proof_<template>_<split>_<i>)."""
  for t in sorted(TEMPLATES, key=len, reverse=True):
    if task_id.startswith(f"proof_{t}_"):
      return t
  raise ValueError(f"{task_id!r} is not a proof-family instance id")


_INSTRUCTION = {
    "make_file": re.compile(r"Create a file named (?P<name>\S+) holding the word (?P<word>\S+)"),
    "count_lines": re.compile(r"Write the number of lines in (?P<src>\S+) to (?P<dst>\S+)"),
    "click_colour": re.compile(r"Click the (?P<colour>\S+) button"),
    "file_and_click": re.compile(r"Create a file named (?P<name>\S+) holding the word (?P<word>\S+) "
                                r"and click the (?P<colour>\S+) button")}


def instance_values(task: TaskPackage) -> dict[str, list]:
  """The values an instance was built from, read off its instruction and screen: words,
  file_names, colour_slots (the target's (colour, slot)) and screen (every button's)."""
  m = _INSTRUCTION[template_of(task.id)].fullmatch(task.instruction)
  if m is None:
    raise ValueError(f"{task.source}: instruction {task.instruction!r} is not its template's")
  g = m.groupdict()
  slot_of = {slot_xy(i): i for i in range(SLOT_COLS * SLOT_ROWS)}
  screen = [(c, slot_of.get(tuple(xy), -1)) for s in task.setup if s["type"] == "app"
            for c, xy in s["config"]["places"].items()]
  return {"words": [g["word"]] if "word" in g else [],
          "file_names": [g[k] for k in ("name", "src", "dst") if k in g],
          "colour_slots": [p for p in screen if p[0] == g["colour"]] if "colour" in g else [],
          "screen": screen}


def check_suite(tasks: list[TaskPackage], split: str, family: Mapping[str, Any] | None = None) -> None:
  """ValueError unless every instance's values are `split` values of `value_pools(family)` (and, on
  the train split, every button on its screen): a suite written with other pools is not evaluated
  as if it were this config's."""
  _check_split(split)
  pools = value_pools(family)
  for t in tasks:
    vals = instance_values(t)
    if split == "train":
      vals["colour_slots"] = vals["screen"]
    for kind in ("words", "file_names", "colour_slots"):
      bad = [v for v in vals[kind] if tuple(v) not in set(map(tuple, pools[kind][split]))] if kind == "colour_slots" \
          else [v for v in vals[kind] if v not in set(pools[kind][split])]
      if bad:
        field = "colours" if kind == "colour_slots" else kind
        raise ValueError(f"{t.source}: {kind} {bad} not among the {split} values of config.family.pools.{field} "
                         "(a suite written with other pools or split?)")


def split_counts(seed: int = 0, per_template: dict[str, int] | int | None = None,
                 family: Mapping[str, Any] | None = None) -> dict[str, dict[str, int]]:
  """{template: {"train": n, "heldout": n, "kind": kind}}: distinct instances per template and split."""
  out = {t: {"kind": k} for t, k in TEMPLATES.items()}
  for split in SPLITS:
    n = per_template.get(split) if isinstance(per_template, dict) else per_template
    for t, _ in instance_params(split, seed, n, family):
      out[t][split] = out[t].get(split, 0) + 1
  return out


def used_values(tasks: list[TaskPackage]) -> dict[str, list[str]]:
  """{"words": [...], "file_names": [...]}: every value the instances were built from, sorted."""
  out: dict[str, set] = {"words": set(), "file_names": set()}
  for t in tasks:
    vals = instance_values(t)
    for kind in out:
      out[kind].update(vals[kind])
  return {kind: sorted(v) for kind, v in out.items()}


def write_suite(split: str, directory: str, seed: int = 0, per_template: int | None = None,
                family: Mapping[str, Any] | None = None, exclude: Mapping[str, Any] | None = None,
                label: str = "") -> list[str]:
  """One package directory per instance under `directory` (launch.eval --config.suite=DIR,
  launch.rl --config.rl.suite=DIR). Stale proof_* packages there are removed first.
  exclude and label as in `instance_params` (the RL suite: label "rl", the train suite's values
  excluded)."""
  tasks = instances(split, seed, per_template, family, exclude, label)
  os.makedirs(directory, exist_ok=True)
  keep = {t.id for t in tasks}
  for entry in os.listdir(directory):
    full = os.path.join(directory, entry)
    if entry.startswith("proof_") and entry not in keep and os.path.isfile(os.path.join(full, "task.json")):
      shutil.rmtree(full)
  return [save_package(t, os.path.join(directory, t.id)) for t in tasks]
