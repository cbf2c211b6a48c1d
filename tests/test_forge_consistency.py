"""The instruction-checker consistency gate (forge/consistency.py): planted meaning flips of every
skill's instruction are rejected, faithful rewordings pass, and through the reword node over HTTP
(a fake endpoint) a flipping rewriter never reaches the suite, is counted in the round report,
and the optional LLM judge can veto a rewording the programmatic check lets through."""
from __future__ import annotations

import json
import random
import re

from mage_jax.forge import consistency, engine, replay
from mage_jax.forge.engine import import_skill_modules
from mage_jax.forge.skill import REGISTRY

# The planted flips, written independently of the gate's word table: each turns an instruction
# into one that asks for something else while reading naturally.
SWAPS = [("lowest", "highest"), ("highest", "lowest"), ("ascending", "descending"), ("descending", "ascending"),
         ("smallest", "largest"), ("largest", "smallest"), ("above", "below"), ("below", "above"),
         ("greater than", "less than"), ("at least", "at most"), ("first", "last"), ("last", "first"),
         ("clockwise", "counterclockwise"), ("left", "right"), ("right", "left"), ("even", "odd"),
         ("most", "fewest"), ("oldest", "newest"), ("top", "bottom"), ("uppercase", "lowercase"),
         ("without", "with"), ("not ", ""), ("inclusive", "exclusive"), ("reverse", "same")]


def planted_flips(text: str) -> list[tuple[str, str]]:
  out = []
  for a, b in SWAPS:
    pat = re.compile(r"\b" + re.escape(a) + (r"\b" if a[-1].isalnum() else ""), re.I)
    if pat.search(text):
      out.append((f"{a}->{b}", pat.sub(b, text, count=1)))
  m = re.search(r"(?<![\w.])(\d+)(?![\w.])", text)
  if m:  # a number changed
    out.append(("number+1", text[:m.start()] + str(int(m.group(1)) + 1) + text[m.end():]))
  m = re.search(r"\b(\w+)\.(csv|xlsx|docx|pptx|pdf|png|db|txt|json)\b", text)
  if m:  # another file
    out.append(("file", text[:m.start()] + m.group(1) + "_old." + m.group(2) + text[m.end():]))
  return [(k, t) for k, t in out if t != text]


def _instructions(seeds=(0, 1)):
  import_skill_modules(["mage_jax.forge.skills"])
  out = []
  for sid in sorted(s for s in REGISTRY if not s.startswith("test.")):
    skill = REGISTRY[sid]
    for seed in seeds:
      fields = skill.build(skill.sample(random.Random(f"{sid}:{seed}")))
      out.append((sid, fields["instruction"], fields["checker"]))
  return out


def test_every_planted_flip_is_rejected_and_faithful_rewordings_pass():
  planted, accepted, kinds = 0, [], set()
  faithful_rejected = []
  for sid, text, checker in _instructions():
    for kind, flipped in planted_flips(text):
      planted += 1
      kinds.add(kind)
      if not consistency.problems(text, flipped, checker):
        accepted.append((sid, kind, flipped))
    # (a suffix is not always faithful: "...that reads: Signed, Nora." + ", please" changes the text
    # the checker wants, and the gate rejects it as lost_checker_value)
    for faithful in ("Please do this: " + text, "Task for you. " + text):
      if consistency.problems(text, faithful, checker):
        faithful_rejected.append((sid, faithful))
  assert planted >= 400 and len(kinds) >= 15, (planted, kinds)
  assert accepted == [], accepted[:5]             # goal: 0 planted flips accepted
  assert faithful_rejected == [], faithful_rejected[:3]


