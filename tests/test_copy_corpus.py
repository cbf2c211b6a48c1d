"""The pretraining corpus (data/copy_corpus.py) and the base build (train/pretrain.py): held-out
values are targets but never inside an instruction document, the probe marks exactly the copied
held-out value tokens, the vocabulary covers every row, bad pools are refused, and a tiny build
writes its outputs and is reused from the cache."""
import json
import os
import random

import numpy as np
import pytest

from mage_jax.data import copy_corpus as cc
from mage_jax.data.tokenizer import Tokenizer

TRAIN_W = [f"{a}{b}" for a in ("sun", "moon", "star", "rain") for b in ("bird", "fish", "leaf")]
HELD_W = [f"{a}{b}" for a in ("gold", "iron") for b in ("wolf", "fox")]
TRAIN_F = [f"notes{d}.txt" for d in range(1, 8)]
HELD_F = [f"memo{d}.txt" for d in range(1, 4)]


@pytest.fixture(scope="module")
def corpus():
  pools = cc.Pools(words={"train": TRAIN_W, "heldout": HELD_W},
                   file_names={"train": TRAIN_F, "heldout": HELD_F})
  return cc.CopyCorpus(Tokenizer(), pools, preambles=["<|im_start|>system\nYou are an agent.<|im_end|>\n"],
                       preamble_share=0.3)


def test_heldout_values_are_targets_but_never_in_instructions(corpus):
  rng = random.Random(0)
  held = set(HELD_W + HELD_F)
  seen_held_as_target = 0
  for _ in range(400):
    doc = corpus.document(rng)
    values = {t.strip() for t, kind in doc if kind == cc.VALUE}
    if doc[0][0].startswith("<|im_start|>user"):
      assert not values & held, doc
    ids, marks = corpus.encode(doc)
    assert ids == corpus.tok.encode("".join(t for t, _ in doc))   # piece-wise == whole-text tokens
    if values & held and 2 in marks:
      seen_held_as_target += 1
  assert seen_held_as_target > 50


def test_probe_marks_the_copied_heldout_value_tokens(corpus):
  b = corpus.probe_rows(random.Random(1), batch=4, length=192)
  assert b["tokens"].shape == (4, 192) and b["value_mask"].shape == (4, 192)
  for r in range(4):
    text = corpus.tok.decode(b["targets"][r][b["value_mask"][r] > 0])
    words = set(text.split())
    assert words and words <= set(HELD_W + HELD_F), text
    # the instruction that names them is in the row, before the first marked target
    first = int(np.argmax(b["value_mask"][r]))
    assert "<|im_start|>user" in corpus.tok.decode(b["tokens"][r][:first + 1])
  np.testing.assert_array_equal(b["tokens"][:, 1:], b["targets"][:, :-1])


def test_novel_instruction_values_are_piece_strings_never_pool_values(corpus):
  novel = cc.CopyCorpus(corpus.tok, corpus.pools, novel_share=1.0)
  pools = set(TRAIN_W + HELD_W + TRAIN_F + HELD_F)
  pieces = {"sun", "moon", "star", "rain", "gold", "iron", "bird", "fish", "leaf", "wolf", "fox", "notes",
            "memo", ".txt"} | set("1234567")
  rng = random.Random(3)
  values = [t.strip() for _ in range(200) for t, kind in novel.instruct(rng, file_task=True) if kind == cc.VALUE]
  assert values and not set(values) & pools
  assert len(set(values)) > 100            # a distribution nothing can memorise
  for v in values:                         # each a string of pool pieces: tokens the base also emits
    rest = v
    while rest:
      head = next((p for p in sorted(pieces, key=len, reverse=True) if rest.startswith(p)), None)
      assert head, v
      rest = rest[len(head):]
  # the probes never hold novel values: pool values of the asked split, in instructions or lists
  for split, doc in (("train", "instruct"), ("heldout", "repeat")):
    b = novel.probe_rows(random.Random(4), 4, 192, split=split, doc=doc)
    want = set((TRAIN_W + TRAIN_F) if split == "train" else (HELD_W + HELD_F))
    for r in range(4):
      words = set(novel.tok.decode(b["targets"][r][b["value_mask"][r] > 0]).split())
      assert words and words <= want, (split, doc, words)
  with pytest.raises(ValueError, match="novel_share"):
    cc.CopyCorpus(corpus.tok, corpus.pools, novel_share=1.5)


