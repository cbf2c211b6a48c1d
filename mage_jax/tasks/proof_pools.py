"""The proof family's value pools (issue 36): which words, file names and (colour, slot) layouts its
instances draw from, and which of them are held out. Read from config fields
(`config.family`, configs/proof.py), so anyone can rerun the proof on values of their own.

A pool field is a spec string:
  product:A1,A2|B1,B2|C    every concatenation a + b + c ("product:sun,moon|bird,fish" -> sunbird,
                           sunfish, moonbird, moonfish); the default pools are products
  file:PATH                one value a line ('#' comments and blank lines skipped)
  a,b,c                    the values themselves
The held-out values are `heldout_fraction` of each pool, drawn by `split_seed` (a fixed split, never
the run's seed), or the values of the explicit `<pool>_heldout` field (then the pool is the train
values). `rl_fraction` of each train pool (words, file names) is reserved for RL (the `rl_only`
list, drawn by `split_seed`): the train suite, so SFT, never holds those values, and the RL suite
draws from them (an RL update cannot then gain by recalling SFT's values). (colour, slot) pairs: every colour of `pools.colours` at every slot of the 4 x 3 grid;
per colour, `round(heldout_fraction * 12)` slots are held out (or `pools.colour_slots_heldout`,
"red:0,blue:5"), so every colour has train and held-out layouts.

The default parts were chosen with the real Qwen3 tokenizer: after a space every default word is
exactly two tokens (" gold" + "wolf") and every default file name three (" memo" + "5" + ".txt"), so a
held-out value is a new combination of tokens that train values use (tests/test_proof_family.py
checks both with the tokenizer; `token_report` measures any pools).
"""
from __future__ import annotations

import collections
import os
import random
import re
from typing import Any, Iterable, Mapping

# Compound words: 36 first parts x 40 second parts = 1,440 words.
WORD_A = ("snow", "gold", "iron", "wind", "frost", "night", "day", "silver", "copper", "oak", "rock",
          "mist", "shadow", "dark", "thunder", "river", "hill", "forest", "earth", "wild", "black",
          "glass", "bright", "cold", "high", "low", "old", "new", "sweet", "sour", "soft", "quick",
          "slow", "tall", "long", "bold")
WORD_B = ("bird", "fish", "leaf", "stone", "boat", "bell", "wolf", "fox", "bear", "deer", "rose", "wall",
          "flower", "field", "fall", "storm", "berry", "wood", "wing", "king", "lord", "book", "key",
          "coat", "cat", "lion", "moth", "fly", "bug", "worm", "cloud", "path", "road", "lamp", "cup",
          "box", "bag", "bow", "arrow", "pipe")
# File names: 84 bases x 10 digits = 840 names.
NAME_BASE = ("notes", "data", "memo", "list", "log", "plan", "draft", "report", "budget", "summary",
             "todo", "ideas", "agenda", "invoice", "letter", "diary", "journal", "recipe", "schedule",
             "inventory", "minutes", "outline", "script", "config", "backup", "archive", "index",
             "table", "chart", "sheet", "record", "entry", "ticket", "order", "receipt", "contract",
             "proposal", "review", "survey", "story", "poem", "essay", "lesson", "quiz", "exam", "grade",
             "score", "result", "sample", "trial", "batch", "queue", "stack", "cache", "buffer",
             "profile", "account", "contact", "address", "message", "email", "chat", "thread", "topic",
             "post", "page", "chapter", "section", "card", "form", "doc", "task", "goal", "team",
             "project", "client", "vendor", "price", "cost", "sales", "stock", "asset", "brief", "patch")
NAME_DIGIT = tuple(str(d) for d in range(10))
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange")
N_SLOTS = 12   # the buttons app's 4 x 3 grid (proof_family.slot_xy)

