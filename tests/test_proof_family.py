"""The proof task family (mage_jax/tasks/proof_family.py, issue 12): the split is fixed by
value and leak-free (train packages, the teacher's SFT episodes, the suite RL samples), the held-out
set is big and visual enough, instances are deterministic, a sample passes every gate, held-out
values are made of tokens the train data uses, and the policy side never sees the answer.
Issue 36: the value pools (proof_pools.py, config.family) are large, disjoint and fixed, their
values a few tokens each, and a bad pool config is refused naming its field.

The leak and blindness scans read the packages and files as data (regexes, JSON), never the
module's own split lists, so a template that leaks fails them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from mage_jax.runs import proof_teacher
from mage_jax.tasks import proof_family as pf
from mage_jax.tasks.package import load_suite

BUTTON_W, BUTTON_H = 120, 30  # tkapps App.button: width 120, height ROW_H - 6
WORD_RE = re.compile(r"[A-Za-z0-9_.]+")
SHELL = {"echo", "wc", "-l", "<", ">"}  # syntax of the reference commands, not answer values


# ---- what the held-out split is, read off the held-out packages --------------------------------
def _app_configs(pkg_dict) -> list[dict]:
  return [s["config"] for s in pkg_dict.get("setup", []) if s["type"] == "app"]


def _values(split: str, seed: int = 0):
  """Words/file names (from instructions) and target (colour, place) pairs of a split's instances."""
  words, pairs = set(), set()
  for p in pf.instances(split, seed):
    m = re.fullmatch(r"Create a file named (\S+) holding the word (\S+)( and click the (\w+) button)?", p.instruction)
    m2 = re.fullmatch(r"Write the number of lines in (\S+) to (\S+)", p.instruction)
    m3 = re.fullmatch(r"Click the (\w+) button", p.instruction)
    assert m or m2 or m3, p.instruction
    if m:
      words |= {m.group(1), m.group(2)}
    if m2:
      words |= {m2.group(1), m2.group(2)}
    colour = (m and m.group(4)) or (m3 and m3.group(1))
    if colour:
      (cfg,) = _app_configs(p.to_dict())
      pairs.add((colour, tuple(cfg["places"][colour])))
  return words, pairs


HELD_WORDS, HELD_PAIRS = (set().union(*x) for x in zip(*(_values("heldout", s) for s in range(3))))


def _leaks_in_text(text: str) -> set[str]:
  return set(WORD_RE.findall(text)) & HELD_WORDS


def _leaks_in_package(d: dict) -> list[str]:
  out = [f"{d['id']}: held-out value {w!r}" for w in _leaks_in_text(json.dumps(d))]
  for cfg in _app_configs(d):
    for colour, place in cfg.get("places", {}).items():
      if (colour, tuple(place)) in HELD_PAIRS:
        out.append(f"{d['id']}: held-out colour/place pair {colour} at {place} on the screen")
  return out


def _clicked_pair(instruction: str, coord, screen=pf.SCREEN):
  """The held-out pair a click at `coord` ([0, 999]) hits for the colour the instruction names."""
  m = re.search(r"click the (\w+) button", instruction, re.IGNORECASE)
  x, y = coord[0] * screen[0] / 1000, coord[1] * screen[1] / 1000
  for colour, (px, py) in HELD_PAIRS:
    if m and m.group(1) == colour and px <= x <= px + BUTTON_W and py <= y <= py + BUTTON_H:
      return colour, (px, py)
  return None


def test_heldout_values_found():
  # the scans below are only as good as this: both kinds of held-out value are present
  assert len(HELD_WORDS) >= 20 and len(HELD_PAIRS) >= 10, (len(HELD_WORDS), len(HELD_PAIRS))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_train_packages_hold_no_heldout_value(seed):
  leaks = [x for p in pf.instances("train", seed) for x in _leaks_in_package(p.to_dict())]
  assert not leaks, leaks[:10]


