"""The after-SFT copy probe's value mask (train/copy_probe.py): exactly the trained tokens that
spell a held-out value, whole values only, with the real tokenizer."""
import numpy as np

from mage_jax.data.tokenizer import Tokenizer
from mage_jax.train.copy_probe import value_mask


def test_value_mask_marks_whole_trained_values_only():
  tok = Tokenizer()
  prompt = tok.encode("<|im_start|>user\nSave goldwolf in memo5.txt<|im_end|>\n<|im_start|>assistant\n")
  reply = tok.encode('Action: Write goldwolf to memo5.txt\n{"command": "echo goldwolf > memo5.txt"}'
                     ' goldwolfish xmemo5.txt<|im_end|>')
  tokens = np.asarray(prompt + reply, np.int32)
  loss = np.zeros(len(tokens), bool)
  loss[len(prompt):] = True
  mask = value_mask(tok, tokens, loss, ["goldwolf", "memo5.txt", "snowbird"])
  assert not mask[:len(prompt)].any()           # the instruction's copies are not targets
  marked = tok.decode(tokens[mask].tolist())
  # two occurrences of each value in the reply; "goldwolfish" and "xmemo5.txt" are other words
  assert marked.replace(" ", "") == "goldwolfmemo5.txtgoldwolfmemo5.txt", marked
  runs = np.split(np.flatnonzero(mask), np.flatnonzero(np.diff(np.flatnonzero(mask)) != 1) + 1)
  assert len(runs) == 4
  assert not value_mask(tok, tokens, loss, []).any()
  assert not value_mask(tok, tokens, np.zeros(len(tokens), bool), ["goldwolf"]).any()
