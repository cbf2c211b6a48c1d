"""The instruction-checker consistency gate: after any rewording, does the new instruction still
ask what the checker scores?

The checker is fixed when the skill builds the package; a rewording only changes the text the
agent reads. So a rewording is consistent when it keeps everything the checker depends on and
the original instruction states:

  * literals: every quoted string, file name and number of the original (filecheck.literal_values)
    and every scalar of the checker spec that the original mentions (`lost_literal`,
    `lost_checker_value`); every number and file name as often as in the original
    (`added_number`: "the top 3", `lost_number`: "4 things" -> "5 things" where a 4 and a 5
    occur elsewhere too, `added_file` / `lost_file`: a file mentioned twice, one mention renamed);
  * meaning words, grouped by axis and polarity (AXES): ordering (lowest first / ascending vs
    highest first / descending), extremes (smallest vs largest), comparisons (above / more than vs
    below / less than, at least vs at most), position (first vs last), direction (left / right,
    clockwise / counterclockwise, up / down), negation (not / without / except), case and
    inclusiveness, counted outside file names. Per axis each polarity must occur as often before
    as after: one that gains (`flipped:<axis>` when another loses, else `added:<axis>`) or loses
    occurrences (`dropped:<axis>`) rejects the rewording. Synonyms of one polarity are interchangeable
    ("lowest first" -> "in ascending order" passes).

The check is deliberately conservative: a rewording that drops a harmless "first" is rejected
too, and the node falls back to the original text, which is always consistent.

`JUDGE_*` is the optional LLM judge (forge/nodes.RewordNode runs it after the programmatic check
when `llm.judge` is on): it sees both instructions and the checker and must answer same=true.
"""
from __future__ import annotations

import collections
import json
import re
from typing import Any

from mage_jax.forge import filecheck

# axis -> polarity -> phrases (lower case; matched on word boundaries, longest first)
AXES: dict[str, dict[str, tuple[str, ...]]] = {
    "order": {"low_first": ("lowest first", "smallest first", "ascending", "increasing", "least first",
                            "fewest first", "cheapest first", "earliest first", "oldest first", "a to z",
                            "a-z", "low to high", "smallest to largest", "lowest to highest"),
              "high_first": ("highest first", "largest first", "descending", "decreasing", "most first",
                             "biggest first", "newest first", "latest first", "z to a", "z-a", "high to low",
                             "largest to smallest", "highest to lowest", "reverse", "reversed")},
    "extreme": {"min": ("lowest", "smallest", "least", "minimum", "min", "fewest", "cheapest", "shortest",
                        "earliest", "oldest"),
                "max": ("highest", "largest", "most", "maximum", "max", "greatest", "biggest", "longest",
                        "latest", "newest", "top")},
    "compare": {"gt": ("greater than", "more than", "above", "over", "higher than", "larger than",
                       "exceeds", "exceeding", "bigger than"),
                "lt": ("less than", "fewer than", "below", "under", "lower than", "smaller than"),
                "ge": ("at least", "or more", "no less than", "no fewer than", "minimum of"),
                "le": ("at most", "or fewer", "or less", "no more than", "maximum of", "up to"),
                "eq": ("equal to", "exactly", "equals")},
    "position": {"first": ("first", "leading", "beginning", "start"),
                 "last": ("last", "trailing", "end", "final")},
    "side": {"left": ("left",), "right": ("right",)},
    "rotation": {"cw": ("clockwise",), "ccw": ("counterclockwise", "counter-clockwise", "anticlockwise",
                                             "anti-clockwise")},
    "vertical": {"up": ("up", "upward", "upwards", "above it"), "down": ("down", "downward", "downwards")},
    "negation": {"neg": ("not", "no", "never", "without", "except", "excluding", "excluded", "non",
                         "don't", "doesn't", "isn't", "aren't", "none")},
    "case": {"upper": ("uppercase", "upper case", "upper-case", "capital", "capitals"),
             "lower": ("lowercase", "lower case", "lower-case")},
    "bounds": {"inclusive": ("inclusive", "included", "including"), "exclusive": ("exclusive",)},
    "parity": {"even": ("even",), "odd": ("odd",)},
    "truth": {"true": ("true", "yes"), "false": ("false",)},
}