def test_scanner_catches_a_planted_leak():
  p = pf.instances("train", per_template=1)[0].to_dict()
  word = sorted(HELD_WORDS)[0]
  p["instruction"] += f" {word}"
  assert _leaks_in_package(p)
  gui = next(p for p in pf.instances("train", per_template=1) if p.kind == "gui").to_dict()
  colour, place = sorted(HELD_PAIRS)[0]
  (cfg,) = _app_configs(gui)
  cfg["places"][colour] = list(place)
  assert _leaks_in_package(gui)
  assert _clicked_pair(f"Click the {colour} button", [round((place[0] + 60) / 0.64), round((place[1] + 15) / 0.4)])


def test_rl_suite_holds_no_heldout_value(tmp_path):
  from mage_jax.rl.loop import load_rl_tasks
  pf.write_suite("train", str(tmp_path / "train"), seed=3, per_template=40)
  tasks = load_rl_tasks(str(tmp_path / "train"), "", "")  # what launch.rl samples from
  assert len(tasks) == 4 * 40
  assert all("_train_" in t.id for t in tasks)
  leaks = [x for t in tasks for x in _leaks_in_package(t.to_dict())]
  assert not leaks, leaks[:10]
  # write_suite replaces a suite: fewer instances leave no stale package behind
  pf.write_suite("train", str(tmp_path / "train"), seed=3, per_template=2)
  assert len(load_suite(str(tmp_path / "train"))) == 8


def test_rl_suite_draws_train_values_no_train_instance_uses():
  """The proof's RL suite (runs/proof_steps.rl_suite): train-split instances on the train values the
  train suite (hence every SFT teacher episode) does not hold, none held out, drawn reproducibly."""
  per = 300   # configs/proof.py's train_per_template and rl_per_template
  train = pf.instances("train", 0, per_template=per)
  used = pf.used_values(train)
  rl = pf.instances("train", 0, per_template=per, exclude=used, label="rl")
  assert len(rl) == 4 * per and all("_rl_" in t.id for t in rl)
  pf.check_suite(rl, "train")   # train values, train (colour, slot) pairs on every screen
  fresh = pf.used_values(rl)
  for kind in ("words", "file_names"):
    assert fresh[kind] and not set(fresh[kind]) & set(used[kind]), kind
  leaks = [x for t in rl for x in _leaks_in_package(t.to_dict())]
  assert not leaks, leaks[:10]
  again = pf.instances("train", 0, per_template=per, exclude=used, label="rl")
  assert [t.instruction for t in again] == [t.instruction for t in rl]
  # too few values left for count_lines' two file names: a clear error, not a hang
  names = pf.value_pools()["file_names"]["train"]
  with pytest.raises(ValueError, match="1 file names left.*config.family.pools"):
    pf.instances("train", 0, per_template=2, exclude={"file_names": names[1:]}, label="rl")
  with pytest.raises(ValueError, match="unknown value kind 'colours'"):
    pf.instances("train", 0, per_template=2, exclude={"colours": ["red"]}, label="rl")


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
  from mage_jax.machine.sandbox import SandboxUnavailable, check_available
  try:
    check_available()
  except SandboxUnavailable as e:
    pytest.skip(f"no sandbox: {e}")
  out = str(tmp_path_factory.mktemp("teacher"))
  return out, proof_teacher.collect_teacher_data(out, seed=0, per_template=2, workers=2)


def test_teacher_episodes_real_harness_and_leak_free(teacher):
  out, path = teacher
  with open(path) as f:
    text = f.read()
  episodes = [json.loads(line) for line in text.splitlines()]
  assert len(episodes) == 8, json.load(open(os.path.join(out, "teacher.json")))
  assert not _leaks_in_text(text), _leaks_in_text(text)
  for ep in episodes:
    assert ep["reward"] == 1.0 and ep["meta"]["task_id"].startswith("proof_")
    for step in ep["steps"]:
      assert step["think"] and step["action"]  # templated <think> and Action: text per step
      args = step["tool_call"]["arguments"]
      if args.get("action") == "left_click":
        assert _clicked_pair(ep["instruction"], args["coordinate"]) is None, (ep["id"], args)
    if ep["meta"]["kind"] != "terminal":  # the real desktop: screenshots on disk
      assert os.path.isfile(os.path.join(out, ep["steps"][0]["observation"]["screenshot"]))


