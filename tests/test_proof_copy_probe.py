"""scripts/proof_copy_probe.py: the held-out swap and the value-token positions it scores."""
import importlib.util
import os
import random

from mage_jax.agent.tasks import proof_family as pf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _probe():
  spec = importlib.util.spec_from_file_location("proof_copy_probe", os.path.join(ROOT, "scripts", "proof_copy_probe.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _episode(word: str, name: str) -> dict:
  return {"instruction": f"Create a file named {name} holding the word {word}",
          "steps": [{"think": f"The file {name} must hold the word {word} , so I echo it into the file.",
                     "action": f"Write {word} to {name}",
                     "tool_call": {"name": "bash", "arguments": {"command": f"echo {word} > {name}"}}}],
          "meta": {"kind": "terminal"}}


def test_swap_replaces_every_mention_with_heldout_values():
  probe = _probe()
  train_word, train_name = pf.words("train")[7], pf.file_names("train")[7]
  swapped, values = probe.swap_to_heldout(_episode(train_word, train_name), random.Random(0))
  word, name = sorted(values, key=lambda v: v.endswith(".txt"))
  assert word in pf.words("heldout") and name in pf.file_names("heldout")
  assert swapped == _episode(word, name)   # instruction, think, Action line and command alike
  assert probe.swap_to_heldout({"instruction": "Click the red button"}, random.Random(0)) is None
  # the run's own pools (the data stage's pools.json)
  pools = {"words": {"train": ["aaa1"], "heldout": ["zzz1"]}, "file_names": {"train": ["a1.txt"], "heldout": ["z9.txt"]}}
  swapped, values = probe.swap_to_heldout(_episode("aaa1", "a1.txt"), random.Random(0), pools)
  assert sorted(values) == ["z9.txt", "zzz1"] and swapped == _episode("zzz1", "z9.txt")


def test_value_positions_are_the_value_tokens_only():
  from mage_jax.data.tokenizer import load_tokenizer
  probe = _probe()
  tok = load_tokenizer("")
  text = "Write ironhorn to log1.txt\necho ironhorn > log1.txt"
  ids = tok.encode(text)
  pos = probe.value_positions(ids, ["ironhorn", "log1.txt"], tok)
  spelled = "".join(tok.decode([ids[i]]) for i in sorted(pos)).replace(" ", "")
  assert spelled == "ironhornlog1ironhornlog1"   # two mentions each, '.txt' and the rest left out
  assert not probe.value_positions(ids, ["sunbird"], tok)