DEFAULTS: dict[str, Any] = {
    "split_seed": 0,
    "heldout_fraction": 0.25,
    # of the train values, reserved for the RL suite (never in a train-suite instance, so never in
    # SFT's episodes): with every train value in SFT, the RL suite had only the 63 file names SFT's
    # 1,200 draws missed, and its updates sharpened recall of them (docs/results.md, session 27)
    "rl_fraction": 0.2,
    "min_train_values": 500,     # issue 36: >= 500 train words and file names for SFT (less rl_only)
    "min_heldout_values": 100,
    "pools": {
        "words": "product:" + ",".join(WORD_A) + "|" + ",".join(WORD_B),
        "file_names": "product:" + ",".join(NAME_BASE) + "|" + ",".join(NAME_DIGIT) + "|.txt",
        "colours": ",".join(COLOURS),
        "words_heldout": "", "file_names_heldout": "", "colour_slots_heldout": "",
    },
}
KINDS = ("words", "file_names", "colour_slots")
# What a value may be: it is echoed into shell commands and written as a file name, unquoted.
VALUE_RE = {"words": re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*"),
            "file_names": re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*"),
            "colours": re.compile(r"[a-z]+")}
ALLOWED = {"words": "letters, digits, '_' and '-', starting with a letter or digit",
           "file_names": "letters, digits, '_', '-' and single dots, starting with a letter or digit",
           "colours": "lower-case letters (a Tk colour name)"}
RESERVED_NAMES = {"clicked.json"}   # the buttons app's output file in the task's home


class PoolError(ValueError):
  """A bad pool config; the message names the config field (config.family....)."""


def family_fields(family: Mapping[str, Any] | None) -> dict[str, Any]:
  """The pool fields of a `config.family` section (ConfigDict or dict), defaults filled in."""
  out = {k: v for k, v in DEFAULTS.items() if k != "pools"}
  pools = dict(DEFAULTS["pools"])
  if family is not None:
    for k in out:
      if k in family and family[k] is not None:
        out[k] = family[k]
    given = family["pools"] if "pools" in family else None
    for k, v in (given.items() if given is not None else ()):
      if k not in pools:
        raise PoolError(f"config.family.pools.{k}: unknown pool field; expected one of {sorted(pools)}")
      pools[k] = v
  out["pools"] = pools
  return out


def parse_spec(spec: str, field: str) -> list[tuple[str, str]]:
  """(value, where) pairs of a spec string (module docstring); `where` names the source in errors."""
  if not isinstance(spec, str) or not spec.strip():
    raise PoolError(f"config.family.pools.{field}={spec!r}: empty; expected 'product:A,B|C,D', "
                    "'file:PATH' or 'a,b,c'")
  spec = spec.strip()
  where = f"config.family.pools.{field}"
  if spec.startswith("file:"):
    path = spec[len("file:"):]
    if not os.path.isfile(path):
      raise PoolError(f"{where}={spec!r}: no such file {os.path.abspath(path)}")
    with open(path) as f:
      return [(line.strip(), f"{path}:{i}") for i, line in enumerate(f, start=1)
              if line.strip() and not line.strip().startswith("#")]
  if spec.startswith("product:"):
    parts = [[x.strip() for x in group.split(",")] for group in spec[len("product:"):].split("|")]
    values = [""]
    for group in parts:
      if not all(group):
        raise PoolError(f"{where}={spec!r}: an empty part in {','.join(group)!r}")
      values = [v + x for v in values for x in group]
    return [(v, where) for v in values]
  return [(v.strip(), where) for v in spec.split(",")]


def _values(spec: str, field: str, kind: str) -> list[str]:
  """The checked values of a spec: allowed characters, no duplicates, no reserved name."""
  out, seen = [], {}
  for v, where in parse_spec(spec, field):
    if not VALUE_RE[kind].fullmatch(v) or len(v) > 64:
      raise PoolError(f"config.family.pools.{field}: value {v!r} ({where}) is not allowed: whitespace, "
                      f"a shell metacharacter or over 64 characters; a value is {ALLOWED[kind]}")
    if kind == "file_names" and v in RESERVED_NAMES:
      raise PoolError(f"config.family.pools.{field}: {v!r} ({where}) is a file the task's apps write")
    if v in seen:
      raise PoolError(f"config.family.pools.{field}: {v!r} twice ({seen[v]} and {where})")
    seen[v] = where
    out.append(v)
  return out