def test_teacher_episodes_pack_through_launch_pack(teacher):
  """The data path SFT reads: render (prompt, loss mask) and pack, as launch.pack does."""
  from configs import data_tiny
  from mage_jax.data import pack_job
  out, _ = teacher
  c = data_tiny.get_config(out)
  m = pack_job.pack(c.data, os.path.join(out, "packed"), workers=1)
  assert m["episodes"] == 8 and m["skipped_total"] == 0, m["skipped"]
  assert m["samples"] >= 18  # one sample per step: 2 + 2 + 2 + 3 steps, two of each template
  assert pack_job.describe_skipped(m) == ""
  # rows too short for a sample: the console phrase names why (issue 12 papercut)
  c.data.seq_len = 512
  m = pack_job.pack(c.data, os.path.join(out, "packed_short"), workers=1)
  n = m["skipped"]["pack"]["longer than seq_len"]
  assert n > 0 and pack_job.describe_skipped(m).startswith(f"{n} skipped: {n} over the 512-token row"), m["skipped"]


def test_heldout_size_share_and_counts():
  held = pf.instances("heldout")
  assert len(held) >= 200
  assert len({json.dumps({k: v for k, v in p.to_dict().items() if k != "id"}, sort_keys=True) for p in held}) == len(held)
  visual = sum(p.kind in ("gui", "hybrid") for p in held)
  assert visual / len(held) >= 0.4
  counts = pf.split_counts()
  assert sum(c["heldout"] for c in counts.values()) == len(held)
  assert {t: c["kind"] for t, c in counts.items()} == pf.TEMPLATES
  assert sum(k == "terminal" for k in pf.TEMPLATES.values()) >= 2
  assert {"gui", "hybrid"} <= set(pf.TEMPLATES.values())


def test_deterministic_by_seed_split_fixed():
  a = [p.to_dict() for p in pf.instances("train", seed=5, per_template=20)]
  assert a == [p.to_dict() for p in pf.instances("train", seed=5, per_template=20)]
  assert a != [p.to_dict() for p in pf.instances("train", seed=6, per_template=20)]
  # whatever the seeds, a value is held out or trained on, never both
  for s in (7, 8):
    train_words, train_pairs = _values("train", s)
    held_words, held_pairs = _values("heldout", s)
    assert not train_words & held_words and not train_pairs & held_pairs


@pytest.fixture(scope="module")
def tok():
  from mage_jax.data.tokenizer import load_tokenizer
  return load_tokenizer("")


def _token_set(tok, texts) -> set[str]:
  ids = {i for row in tok.encode_batch(sorted(set(texts))) for i in row}
  return {tok.decode([i]) for i in ids}


def test_value_tokens_short_and_heldout_covered_by_train(tok):
  """Every default value is a few tokens (after a space, as in every text), and every token a
  held-out value uses is used by a train value: a model that learns to emit the train values can
  emit the held-out ones (the real Qwen3 tokenizer, not the module's report)."""
  pools = pf.value_pools()
  for kind, most in (("words", 2), ("file_names", 3)):
    for split in pf.SPLITS:
      lengths = {v: len(tok.encode(" " + v)) for v in pools[kind][split]}
      assert max(lengths.values()) <= most, sorted(lengths.items(), key=lambda kv: -kv[1])[:5]
    train = _token_set(tok, (" " + v for v in pools[kind]["train"]))
    missing = _token_set(tok, (" " + v for v in pools[kind]["heldout"])) - train
    assert not missing, (kind, missing)
  report = pf.token_report(tok)
  assert report["words"]["train"]["tokens_per_value"] == {2: len(pools["words"]["train"])}
  assert report["words"]["heldout_tokens_not_in_train"] == []


def test_heldout_tokens_occur_in_train_text(tok):
  """A model trained from scratch only emits tokens it was trained on: every token of a held-out
  instruction and reference occurs in the train split's texts (all_texts), and all_texts covers
  the tokens of real instances of both splits (so the vocabulary computed from it is whole)."""
  def texts(tasks):
    for p in tasks:
      yield p.instruction
      yield from (s["content"] for s in p.to_dict()["setup"] if s["type"] == "text")
      for call in p.reference:
        yield from (call["think"], call["action"], json.dumps(call["arguments"]))
  train = _token_set(tok, pf.all_texts(splits=("train",)))
  held = pf.instances("heldout")
  missing = _token_set(tok, texts(held)) - train
  assert not missing, missing
  every = train | _token_set(tok, pf.all_texts(splits=("heldout",)))
  assert not _token_set(tok, texts(held + pf.instances("train", per_template=30))) - every


