"""Seed-varying phrasing (forge/phrasing.py, the workflow's phrase node): across 20 seeds at least
80% of the library's skills produce more than one instruction text, every frame passes the
consistency gate for every skill, and de-duplication still sees two frames of a task as one."""
from __future__ import annotations

import random

from mage_jax.forge import consistency, gates, nodes, phrasing
from mage_jax.forge.skills import load_all

SEEDS = range(20)


def _texts(skill, phrase: bool) -> set[str]:
  out = set()
  for seed in SEEDS:
    fields = skill.build(nodes.SampleNode("params", "sample", {}, "params").run(nodes.Context(skill, seed)))
    if phrase:
      fields = nodes.PhraseNode("phrase", "phrase", {"fields": "fields"}, "fields").run(
          nodes.Context(skill, seed), fields)
    out.add(fields["instruction"])
  return out


def test_most_skills_vary_their_instruction_across_seeds_and_every_frame_passes_the_gate():
  reg = load_all()
  before = sum(len(_texts(s, False)) > 1 for s in reg.values())
  after = sum(len(_texts(s, True)) > 1 for s in reg.values())
  print(f"skills whose instruction varies over {len(SEEDS)} seeds: {before} -> {after} of {len(reg)}")
  assert after >= 0.8 * len(reg) and after > before
  fell_back = []
  for sid, s in sorted(reg.items()):
    fields = s.build(s.sample(random.Random(5)))
    for f in phrasing.FRAMES:
      framed = f + fields["instruction"]
      if consistency.problems(fields["instruction"], framed, fields["checker"]):
        fell_back.append((sid, f))
      assert phrasing.unframe(framed) == fields["instruction"]
  assert fell_back == []


def test_two_frames_of_one_task_are_one_task():
  d = gates.Deduper()
  checker = {"type": "file_text", "path": "a.txt", "equals": "X"}
  assert d.check("s.k.a", {"v": 1}, "Task: Write X to a.txt.", checker, "p1") is None
  assert d.check("s.k.b", {"v": 2}, "Instructions: Write X to a.txt.", checker, "p2") == ("dedup_instruction", "p1")