_PHRASES = sorted(((p, axis, pol) for axis, pols in AXES.items() for pol, ps in pols.items() for p in ps),
                  key=lambda x: -len(x[0]))
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_FILE = re.compile(r"\b[\w.-]+\.[A-Za-z][A-Za-z0-9]{0,4}\b")


def meaning_words(text: str) -> collections.Counter:
  """{(axis, polarity): occurrences} in `text` outside file names; a longer phrase claims its
  words first ("at least" is `ge`, not the extreme `min`)."""
  low = " " + re.sub(r"\s+", " ", _FILE.sub(" ", text.lower())) + " "
  found: collections.Counter = collections.Counter()
  for phrase, axis, pol in _PHRASES:
    pat = re.compile(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)")
    hits = len(pat.findall(low))
    if hits:
      found[(axis, pol)] += hits
      low = pat.sub(" # ", low)
  return found


def checker_scalars(spec: Any) -> list[str]:
  """The string and number values of a checker spec (keys and type names left out)."""
  out: list[str] = []

  def walk(v: Any, key: str = "") -> None:
    if isinstance(v, dict):
      for k, x in v.items():
        walk(x, k)
    elif isinstance(v, list):
      for x in v:
        walk(x, key)
    elif isinstance(v, bool) or v is None or key == "type":
      return
    elif isinstance(v, (int, float, str)):
      s = str(v)
      if s and s not in out:
        out.append(s)
  walk(spec)
  return out


def _mentions(text: str, value: str) -> bool:
  return re.search(r"(?<![\w.])" + re.escape(value.lower()) + r"(?![\w])", text.lower()) is not None


def problems(original: str, reworded: str, checker: Any = None) -> list[str]:
  """Why `reworded` may ask something else than `original` (empty: consistent). Each item starts
  with its reason: lost_literal, lost_checker_value, added_number, lost_number, added_file, lost_file, flipped:<axis>,
  dropped:<axis>, added:<axis>."""
  out = []
  for v in filecheck.literal_values(original):
    if v not in reworded:
      out.append(f"lost_literal: {v!r}")
  for v in checker_scalars(checker):
    if len(v) > 1 or v.isdigit():
      if _mentions(original, v) and not _mentions(reworded, v):
        out.append(f"lost_checker_value: {v!r}")
  for what, pattern in (("number", _NUMBER), ("file", _FILE)):  # as often as before, each
    before, after = collections.Counter(pattern.findall(original)), collections.Counter(pattern.findall(reworded))
    more = sorted(v for v in after if after[v] > before[v])
    fewer = sorted(v for v in before if before[v] > after[v])
    if more:
      out.append(f"added_{what}: {more[0]}")
    if fewer:
      out.append(f"lost_{what}: {fewer[0]}")
  a, b = meaning_words(original), meaning_words(reworded)
  for axis in AXES:
    more = sorted(p for (x, p) in b if x == axis and b[(x, p)] > a[(x, p)])
    fewer = sorted(p for (x, p) in a if x == axis and a[(x, p)] > b[(x, p)])
    if more and fewer:
      out.append(f"flipped:{axis}: {fewer} -> {more}")
    elif more:
      out.append(f"added:{axis}: {more}")
    elif fewer:
      out.append(f"dropped:{axis}: {fewer}")
  return out


def reason_of(problem: str) -> str:
  """The counted reason of one problem line ("flipped:order: ..." -> "flipped:order")."""
  head = problem.split(": ")[0]
  return head


JUDGE_SYSTEM = "You check task instructions for a computer-use agent. Reply with JSON only."
JUDGE_PROMPT = ("An instruction was reworded. Its checker (what is scored) is: {checker}\n"
                "Original: {original}\nReworded: {reworded}\n"
                "Does the reworded instruction ask for exactly the same result as the original, so "
                "that the same checker scores it correctly (same values, same order, same comparison, "
                "same files)? Reply with JSON matching: {schema}")
JUDGE_SCHEMA = {"type": "object", "required": ["same"],
                "properties": {"same": {"type": "boolean"}, "why": {"type": "string"}}}


def judge_inputs(original: str, reworded: str, checker: Any) -> dict[str, str]:
  return {"original": original, "reworded": reworded,
          "checker": json.dumps(checker, sort_keys=True)[:2000]}