# ---- the pools: sizes, split, and config errors --------------------------------------------------
def test_default_pools_large_disjoint_and_fixed():
  pools = pf.value_pools()
  for kind in ("words", "file_names"):
    train, held = pools[kind]["train"], pools[kind]["heldout"]
    assert len(train) >= 500 and len(held) >= 100, (kind, len(train), len(held))
    assert not set(train) & set(held) and len(set(train)) == len(train)
  pairs = pools["colour_slots"]
  assert sorted(pairs["train"] + pairs["heldout"]) == sorted((c, s) for c in pf.COLOURS for s in range(12))
  assert not set(pairs["train"]) & set(pairs["heldout"])
  for c in pf.COLOURS:   # every colour has train and held-out layouts
    assert {s for cc, s in pairs["train"] if cc == c} and {s for cc, s in pairs["heldout"] if cc == c}
  # the default split is a fixed one: configs/proof.py's pools give it, whatever the run's seed
  from configs import proof
  from mage_jax.runs.curriculum import stage_config
  top = proof.get_config("smoke")
  top.seed = 7
  for name in ("data", "eval_sft"):
    stage = stage_config(top, top.stages[name], "", "/tmp/x/synth")
    assert pf.value_pools(stage.family) == pools, name
  digest = hashlib.sha256(json.dumps(pools, sort_keys=True).encode()).hexdigest()[:16]
  assert digest == "7f58ebcd690def45", digest   # a change here moves values across the split: say so in docs (session 28: digit 0 added, rl_only)


def test_rl_only_values_stay_out_of_the_train_suite():
  """config.family.rl_fraction: that share of the train words and file names is kept for the RL
  suite. No train-suite instance (so no SFT teacher episode) holds one; the RL suite's draw does."""
  pools = pf.value_pools()
  for kind in ("words", "file_names"):
    train, rl_only = pools[kind]["train"], pools[kind]["rl_only"]
    assert set(rl_only) <= set(train) and len(rl_only) == round(0.2 * len(train)), (kind, len(rl_only))
  train_suite = pf.instances("train", 0, per_template=300)
  used = pf.used_values(train_suite)
  for kind in ("words", "file_names"):
    assert not set(used[kind]) & set(pools[kind]["rl_only"]), kind
  rl = pf.instances("train", 0, per_template=300, exclude=used, label=pf.RL_LABEL)
  rl_names = set(pf.used_values(rl)["file_names"])
  # the RL suite's names: mostly reserved ones (the rest are train names the train suite's draws missed)
  assert len(rl_names & set(pools["file_names"]["rl_only"])) >= 100, len(rl_names)
  assert len(rl_names) >= 150, len(rl_names)    # before rl_fraction: 63 distinct names
  # rl_fraction 0: nothing reserved, every train value drawable by the train suite
  none = pf.value_pools(_family(rl_fraction=0.0))
  assert none["file_names"]["rl_only"] == [] and none["file_names"]["train"] == pools["file_names"]["train"]
  assert set(pf.used_values(pf.instances("train", 0, 300, family=_family(rl_fraction=0.0)))["file_names"]) \
      & set(pools["file_names"]["rl_only"])


def test_heldout_pool_absent_from_train_packages():
  """Every held-out value of the pools (not only those drawn), scanned for in train packages."""
  held = set(pf.value_pools()["words"]["heldout"]) | set(pf.value_pools()["file_names"]["heldout"])
  from configs import proof
  per = proof.get_config("data").family.train_per_template   # what the proof draws
  assert per >= 100, per
  for seed in (0, 1):
    for p in pf.instances("train", seed, per_template=per):
      found = set(WORD_RE.findall(json.dumps(p.to_dict()))) & held
      assert not found, (p.id, found)


def _family(**pools):
  from configs import proof
  f = proof.get_config("data").family
  for k, v in pools.items():
    if k in f.pools:
      f.pools[k] = v
    else:
      f[k] = v
  return f


SMALL = {"min_train_values": 4, "min_heldout_values": 2}


