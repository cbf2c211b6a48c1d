"""A handful of skills for the Forge engine tests (the real library is mage_jax/forge/skills).

  test.text.upper        terminal: upper-case a text file            (passes every gate)
  test.csv.sum           terminal: sum a CSV column into a file      (passes every gate)
  test.xlsx.cell         terminal: write a number into an xlsx cell  (passes; file gate opens xlsx)
  test.text.badmention   its file lacks the value `mentions` names   (file_gate rejects)
  test.text.weaknear     its near-miss is a correct solution         (near_miss_below_one rejects
                                                                      when flag=1, else passes)
"""
from __future__ import annotations

import random

from mage_jax.tasks.builtin.suite import DONE, bash
from mage_jax.forge.skill import REGISTRY, Skill, register

WORDS = ["amber", "birch", "cobalt", "delta", "ember", "falcon", "garnet", "harbor", "indigo", "jasper"]


def _refs(calls):
  return [{"channel": "terminal", "calls": calls + [DONE]}]


def _upper_sample(r: random.Random):
  return {"name": r.choice(WORDS), "words": r.sample(WORDS, 3)}


def _upper_build(p):
  text = " ".join(p["words"])
  path = f"{p['name']}.txt"
  return {"instruction": f"Convert every letter of {path} in the home directory to upper case, in place.",
          "setup": [{"type": "text", "path": path, "content": text + "\n"}],
          "checker": {"type": "file_text", "path": path, "equals": text.upper()},
          "references": _refs([bash(f"tr a-z A-Z < {path} > t && mv t {path}")]),
          "near_miss": [bash(f"tr a-z A-Z < {path} | cut -c2- > t && mv t {path}"), DONE]}


SCHEMA_UPPER = {"type": "object", "required": ["name", "words"], "additionalProperties": False,
                "properties": {"name": {"type": "string", "enum": WORDS},
                               "words": {"type": "array", "minItems": 3, "maxItems": 3,
                                         "items": {"type": "string", "enum": WORDS}}}}


def _sum_sample(r: random.Random):
  return {"values": [r.randint(1, 99) for _ in range(4)], "column": r.choice(["qty", "price", "count"])}


def _sum_build(p):
  rows = [["item", p["column"]]] + [[w, v] for w, v in zip(WORDS, p["values"])]
  return {"instruction": f"data.csv has a column '{p['column']}'. Write the sum of that column "
                         f"(just the number) to total.txt.",
          "setup": [{"type": "csv", "path": "data.csv", "rows": rows}],
          "checker": {"type": "file_text", "path": "total.txt", "equals": str(sum(p["values"]))},
          "references": _refs([bash("awk -F, 'NR>1{s+=$2} END{print s}' data.csv > total.txt")]),
          "near_miss": [bash("awk -F, 'NR>2{s+=$2} END{print s}' data.csv > total.txt"), DONE]}


SCHEMA_SUM = {"type": "object", "required": ["values", "column"],
              "properties": {"values": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 99},
                                        "minItems": 4, "maxItems": 4},
                             "column": {"type": "string", "enum": ["qty", "price", "count"]}}}


def _cell_sample(r: random.Random):
  return {"a": r.randint(2, 50), "b": r.randint(2, 50)}


def _cell_build(p):
  code = ("import openpyxl; wb = openpyxl.load_workbook('book.xlsx'); ws = wb.active; "
          "ws['C1'] = ws['A1'].value * ws['B1'].value; wb.save('book.xlsx')")
  return {"instruction": "In book.xlsx, put the product of A1 and B1 into C1 (a number).",
          "setup": [{"type": "xlsx", "path": "book.xlsx", "sheets": {"Sheet": [[p["a"], p["b"]]]}}],
          "checker": {"type": "xlsx_cells", "path": "book.xlsx", "cells": {"C1": p["a"] * p["b"]}},
          "references": _refs([bash(f'python3 -c "{code}"')]),
          "near_miss": [bash(f'python3 -c "{code.replace("* ws", "+ ws")}"'), DONE]}


SCHEMA_CELL = {"type": "object", "required": ["a", "b"],
               "properties": {"a": {"type": "integer", "minimum": 2, "maximum": 50},
                              "b": {"type": "integer", "minimum": 2, "maximum": 50}}}


def _weak_sample(r: random.Random):
  return {"word": r.choice(WORDS), "flag": r.choice([0, 1])}


def _weak_build(p):
  good = bash(f"echo {p['word']} > answer.txt")
  return {"instruction": f"Write the word {p['word']} into answer.txt.",
          "setup": [], "checker": {"type": "file_text", "path": "answer.txt", "equals": p["word"]},
          "references": _refs([good]),
          "near_miss": [good if p["flag"] else bash(f"echo {p['word']}s > answer.txt"), DONE]}


SKILLS = [
    Skill("test.text.upper", "Upper-case a text file", "terminal", ("shell",), _upper_sample, _upper_build,
          SCHEMA_UPPER, lambda p: {f"{p['name']}.txt": p["words"]}),
    Skill("test.csv.sum", "Sum a CSV column", "terminal", ("shell", "csv"), _sum_sample, _sum_build, SCHEMA_SUM,
          lambda p: {"data.csv": [p["column"], *p["values"]]}),
    Skill("test.xlsx.cell", "Multiply two xlsx cells", "terminal", ("xlsx",), _cell_sample, _cell_build,
          SCHEMA_CELL, lambda p: {"book.xlsx": [p["a"], p["b"]]}),
    Skill("test.text.badmention", "A skill whose file lacks a mentioned value", "terminal", ("shell",),
          _upper_sample, _upper_build, SCHEMA_UPPER, lambda p: {f"{p['name']}.txt": ["not-there"]}),
    Skill("test.text.weaknear", "Near-miss sometimes correct", "terminal", ("shell",), _weak_sample,
          _weak_build, {"type": "object", "required": ["word", "flag"],
                        "properties": {"word": {"type": "string", "enum": WORDS},
                                       "flag": {"type": "integer", "enum": [0, 1]}}}),
]
for _s in SKILLS:
  if _s.id not in REGISTRY:
    register(_s)