def _block_of(corpus, doc):
  """The block pieces of an instruct document: those between the instruction and <|im_end|>."""
  start = next(i for i, (t, _) in enumerate(doc) if t == "\n\n") if any(t == "\n\n" for t, _ in doc) else None
  if start is None:
    return []
  end = next(i for i in range(start, len(doc)) if doc[i][0].startswith("<|im_end|>"))
  return doc[start:end]


def test_blocks_sit_between_instruction_and_response_sized_to_the_row(corpus):
  blocks = cc.CopyCorpus(corpus.tok, corpus.pools, block_share=0.5, block_max=120)
  assert blocks.room(128) == 0 and blocks.room(256) == 48 and blocks.room(1024) == 120
  assert cc.CopyCorpus(corpus.tok, corpus.pools).room(1024) == 0          # off by default
  rng = random.Random(5)
  kinds, pools = [], set(TRAIN_W + HELD_W + TRAIN_F + HELD_F)
  for _ in range(400):
    doc = blocks.instruct(rng, room=100)
    block = _block_of(blocks, doc)
    ids, marks = blocks.encode(doc)
    if block:   # the values and their marks are those of the document without its block
      i = doc.index(block[0])
      plain = doc[:i] + doc[i + len(block):]
      assert [m for m in marks if m] == [m for m in blocks.encode(plain)[1] if m]
    assert ids == blocks.tok.encode("".join(t for t, _ in doc))    # piece-wise == whole-text tokens
    if not block:
      kinds.append("none")
      continue
    assert all(k == cc.TEXT for _, k in block)          # nothing in a block is a value, or a target to copy
    body = blocks.tok.encode("".join(t for t, _ in block[1:]))
    text = blocks.tok.decode(body)
    assert not set(text.split()) & pools, text
    if text.startswith("<|vision_start|>"):
      kinds.append("image")
      assert body[0] == 151652 and body[-1] == 151653 and set(body[1:-1]) == {151655}
      assert 50 <= len(body) - 2 <= 100
    else:
      kinds.append("text")
      assert set(text.replace(" .", "").split()) <= set(cc.BLOCK_WORDS)
      assert 50 <= len(body) <= 100 + 11
    # the response still repeats the instruction's values, after the block
    user = "".join(t for t, _ in doc[:doc.index(block[0])])
    values = [t for t, k in doc if k == cc.VALUE]
    assert values[0] in user and values[-1] in "".join(t for t, _ in doc[doc.index(block[-1]) + 1:])
  assert 120 < kinds.count("none") < 280 and kinds.count("image") > 40 and kinds.count("text") > 40
  assert all(not _block_of(blocks, blocks.instruct(rng, room=0)) for _ in range(50))


def test_block_rows_probe_and_vocabulary(corpus):
  pre = ["<|im_start|>system\nYou are an agent.<|im_end|>\n"]
  blocks = cc.CopyCorpus(corpus.tok, corpus.pools, preambles=pre, preamble_share=0.3, block_share=0.5,
                         block_max=100)
  vocab = blocks.vocabulary(samples=300)
  assert {151652, 151653, 151655} <= vocab
  assert all(set(blocks.tok.encode(" " + w)) <= vocab for w in cc.BLOCK_WORDS)
  rng = random.Random(6)
  b = blocks.rows(rng, 8, 512)
  assert b["tokens"].shape == (8, 512) and set(np.unique(b["targets"])) <= vocab
  assert (b["tokens"] == 151655).any()                 # some rows hold an image-pad block
  assert not (blocks.rows(rng, 8, 128)["tokens"] == 151655).any()   # none fits a short row
  p = blocks.probe_rows(random.Random(7), 16, 512)
  padded = 0
  for r in range(16):
    words = set(blocks.tok.decode(p["targets"][r][p["value_mask"][r] > 0]).split())
    assert words and words <= set(HELD_W + HELD_F)
    first = int(np.argmax(p["value_mask"][r]))
    last_user = blocks.tok.decode(p["tokens"][r][:first + 1]).rsplit("<|im_start|>user", 1)[1]
    padded += "<|vision_start|>" in last_user or " ." in last_user
  assert 2 <= padded <= 14                              # the probe's documents hold blocks too
  with pytest.raises(ValueError, match="block_share"):
    cc.CopyCorpus(corpus.tok, corpus.pools, block_share=-0.1)
  with pytest.raises(ValueError, match="block_max"):
    cc.CopyCorpus(corpus.tok, corpus.pools, block_share=0.5, block_max=4)