@pytest.mark.parametrize("fields, message", [
    ({"words": "product:sun,moon|bird,fish"},
     "config.family.pools.words: 2 train values for SFT (train less rl_only) (pool of 4"),
    ({"rl_fraction": 1.0}, "config.family.rl_fraction=1.0"),
    ({"rl_fraction": -0.1}, "config.family.rl_fraction=-0.1"),
    ({"rl_fraction": 0.6}, "config.family.pools.words: 432 train values for SFT"),
    ({"heldout_fraction": 1.5}, "config.family.heldout_fraction=1.5"),
    ({"words": "a1,b1,c1,d1,e1,f1", "words_heldout": "b1,x1", **SMALL},
     "config.family.pools.words and config.family.pools.words_heldout overlap"),
    ({"words": "a1,b1,c1,d1,e1", "words_heldout": "g1,h1;rm", **SMALL}, "config.family.pools.words_heldout: value 'h1;rm'"),
    ({"file_names": "a.txt,b c.txt,d.txt,e.txt,f.txt", **SMALL}, "config.family.pools.file_names: value 'b c.txt'"),
    ({"file_names": "a.txt,$(x).txt", **SMALL}, "config.family.pools.file_names: value '$(x).txt'"),
    ({"words": "a1,b1,c1,d1,e1", "words_heldout": "a1x,button", **SMALL},
     "config.family.pools.words: held-out value 'button' occurs in train tasks"),
    ({"file_names": "memo1.txt,memo2.txt,list3.txt,list4.txt,log5.txt", "file_names_heldout": "x1.txt,y2.txt",
      "words": "a1,b1,c1,d1,memo", "words_heldout": "z1,z2", **SMALL}, None),   # train memo: fine
    ({"file_names": "memo1.txt,memo2.txt,list3.txt,list4.txt,log5.txt", "file_names_heldout": "x1.txt,y2.txt",
      "words": "a1,b1,c1,d1,e1", "words_heldout": "memo,z1", **SMALL},
     "config.family.pools.words: held-out value 'memo' occurs in train tasks"),
    ({"file_names": "memo1.txt,memo2.txt,list3.txt,list4.txt,log5.txt", "file_names_heldout": "d1.txt,y2.txt",
      "words": "a1,b1,c1,d1,e1", "words_heldout": "z1,z2", **SMALL},
     "config.family.pools.file_names: held-out value 'd1.txt' (its stem 'd1') occurs in train tasks"),
    ({"colours": "red,blue"}, "config.family.pools.colours='red,blue'"),
    ({"colour_slots_heldout": "red:0,pink:3"}, "config.family.pools.colour_slots_heldout: 'pink:3'"),
    ({"words": "a1,a1,b1,c1,d1,e1", **SMALL}, "config.family.pools.words: 'a1' twice"),
])
def test_bad_pools_name_the_field(fields, message):
  if message is None:   # a control: the same shape of config, nothing wrong with it
    pf.value_pools(_family(**fields))
    return
  with pytest.raises(pf.PoolError) as e:
    pf.value_pools(_family(**fields))
  assert message in str(e.value), str(e.value)


def test_pool_file_and_custom_suite(tmp_path):
  """Values of one's own (file: pools, an explicit held-out list) reach the written suites, and a
  suite written with other pools is refused by check_suite (as the evaluation stage does)."""
  words = [f"w{i}x" for i in range(40)]
  (tmp_path / "words.txt").write_text("# my words\n" + "\n".join(words[:30]) + "\n\n")
  f = _family(words=f"file:{tmp_path / 'words.txt'}", words_heldout=",".join(words[30:]),
              min_train_values=20, min_heldout_values=5)
  pools = pf.value_pools(f)
  assert pools["words"]["train"] == words[:30] and pools["words"]["heldout"] == words[30:]
  assert len(pools["words"]["rl_only"]) == 6 and set(pools["words"]["rl_only"]) <= set(words[:30])
  pf.write_suite("heldout", str(tmp_path / "held"), per_template=10, family=f)
  held = load_suite(str(tmp_path / "held"))
  used = {w for t in held for w in pf.instance_values(t)["words"]}
  assert used and used <= set(words[30:])
  pf.check_suite(held, "heldout", f)
  with pytest.raises(ValueError, match="not among the heldout values of config.family.pools.words"):
    pf.check_suite(held, "heldout")   # the default pools: these words are not theirs
  (tmp_path / "words.txt").write_text("w1x\nw 2\n")
  with pytest.raises(pf.PoolError, match=r"value 'w 2' \(.*words.txt:2\)"):
    pf.value_pools(f)