def _fraction(fields: dict[str, Any]) -> float:
  f = fields["heldout_fraction"]
  if not isinstance(f, (int, float)) or not 0 < f < 1:
    raise PoolError(f"config.family.heldout_fraction={f!r}: expected a number strictly between 0 and 1")
  return float(f)


def _rl_fraction(fields: dict[str, Any]) -> float:
  f = fields["rl_fraction"]
  if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f < 1:
    raise PoolError(f"config.family.rl_fraction={f!r}: expected a number in [0, 1) (0: no values reserved for RL)")
  return float(f)


def _split(values: list[str], fraction: float, seed: int, kind: str) -> tuple[list[str], list[str]]:
  """(rest, drawn) in pool order: round(fraction * n) values drawn by `seed` (`kind` names the draw)."""
  order = list(range(len(values)))
  random.Random(f"proof_pools:{kind}:{seed}").shuffle(order)
  held = set(order[:round(fraction * len(values))])
  return ([v for i, v in enumerate(values) if i not in held], [v for i, v in enumerate(values) if i in held])


def _string_pool(fields: dict[str, Any], kind: str) -> dict[str, list[str]]:
  pools = fields["pools"]
  values = _values(pools[kind], kind, kind)
  if pools[f"{kind}_heldout"]:
    train, held = values, _values(pools[f"{kind}_heldout"], f"{kind}_heldout", kind)
    both = sorted(set(train) & set(held))
    if both:
      raise PoolError(f"config.family.pools.{kind} and config.family.pools.{kind}_heldout overlap: "
                      f"{len(both)} values in both, e.g. {both[:5]}")
  else:
    train, held = _split(values, _fraction(fields), fields["split_seed"], kind)
  sft, rl_only = _split(train, _rl_fraction(fields), fields["split_seed"], f"rl:{kind}")
  for split, vals, least in (("train values for SFT (train less rl_only)", sft, fields["min_train_values"]),
                             ("held-out values", held, fields["min_heldout_values"])):
    if len(vals) < least:
      key = "min_heldout_values" if split.startswith("held-out") else "min_train_values"
      raise PoolError(f"config.family.pools.{kind}: {len(vals)} {split} (pool of {len(values)}"
                      f"{'' if pools[f'{kind}_heldout'] else ', heldout_fraction ' + str(fields['heldout_fraction'])}"
                      f", rl_fraction {fields['rl_fraction']}); config.family.{key}={least} needed")
  return {"train": train, "heldout": held, "rl_only": rl_only}


def _colour_slots(fields: dict[str, Any]) -> dict[str, list[tuple[str, int]]]:
  pools = fields["pools"]
  colours = _values(pools["colours"], "colours", "colours")
  if len(colours) < 3:
    raise PoolError(f"config.family.pools.colours={pools['colours']!r}: a screen shows 3 buttons in "
                    f"different colours; {len(colours)} given")
  pairs = [(c, s) for c in colours for s in range(N_SLOTS)]
  if pools["colour_slots_heldout"]:
    held = set()
    for item in pools["colour_slots_heldout"].split(","):
      m = re.fullmatch(r"\s*([a-z]+):(\d+)\s*", item)
      if not m or (m.group(1), int(m.group(2))) not in pairs:
        raise PoolError(f"config.family.pools.colour_slots_heldout: {item!r} is not <colour>:<slot> with a "
                        f"colour of config.family.pools.colours and a slot 0-{N_SLOTS - 1}")
      held.add((m.group(1), int(m.group(2))))
  else:
    k = min(N_SLOTS - 1, max(1, round(_fraction(fields) * N_SLOTS)))
    held = {(c, s) for c in colours
            for s in random.Random(f"proof_pools:colour_slots:{c}:{fields['split_seed']}").sample(range(N_SLOTS), k)}
  train = [p for p in pairs if p not in held]
  bare = [c for c in colours if not any(p[0] == c for p in train)]
  if bare:
    raise PoolError(f"config.family.pools.colour_slots_heldout holds every slot of {bare}: "
                    "each colour needs train layouts")
  return {"train": train, "heldout": [p for p in pairs if p in held]}


