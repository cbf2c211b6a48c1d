"""Chained tasks (forge/skills/chain.py): every chain skill builds a valid package over 10 seeds
whose terminal reference runs >= 4 commands from four domains, checked by an `all` of the parts'
checkers; its near-miss differs from the reference; and a draw whose parts share a file is
refused. (The sandbox gates of a chain skill run in test_forge_skills.py's one-skill-per-domain
rotation and `launch.skillcheck --domains=chain`.)"""
from __future__ import annotations

import random
import statistics

import pytest

from mage_jax.tasks import package as pk
from mage_jax.forge.skills import chain, load_all, package_dict

REG = load_all()


def test_chains_are_valid_multi_step_packages():
  lengths = []
  for sid in chain.CHAINS:
    s = REG[sid]
    assert s.multi_app and len({p.split(".")[0] for p in chain.CHAINS[sid]}) == 4
    for seed in range(10):
      params = s.sample(random.Random(seed))
      p = pk.package_from_dict(package_dict(s, params, sid), source=sid)
      calls = [c for c in p.reference if (c.get("arguments") or {}).get("action") != "terminate"]
      lengths.append(len(calls))
      assert p.checker["type"] == "all" and len(p.checker["checks"]) == 4
      assert p.near_miss != p.reference and p.instruction.count("(") >= 4
  assert statistics.median(lengths) >= 4 and min(lengths) >= 4, lengths


def test_a_chain_whose_parts_share_a_file_is_refused():
  sample, build, _ = chain._maker(("csv.filter.rows_above", "csv.filter.select_columns",
                                   "text.transform.upper_case", "xlsx.edit.sort_rows"))
  with pytest.raises(ValueError, match="stock.csv"):
    build(sample(random.Random(0)))