def test_curriculum_refuses_bad_pools_before_any_stage():
  from configs import proof
  from mage_jax.train import run_setup
  from mage_jax.runs.curriculum import check_stages
  top = proof.get_config("smoke")
  top.family.pools.words = "product:sun,moon|bird,fish"
  with pytest.raises(run_setup.ConfigError, match=r"stage data: config.family.pools.words: 2 train values for SFT"):
    check_stages(top, "/tmp/x/synth")


def test_the_full_proof_config_passes_its_checks_on_a_fresh_workdir(tmp_path):
  """`make proof` on a fresh workdir: the RL stage's compact vocabulary (and SFT's init) are files the
  base stage writes later, so the before-any-stage check must not ask for them (it once failed with
  "config.model.compact_vocab=...: no such file"); RL's own build still does, naming the field."""
  from configs import proof
  from mage_jax.rl import loop as rl_loop
  from mage_jax.runs import curriculum
  from mage_jax.train import run_setup
  top = proof.get_config(None)
  top.shared_dir = str(tmp_path / "shared")
  synth = str(tmp_path / "w" / "synth")
  curriculum.check_stages(top, synth)
  rl_cfg = curriculum.stage_config(top, top.stages.rl, "", synth)
  assert rl_cfg.model.compact_vocab == str(tmp_path / "w" / "base" / "vocab.json")
  with pytest.raises(run_setup.ConfigError, match=r"config.model.compact_vocab=.*no such file"):
    rl_loop.build(rl_cfg, str(tmp_path / "w" / "rl"))


def test_gates_on_a_sample():
  from mage_jax.agent.env import EnvConfig, LocalEnv
  from mage_jax.machine.sandbox import SandboxUnavailable, check_available
  from mage_jax.forge.package_gates import check_package
  try:
    check_available()
  except SandboxUnavailable as e:
    pytest.skip(f"no sandbox: {e}")
  cfg = EnvConfig(width=pf.SCREEN[0], height=pf.SCREEN[1])
  held = pf.instances("heldout")
  sample = [[p for p in held if p.id.startswith(f"proof_{t}_")][17 * i] for i, t in enumerate(pf.TEMPLATES)]
  for p in sample:
    g = check_package(p, lambda: LocalEnv(cfg))
    assert g.passed, str(g)
    assert g.scores["reference"] == 1.0 and g.scores["near_miss"] < 1.0
    ran = [e for e in g.exploits if e.skipped is None]
    assert ran and all(e.score == 0 for e in ran), g.exploits  # the blind exploits did run


# ---- the policy side is blind to the answer -----------------------------------------------------
def _answer_values(d: dict) -> set[str]:
  """The checker's expected values and the reference's distinctive values, less what the instruction
  states (and shell syntax)."""
  vals: set[str] = set()

  def leaves(x):
    if isinstance(x, dict):
      for k, v in x.items():
        if k not in ("type", "path"):
          leaves(v)
    elif isinstance(x, list):
      for v in x:
        leaves(v)
    else:
      vals.update(WORD_RE.findall(str(x)))
  leaves(d["checker"])
  for call in _reference(d):
    a = call["arguments"]
    vals.update(a.get("command", "").split())
    vals.update(WORD_RE.findall(a.get("text", "")))
  return vals - set(WORD_RE.findall(d["instruction"])) - SHELL


def _reference(d: dict) -> list[dict]:
  """The primary reference's calls, in either spelling of the package format."""
  return d["reference"] if "reference" in d else d["references"][0]["calls"]


def _leaked(values: set[str], text: str) -> set[str]:
  return {v for v in values if re.search(rf"(?<![A-Za-z0-9_.]){re.escape(v)}(?![A-Za-z0-9_])", text)}


