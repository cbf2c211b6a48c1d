"""Does the base learn to copy a value across a long block between the instruction and the response?
(issue 36, docs/results.md "Issue 36, session 32").

After SFT the first copy of a file name fails when a screenshot, or text of its length, sits between
the instruction and the response (experiments/stem_probe.py: 4.8 / 4.7 nats, 0.04 without), and the
base fails it too (6.1 / 6.6, 2.8 without): the base corpus's `instruct` documents always put the
response right after the instruction. This builds the base (configs/pretrain.py) with the corpus
patched so that a share of `instruct` documents (the probe's too) hold, after the instruction, a block
as the agent's first user turn does: a run of image-pad tokens between vision start/end, or sentences
of filler text, of up to 250 tokens (fewer in the curriculum's short rows). The build is cached in its own folder (the patch is not in
the cache key), then run stem_probe's block variants on it. Since session 33 the corpus does this
itself (configs/pretrain.py `corpus.block_share`, data/copy_corpus.py); this script turns that off
and patches its own blocks in, as session 32 ran it:

  PYTHONPATH=. python experiments/gap_base.py /abs/runs/gap          # writes /abs/runs/gap/base/
  mkdir -p /abs/runs/gap && ln -s /abs/workdirs/proof_s0/data /abs/runs/gap/data   # a proof run's data stage, first
  PYTHONPATH=. python experiments/stem_probe.py /abs/runs/gap base/hf make_file,make_file_shot,make_file_text
"""
import os
import random
import sys

from configs import pretrain as pretrain_config
from mage_jax.data import copy_corpus
from mage_jax.runs import proof_base

BLOCK_SHARE = 0.5
_ROW = {"length": 128}
_RNG = random.Random(0)
_WORDS = ("a", "the", "window", "button", "screen", "shows", "with", "and", "on", "of", "file", "menu", "list",
          "text", "bar", "open", "left", "right", "top", "icon") + copy_corpus.COLOURS


def _block() -> str:
  # an instruct document is at most ~130 tokens: rows of 128 get none, 256 up to 48, 1,024 up to 250
  size = min(250, (_ROW["length"] - 160) // 2) * _RNG.uniform(0.5, 1.0)
  if size < 8:
    return ""
  if _RNG.random() < 0.5:
    return "<|vision_start|>" + "<|image_pad|>" * int(size) + "<|vision_end|>"
  words = []
  while len(words) < size * 0.8:   # ~1.25 tokens a word with the stops
    words += [_RNG.choice(_WORDS) for _ in range(_RNG.randint(4, 10))] + ["."]
  return " ".join(words)


_chat, _row = copy_corpus._chat, copy_corpus.CopyCorpus._row


def chat_with_block(instruction, values, **kw):
  block = _block() if _RNG.random() < BLOCK_SHARE else ""
  if block:
    instruction = instruction + "\n\n" + block
  return _chat(instruction, values, **kw)


def row_at_length(self, rng, length, last, preamble_last=False):
  if length < _ROW["length"] and not preamble_last:   # a document drawn for longer rows: draw again
    _ROW["length"] = length
    last = self.document(rng)
  _ROW["length"] = length
  return _row(self, rng, length, last, preamble_last)


def main() -> None:
  out = sys.argv[1]
  copy_corpus._chat = chat_with_block
  copy_corpus.CopyCorpus._row = row_at_length
  cfg = pretrain_config.get_config(None)
  cfg.corpus.block_share = 0.0      # the patch's blocks only, as in session 32
  cfg.cache_dir = os.path.join(out, "cache")
  info = proof_base.run(cfg, os.path.join(out, "build"))
  base = os.path.join(out, "base")
  os.makedirs(base, exist_ok=True)
  for name in ("hf", "vocab.json", "base.json"):
    if not os.path.lexists(os.path.join(base, name)):
      os.symlink(os.path.join(info["dir"], name), os.path.join(base, name))
  print({k: v for k, v in info.items() if k != "curve"})


if __name__ == "__main__":
  main()