def split_pools(family: Mapping[str, Any] | None) -> dict[str, dict[str, list]]:
  """{"words": {"train", "heldout", "rl_only"}, "file_names": ..., "colour_slots": {"train", "heldout"}}
  of a family config (rl_only: the train values kept out of the train suite, for RL),
  checked (PoolError naming the field), without the check against the templates' text
  (proof_family.value_pools does both)."""
  fields = family_fields(family)
  out = {kind: _string_pool(fields, kind) for kind in ("words", "file_names")}
  out["colour_slots"] = _colour_slots(fields)
  return out


def letter_bounded(value: str, text: str) -> re.Match | None:
  """Where `value` occurs in `text` with no letter either side: as a word, as a file-name stem
  ("memo" in "memo5.txt"), anywhere a tokenizer would see its letters as one run."""
  return re.search(rf"(?<![A-Za-z]){re.escape(value)}(?![A-Za-z])", text)


def check_heldout_absent(pools: dict[str, dict[str, list]], train_text: str) -> None:
  """PoolError when a held-out word or file name occurs in `train_text` (everything a train task
  can hold: the templates' fixed text and every train value in each of its forms)."""
  runs: dict[str, list[int]] = collections.defaultdict(list)   # maximal letter run -> its starts
  for m in re.finditer(r"[A-Za-z]+", train_text):
    runs[m.group()].append(m.start())
  for kind in ("words", "file_names"):
    for value in pools[kind]["heldout"]:
      # a file name's stem too: held-out "goldwolf.txt" against a train word "goldwolf"
      for v in dict.fromkeys((value, value.split(".")[0]) if kind == "file_names" else (value,)):
        m = _find_bounded(v, train_text, runs)
        if m:
          end = train_text.find("\n", m.end())
          line = train_text[train_text.rfind("\n", 0, m.start()) + 1:end if end >= 0 else None][:120]
          what = f"held-out value {value!r}" + (f" (its stem {v!r})" if v != value else "")
          raise PoolError(f"config.family.pools.{kind}: {what} occurs in train tasks (in {line!r}); "
                          "held-out values must be absent from every train task")


def _find_bounded(v: str, text: str, runs: dict[str, list[int]]) -> re.Match | None:
  """letter_bounded(v, text), fast where v starts with a letter: a letter-bounded match starts
  where v's first letter run is a maximal run of `text` (`runs`: run -> its starts)."""
  first = re.match(r"[A-Za-z]+", v)
  if not first:
    return letter_bounded(v, text)
  at = [i for i in runs.get(first.group(), ()) if text.startswith(v, i) and not text[i + len(v):i + len(v) + 1].isalpha()]
  return re.compile(re.escape(v)).search(text, at[0]) if at else None


def token_counts(values: Iterable[str], tok) -> dict[int, int]:
  """{tokens per value: number of values}, each value encoded after a space (as in every text)."""
  return dict(sorted(collections.Counter(len(tok.encode(" " + v)) for v in values).items()))


def token_report(pools: dict[str, dict[str, list]], tok) -> dict[str, Any]:
  """Per kind and split: pool size and the tokens-per-value distribution; and the tokens held-out
  values use that no train value does (each such token must be learnt as a target elsewhere,
  e.g. in the pretraining corpus, or the model cannot emit it)."""
  out: dict[str, Any] = {}
  for kind in ("words", "file_names"):
    ids = {split: {i for v in pools[kind][split] for i in tok.encode(" " + v)} for split in ("train", "heldout")}
    out[kind] = {split: {"values": len(pools[kind][split]), "tokens_per_value": token_counts(pools[kind][split], tok)}
                 for split in ("train", "heldout")}
    out[kind]["heldout_tokens_not_in_train"] = sorted(tok.decode([i]) for i in ids["heldout"] - ids["train"])
  out["colour_slots"] = {split: len(pools["colour_slots"][split]) for split in ("train", "heldout")}
  return out