def _prompt_parts(d: dict) -> tuple[str, str]:
  """The rendered step-1 prompt (the real renderer) split into its system turn and the rest."""
  from mage_jax.agent.episode import EpisodeConfig, renderer_for
  from mage_jax.data import trajectory as tr
  r = renderer_for(EpisodeConfig())
  ep = tr.Episode(id="x", instruction=d["instruction"], steps=[tr.Step(tr.Observation(None, None), "", "", None)])
  ids, _ = r.render_prompt(ep, 1)
  text = r.tok.decode(ids)
  cut = text.index("<|im_start|>user")
  return text[:cut], text[cut:]


def _setup_text(d: dict) -> str:
  """What setup puts where the policy can read it: home files and the apps' configs (the screen's
  source data, also readable at /tmp/.mage_apps)."""
  parts = []
  for s in d["setup"]:
    if s["type"] == "app":
      parts.append(json.dumps(s["config"]))
    else:
      parts.append(json.dumps({k: v for k, v in s.items() if k != "type"}))
  return "\n".join(parts)


def _blind_violations(d: dict) -> list[str]:
  values = _answer_values(d)
  out = [f"{d['id']}: {v!r} in setup" for v in _leaked(values, _setup_text(d))]
  system, rest = _prompt_parts(d)
  out += [f"{d['id']}: {v!r} in the prompt" for v in _leaked(values, rest)]
  for cfg in _app_configs(d):  # the screen shows every option alike: nothing marks the target
    text = json.dumps(cfg)
    counts = {b: len(re.findall(rf"\b{re.escape(b)}\b", text)) for b in cfg["buttons"]}
    if len(counts) < 3 or len(set(counts.values())) != 1:
      out.append(f"{d['id']}: the app config singles a button out: {counts}")
  return out


def test_policy_side_is_blind_to_the_answer():
  sample = pf.instances("heldout", per_template=15) + pf.instances("train", per_template=15)
  systems = {_prompt_parts(p.to_dict())[0] for p in sample[:4]}
  assert len(systems) == 1  # one system turn for all: it can't carry an instance's answer
  assert any(_answer_values(p.to_dict()) for p in sample)  # the scan is not vacuous (line counts)
  bad = [v for p in sample for v in _blind_violations(p.to_dict())]
  assert not bad, bad[:10]


def test_blind_scan_catches_planted_answers():
  d = next(p for p in pf.instances("train", per_template=3) if p.id.startswith("proof_count_lines")).to_dict()
  n = d["checker"]["equals"]
  leaky = json.loads(json.dumps(d))
  leaky["setup"][0]["content"] += f"total {n}\n"
  assert any("in setup" in v for v in _blind_violations(leaky))
  leaky = json.loads(json.dumps(d))
  leaky["instruction"] = leaky["instruction"].replace("Write", "Write (it is " + n + ")")
  assert _answer_values(leaky) != _answer_values(d)  # stated in the instruction: no longer an answer
  g = next(p for p in pf.instances("train", per_template=3) if p.kind == "gui").to_dict()
  (cfg,) = _app_configs(g)
  cfg["prompt"] = "Pick " + g["checker"]["expected"]["clicked"]
  assert any("singles a button out" in v for v in _blind_violations(g))


def test_sandbox_home_holds_no_answer():
  """The real setup in a sandbox: every file under home (and the app configs) read back."""
  from mage_jax.agent.env import EnvConfig, LocalEnv
  from mage_jax.machine.sandbox import SandboxUnavailable, check_available
  try:
    check_available()
  except SandboxUnavailable as e:
    pytest.skip(f"no sandbox: {e}")
  env = LocalEnv(EnvConfig(width=pf.SCREEN[0], height=pf.SCREEN[1]))
  try:
    for p in [q for q in pf.instances("heldout", per_template=2) if q.id.startswith("proof_count_lines")]:
      env.reset(p)
      # dotfiles are the harness's, the same for every task; the rest is what setup made
      obs = env.step("bash", {"command": "for f in $(find ~ -type f -not -path '*/.*'); do echo \"== $f\"; cat \"$f\"; done"})
      assert "== /home/user/" in obs.text, obs.text
      leaked = _leaked(_answer_values(p.to_dict()), obs.text)
      assert not leaked, (p.id, leaked, obs.text)
  finally:
    env.close()
