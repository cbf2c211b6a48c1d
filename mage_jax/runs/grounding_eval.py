"""Click accuracy on imported grounding benchmarks, in the shape their leaderboards use.

Episodes come from data/importers/grounding.py (one step: the screenshot and the
instruction; meta["grounding"] the target, meta["benchmark"] name/split/categories). A reply
is parsed with the agent's parser (actions/parsing.py) and scored by `importers.hits`: the
predicted [0, 999] coordinate, mapped to pixels as x·(W−1)/999, inside the target box (edges
included) or polygon; for an OSWorld-G refusal record, a terminate(failure) call. A reply that
does not parse is a miss (and counted as unparsed).

Tables:
- screenspot_v2: accuracy per split × element type (mobile/desktop/web × text/icon) and "avg",
  the accuracy over all records (ScreenSpot-v2's leaderboard columns);
- osworld_g: accuracy per category of classification_result.json (text_matching,
  element_recognition, layout_understanding, fine_grained_manipulation, refusal; a record may
  count in several) and "overall" over all records;
- any other source: "overall".
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Sequence

from mage_jax.actions import parsing
from mage_jax.agent.episode import PolicyRequest
from mage_jax.data import render as render_lib
from mage_jax.data import trajectory as tr
from mage_jax.data.importers import grounding

SCREENSPOT_COLUMNS = tuple(f"{s}-{k}" for s in grounding.SCREENSPOT_SPLITS for k in ("text", "icon"))
OSWORLD_G_CATEGORIES = ("text_matching", "element_recognition", "layout_understanding",
                        "fine_grained_manipulation", "refusal")


@dataclasses.dataclass
class Scored:
  id: str
  benchmark: str
  columns: list[str]       # the table columns this record counts in (besides the overall one)
  parsed: bool
  hit: bool
  reply: str


def is_grounding(ep: tr.Episode) -> bool:
  return isinstance(ep.meta.get("grounding"), dict) and len(ep.steps) == 1


def columns_of(ep: tr.Episode) -> tuple[str, list[str]]:
  bench = ep.meta.get("benchmark") or {}
  name = bench.get("name") or ep.source or "grounding"
  if name == "screenspot_v2":
    return name, [f"{bench.get('split')}-{bench.get('data_type')}"]
  if name == "osworld_g":
    return name, list(bench.get("categories") or [])
  return name, []


def score(ep: tr.Episode, reply: str) -> Scored:
  r = parsing.parse_response(reply)
  name, columns = columns_of(ep)
  hit = r.ok and grounding.hits(ep.meta["grounding"], r.name, r.arguments)
  return Scored(ep.id, name, columns, r.ok, bool(hit), reply)


def summarize(scored: Iterable[Scored]) -> dict[str, dict[str, dict[str, float]]]:
  """{benchmark: {column: {"accuracy", "n", "unparsed"}}}; the overall column is "avg" for
  ScreenSpot-v2 and "overall" otherwise."""
  cells: dict[str, dict[str, list[int]]] = collections.defaultdict(
      lambda: collections.defaultdict(lambda: [0, 0, 0]))
  for s in scored:
    overall = "avg" if s.benchmark == "screenspot_v2" else "overall"
    for col in s.columns + [overall]:
      c = cells[s.benchmark][col]
      c[0] += s.hit
      c[1] += 1
      c[2] += not s.parsed
  order = {"screenspot_v2": SCREENSPOT_COLUMNS + ("avg",), "osworld_g": OSWORLD_G_CATEGORIES + ("overall",)}
  out = {}
  for bench, cols in cells.items():
    names = [c for c in order.get(bench, ()) if c in cols] + sorted(c for c in cols if c not in order.get(bench, ()))
    out[bench] = {c: {"accuracy": cols[c][0] / cols[c][1], "n": cols[c][1], "unparsed": cols[c][2]}
                  for c in names}
  return out


def format_table(summary: dict[str, dict[str, dict[str, float]]]) -> str:
  lines = []
  for bench, cols in summary.items():
    lines.append(f"{bench}:")
    lines.append("  " + " ".join(f"{c:>14}" for c in cols))
    lines.append("  " + " ".join(f"{100 * v['accuracy']:>13.1f}%" for v in cols.values()))
    lines.append("  " + " ".join(f"{'n=' + str(v['n']):>14}" for v in cols.values()))
  return "\n".join(lines)


def replies_from_policy(episodes: Sequence[tr.Episode], policy, renderer: render_lib.Renderer
                        ) -> list[str]:
  """One reply per episode from an agent policy (OpenAIChatPolicy, CheckpointPolicy): the prompt
  is the step's rendered context, exactly what the model sees in training (prompt phrasing 0)."""
  out = []
  for ep in episodes:
    prompt, images = renderer.render_prompt(ep, 1)
    out.append(policy.act(PolicyRequest(task=None, t=1, episode=ep, prompt_tokens=prompt,
                                        images=images, resolve=lambda a: a)).text)
  return out


def evaluation_renderer(**overrides: Any) -> render_lib.Renderer:
  return render_lib.Renderer(render_lib.RenderConfig(prompt_variants=False, **overrides))