def test_synonyms_of_one_polarity_pass_and_each_reason_is_named():
  o = "In book.xlsx sort the data rows by price, lowest first (header stays in row 1)."
  checker = {"type": "xlsx_sorted", "path": "book.xlsx", "column": "price"}
  assert consistency.problems(o, "Sort book.xlsx's data rows by price in ascending order; the header "
                                 "stays in row 1.", checker) == []
  got = consistency.problems(o, "Sort the rows of book.xlsx by cost, highest first (header in row 1).", checker)
  assert {consistency.reason_of(p) for p in got} == {"flipped:order", "lost_checker_value"}
  got = consistency.problems("Delete every order with qty below 4 from shop.db.",
                             "Delete every order with qty of at most 4 from shop.db.", None)
  assert [consistency.reason_of(p) for p in got] == ["flipped:compare"]
  got = consistency.problems("Print the 3 largest prices.", "Print the 3 largest prices, top 5 first.", None)
  assert "added_number" in {consistency.reason_of(p) for p in got}


SKILLS = ["xlsx.edit.sort_rows", "csv.transform.sort_by_number"]


def _config(tmp_path, url, **llm):
  import_skill_modules(["mage_jax.forge.skills"])
  from configs.forge import get_config
  c = get_config("tiny").to_dict()
  c.update(workdir=str(tmp_path), taxonomy="", skills=SKILLS, skills_per_domain=0, attempts_per_skill=2,
           rounds=1, gate=False, student={"enabled": False}, workers=1)
  c["llm"].update(params=False, reword=True, base_url=url, max_retries=1, timeout_s=60.0, **llm)
  return c


def _reword_target(messages) -> str | None:
  m = re.search(r"\nInstruction: (.*)\nReply with JSON", messages[1]["content"], re.S)
  return m.group(1) if m else None


def test_flipping_rewriter_over_http_never_reaches_the_suite_and_is_counted(tmp_path):
  originals = set()

  def flipper(messages):
    original = _reword_target(messages)
    originals.add(original)
    swap = {"highest": "lowest", "lowest": "highest"}
    return json.dumps({"instruction": re.sub(r"\b(highest|lowest)\b", lambda m: swap[m.group(1)], original)})
  with replay.ReplayServer(str(tmp_path / "t.jsonl"), responder=flipper) as srv:
    m = engine.run_forge(_config(tmp_path / "w", srv.url))
  c = m["consistency"]
  # 2 skills x 2 attempts, each reply (1 + 1 retry) rejected as an ordering flip; originals kept
  assert c["replies_checked"] == 8 and c["replies_rejected"] == 8 and c["kept_original"] == 4, c
  assert c["rejected:flipped:order"] == 8 and c.get("reworded", 0) == 0
  from mage_jax.tasks.package import load_suite
  suite = load_suite(m["suite"])
  assert len(suite) == 4 and {p.instruction for p in suite} == originals  # what the checker was built for


def test_llm_judge_vetoes_a_rewording_the_rules_let_through(tmp_path):
  def responder(messages):
    target = _reword_target(messages)
    if target is not None:  # every checked word kept; the judge decides (a retry says "again")
      return json.dumps({"instruction": ("Note again: " if len(messages) > 2 else "Note: ") + target})
    prompt = messages[1]["content"]
    assert "Original: " in prompt and "Reworded: Note" in prompt and "checker" in prompt
    return json.dumps({"same": "Reworded: Note again: " in prompt, "why": "the judge's reading"})
  with replay.ReplayServer(str(tmp_path / "t.jsonl"), responder=responder) as srv:
    m = engine.run_forge(_config(tmp_path / "w", srv.url, judge=True))
  c = m["consistency"]
  # per candidate: reply 1 vetoed by the judge, reply 2 (the retry) approved
  assert c["rejected:judge_disagrees"] == 4 and c["reworded"] == 4 and c["replies_checked"] == 8, c
  assert m["rounds"][0]["llm_by_node"]["reword_judge"]["calls"] == 8
  from mage_jax.tasks.package import load_suite
  assert all(p.instruction.startswith("Note again: ") for p in load_suite(m["suite"]))
