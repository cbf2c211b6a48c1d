"""Chained tasks: four atomic terminal skills of four different domains in one task.

Each chain skill fixes which atomic skills it chains; its parameters are one draw of each
(`{"a": .., "b": .., "c": .., "d": ..}`). The package is the parts' setups side by side, an
`all` checker over the parts' checkers, one terminal reference that runs the parts' reference
calls in order (>= 4 commands), and a near-miss that solves the first three parts and the fourth
part's near-miss. The parts come from domains whose files never overlap (csv, text, xlsx, docx,
pptx, pdf, sqlite, image), parts with a `terminal_answer` checker (the last output only) are left
out, and `build` refuses a draw whose parts touch a common path. Every chain skill meets the same
gates as any skill (initial 0, reference 1, near-miss < 1, blind exploits 0).
"""
from __future__ import annotations

import json
import random
from typing import Any

from mage_jax.forge.skill import REGISTRY
from mage_jax.forge.skills import base
from mage_jax.forge.skills import csvdata, document, image, pdf, slides, spreadsheet, sqlite, text  # noqa: F401  (the parts)

base.domain("chain", "Multi-step tasks: four atomic skills of different domains chained in one task")
base.capability("chain.office", "Chains over office documents, decks and PDFs")
base.capability("chain.data", "Chains over data files, databases and text")
base.capability("chain.mixed", "Chains that mix images with documents and data")

KEYS = ("a", "b", "c", "d")
CHAINS = {  # chain skill id -> its parts, in order
    "chain.office.deck_doc_book_pdf": ("pptx.slides.retitle", "docx.edit.replace_word", "xlsx.edit.sort_rows",
                                       "pdf.pages.reverse_order"),
    "chain.office.notes_table_format_extract": ("pptx.notes.add_notes", "docx.table.set_cell",
                                                "xlsx.format.bold_header", "pdf.pages.extract_range"),
    "chain.office.bullet_heading_formula_meta": ("pptx.text.add_bullet", "docx.style.make_heading",
                                                 "xlsx.formula.write_sum_formula", "pdf.meta.set_title_author"),
    "chain.office.body_append_lookup_delete": ("pptx.text.set_body", "docx.edit.append_paragraph",
                                               "xlsx.edit.update_by_lookup", "pdf.pages.delete_page"),
    "chain.data.filter_insert_upper_sum": ("csv.filter.rows_above", "sqlite.modify.insert_row",
                                           "text.transform.upper_case", "xlsx.formula.sum_as_value"),
    "chain.data.group_raise_unique_rename": ("csv.aggregate.group_sum", "sqlite.modify.raise_prices",
                                             "text.filter.unique_in_order", "xlsx.sheets.rename_and_order"),
    "chain.data.join_delete_comments_products": ("csv.join.on_key", "sqlite.modify.delete_small",
                                                 "text.filter.drop_comments", "xlsx.formula.row_products"),
    "chain.data.dedup_column_reverse_row": ("csv.transform.drop_duplicates", "sqlite.schema.add_column_filled",
                                            "text.transform.reverse_lines", "xlsx.edit.delete_row"),
    "chain.mixed.mirror_sort_slide_index": ("image.geometry.mirror", "csv.transform.sort_by_number",
                                            "pptx.slides.append_titled", "sqlite.schema.create_index"),
    "chain.mixed.gray_emails_bold_merge": ("image.convert.grayscale", "text.extract.emails",
                                           "docx.style.bold_paragraph", "pdf.pages.merge_in_order"),
}


def _paths(value: Any, out: set[str]) -> set[str]:
  if isinstance(value, dict):
    for k, v in value.items():
      if k in ("path", "file", "dir") and isinstance(v, str):
        out.add(v.split("/")[0])
      _paths(v, out)
  elif isinstance(value, list):
    for v in value:
      _paths(v, out)
  return out


def _terminal_calls(fields: dict[str, Any]) -> list[dict[str, Any]]:
  ref = next(r for r in fields["references"] if r["channel"] == "terminal")
  return [c for c in ref["calls"] if (c.get("arguments") or {}).get("action") != "terminate"]


def _lower_first(s: str) -> str:
  return s[:1].lower() + s[1:] if s[:1].isupper() and not s[1:2].isupper() else s


def _maker(parts: tuple[str, ...]):
  def sample(r: random.Random) -> dict[str, Any]:
    return {k: REGISTRY[p].sample(r) for k, p in zip(KEYS, parts)}

  def build(params: dict[str, Any]) -> dict[str, Any]:
    fields = [REGISTRY[p].build(params[k]) for k, p in zip(KEYS, parts)]
    seen: set[str] = set()
    for p, f in zip(parts, fields):
      mine = _paths(f["setup"], set()) | _paths(f["checker"], set())
      if mine & seen:
        raise ValueError(f"chain part {p} touches {sorted(mine & seen)}, which an earlier part uses")
      if "terminal_answer" in json.dumps(f["checker"]):
        raise ValueError(f"chain part {p} is checked on the last terminal output")
      seen |= mine
    steps = " ".join(f"({i}) {f['instruction']}" for i, f in enumerate(fields, 1))
    calls = [c for f in fields for c in _terminal_calls(f)]
    near = [c for f in fields[:-1] for c in _terminal_calls(f)]
    near += [c for c in fields[-1]["near_miss"] if (c.get("arguments") or {}).get("action") != "terminate"]
    return base.package(f"Do these {len(parts)} things, in this order. {steps}",
                        [s for f in fields for s in f["setup"]],
                        {"type": "all", "checks": [f["checker"] for f in fields]}, near, terminal=calls)

  def mentions(params: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, p in zip(KEYS, parts):
      out.update(REGISTRY[p].mentions(params[k]))
    return out
  return sample, build, mentions


for _sid, _parts in CHAINS.items():
  _sample, _build, _mentions = _maker(_parts)
  _apps = tuple(dict.fromkeys(a for p in _parts for a in REGISTRY[p].apps))
  base.define(_sid, "Four steps: " + "; ".join(_lower_first(REGISTRY[p].description) for p in _parts),
              _sample, _build, kind="terminal", apps=_apps, mentions=_mentions)