def test_no_blocks_leaves_the_document_stream_as_it_was(corpus):
  off = cc.CopyCorpus(corpus.tok, corpus.pools, block_max=100)
  a, b = random.Random(8), random.Random(8)
  assert [off.document(a, room=off.room(1024)) for _ in range(50)] == [corpus.document(b) for _ in range(50)]


def test_vocabulary_covers_rows(corpus):
  vocab = corpus.vocabulary(samples=300)
  rng = random.Random(2)
  for length in (128, 256):
    b = corpus.rows(rng, 8, length)
    assert set(np.unique(b["tokens"])) <= vocab and set(np.unique(b["targets"])) <= vocab
  assert set(np.unique(corpus.probe_rows(rng, 4, 256)["targets"])) <= vocab


def test_bad_pools_and_lengths(corpus):
  with pytest.raises(ValueError, match="pools.words: 1 value\\(s\\) in both"):
    cc.Pools(words={"train": TRAIN_W, "heldout": [TRAIN_W[0]]}, file_names={"train": TRAIN_F})
  with pytest.raises(ValueError, match="pools.file_names.train: values must be non-empty without whitespace"):
    cc.Pools(words={"train": TRAIN_W}, file_names={"train": ["a b.txt"]})
  with pytest.raises(ValueError, match="pools.words.train is empty"):
    cc.Pools(words={"train": []}, file_names={"train": TRAIN_F})
  with pytest.raises(ValueError, match="shorter than one document"):
    corpus.probe_rows(random.Random(0), 1, 16)
  with pytest.raises(ValueError, match="corpus kinds"):
    cc.CopyCorpus(corpus.tok, corpus.pools, kinds=("poems",))


def test_tiny_base_build_outputs_and_cache(tmp_path):
  from configs import pretrain as pretrain_config
  from mage_jax.train import pretrain
  c = pretrain_config.get_config("tiny")
  c.cache_dir = str(tmp_path / "cache")
  pools = cc.Pools(words={"train": TRAIN_W, "heldout": HELD_W}, file_names={"train": TRAIN_F, "heldout": HELD_F})
  logs = []
  pre = ["<|im_start|>system\nYou are an agent.<|im_end|>\n"]
  info = pretrain.run(c, str(tmp_path / "w"), pools, preambles=pre, log=logs.append)
  assert info["status"] in ("passed", "failed") and not info["cached"]
  assert info["steps"] == c.curriculum.max_steps or info["status"] == "passed"
  assert [p["length"] for p in info["curve"]][0] == c.curriculum.lengths[0]
  assert all(np.isfinite(p["probe_nll"]) for p in info["curve"])
  w = tmp_path / "w"
  with open(w / "hf" / "config.json") as f:
    hf_cfg = json.load(f)
  assert hf_cfg["vocab_size"] == 151936 and hf_cfg["hidden_size"] == c.model.hidden_size
  assert (w / "vocab.json").exists() and (w / "base.json").exists()
  c.accept_failed = True
  again = pretrain.run(c, str(tmp_path / "w2"), pools, preambles=pre, log=logs.append)
  assert again["cached"] and again["cache_key"] == info["cache_key"]
  assert not os.path.exists(tmp_path / "w2")
  assert pretrain.cached_base(c, preambles=pre) == os.path.join(c.cache_dir, info["cache_key"])
  # other texts in the vocabulary, or other preambles: another base, no reuse
  assert pretrain.cached_base(c, extra_texts=["Click the teal button"], preambles=pre) is None
  assert pretrain.cached_base(c) is None
  c.base_seed = 1   # another base: another key, no reuse
  assert pretrain.cached_base(c, preambles=pre) is None
  bad = pretrain_config.get_config("tiny")
  bad.curriculum.lengths = [256, 128]
  with pytest.raises(ValueError, match="increasing"):
    pretrain.run(bad, str(tmp_path / "w3"), pools, preambles=pre)
