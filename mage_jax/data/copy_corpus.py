"""The generated pretraining corpus of the learning proof's base (stage 0, launch.pretrain): the
skills a pretrained LM brings to agent SFT, on the values an agent task family uses.

Documents (each a list of (text, kind) pieces, encoded piece by piece so value tokens are known):
  repeat    a list of random values, then the same list again ("copy")
  recall    key -> value pairs, then a key and its value ("lookup")
  instruct  a chat turn pair: an instruction naming values -> an agent response (think line,
            Action line, one tool call in the real <tool_call> JSON) that repeats them
Values come from pools (words, file names, colour words, numbers). Held-out values (those a
task family keeps for evaluation) appear only in `repeat` and `recall` documents, always as
prediction targets too, never inside an `instruct` document: the base can emit and copy them,
but has never seen them in a task. Train values appear everywhere.

Novel values (`novel_share` of the `instruct` documents): 2-4 token pieces of the pool values
(both splits) strung together at random, never a pool value. A base that saw only train values in
instructions learnt their distribution (which second piece follows "gold") and guessed held-out
values from it (probe stuck at ~2.8 nats); values no distribution predicts leave copying as the
only way to lower the loss.

Blocks (`block_share` of the `instruct` documents, in rows long enough): between the instruction and
the response, what an agent's first user turn holds there: a screenshot's run of image-pad tokens
between vision start and end, or sentences of screen words (an observation's text), of up to
`block_max` tokens and at most half of what the row has beyond one document. A base whose
instructions were always followed by the response at once did not copy a value across a block (a
held-out file name's first token: 2.8 nats right after the instruction, 6.1 after a screenshot, 6.6
after text of its length; docs/results.md "Issue 36, session 32"), and the agent SFT built on it
never learnt to.

A row is one causal segment of exactly `length` tokens: filler documents (drawn the same way,
trained as ordinary LM text), then the last document, so the copy in the last document must look
past everything before it. The length curriculum (train/pretrain.py) grows `length`.

The copy probe scores the value tokens of `instruct` documents whose values are held out (never
trained in that form) at the end of a row of the probe's length: a base that copies scores ~0
nats, one that guesses from the pool scores ~log(pool size).

  corpus = CopyCorpus(tokenizer, pools)                 # pools: Pools(words={"train": [...], ...})
  rows = corpus.rows(rng, batch=8, length=256)          # {"tokens", "targets", "loss_mask", ...}
  probe = corpus.probe_rows(rng, batch=16, length=1024) # + "value_mask": held-out value targets
  ids = corpus.vocabulary(extra_texts)                  # every id the corpus (and extras) can use
"""
from __future__ import annotations

import dataclasses
import json
import random
from typing import Iterable, Sequence

import numpy as np

from mage_jax.data.tokenizer import SPECIAL_IDS

VALUE, TEXT = "value", "text"
SPLITS = ("train", "heldout")
KINDS = ("repeat", "recall", "instruct")
# the proof family's colours, and the vision stage's extra ones (tasks/proof_grounding.EXTRA_COLOURS)
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "black", "white", "grey", "pink",
           "brown", "navy", "teal", "lime")

# Instruction phrasings and the commands that satisfy them: {w} a word, {f} a file name.
_FILE_INSTRUCTIONS = (
    "Create a file named {f} holding the word {w}",
    "Write the word {w} into a new file called {f}",
    "Save {w} in the file {f}",
    "Put the single word {w} in {f}",
    "Make {f} contain {w}",
)
_FILE_COMMANDS = ("echo {w} > {f}", "printf '%s\\n' {w} > {f}", "echo {w} | tee {f}")
_CLICK_INSTRUCTIONS = ("Click the {c} button", "Press the {c} button on the screen",
                       "Find the {c} button and click it")
# a text block's words: what a screen's text says; never a word or file-name value (colours: a screen
# shows other colours than the one an instruction names)
BLOCK_WORDS = ("a", "the", "window", "button", "screen", "shows", "with", "and", "on", "of", "file", "menu",
               "list", "text", "bar", "open", "left", "right", "top", "icon") + COLOURS
_DOC_TOKENS = 160   # an instruct document is at most ~130 tokens: a block leaves it this much of the row
_MIN_BLOCK = 8


@dataclasses.dataclass(frozen=True)
class Pools:
  """Value pools by split. Every value is one whitespace-free string."""
  words: dict[str, Sequence[str]]
  file_names: dict[str, Sequence[str]]

  def __post_init__(self):
    for field in ("words", "file_names"):
      pool = getattr(self, field)
      for split in SPLITS:
        values = pool.get(split) or ()
        if split == "train" and not values:
          raise ValueError(f"pools.{field}.train is empty")
        bad = [v for v in values if not v or any(ch.isspace() for ch in v)]
        if bad:
          raise ValueError(f"pools.{field}.{split}: values must be non-empty without whitespace, got {bad[:3]}")
      overlap = set(pool.get("train", ())) & set(pool.get("heldout", ()))
      if overlap:
        raise ValueError(f"pools.{field}: {len(overlap)} value(s) in both train and heldout, e.g. {sorted(overlap)[:3]}")


class CopyCorpus:

  def __init__(self, tokenizer, pools: Pools, *, kinds: Sequence[str] = KINDS,
               preambles: Sequence[str] = (), preamble_share: float = 0.0, novel_share: float = 0.0,
               block_share: float = 0.0, block_max: int = 250):
    unknown = set(kinds) - set(KINDS)
    if unknown:
      raise ValueError(f"corpus kinds {sorted(unknown)} are not among {KINDS}")
    if not 0.0 <= novel_share <= 1.0:
      raise ValueError(f"corpus novel_share={novel_share} must be in [0, 1]")
    if not 0.0 <= block_share <= 1.0:
      raise ValueError(f"corpus block_share={block_share} must be in [0, 1]")
    if block_share and int(block_max) < _MIN_BLOCK:
      raise ValueError(f"corpus block_max={block_max} must be >= {_MIN_BLOCK} tokens when block_share > 0")
    self.novel_share = novel_share
    self.block_share = float(block_share)
    self.block_max = int(block_max)
    self._pieces: dict[str, tuple[list[str], set[str]]] = {}
    if not 0.0 <= preamble_share < 1.0 or (preamble_share and not preambles):
      raise ValueError(f"corpus preamble_share={preamble_share} must be in [0, 1) and needs preambles")
    self.tok = tokenizer
    self.pools = pools
    self.kinds = tuple(kinds)
    # Fixed texts (e.g. an agent's system turn) drawn as filler documents: the base learns to read
    # past the long preamble every agent prompt starts with.
    self.preambles = tuple(preambles)
    self.preamble_share = preamble_share
    self._cache: dict[str, list[int]] = {}

  # --- documents: lists of (text, kind) pieces ---
  def _value(self, rng: random.Random, split: str) -> str:
    pick = rng.random()
    if pick < 0.4:
      return rng.choice(self.pools.words[split])
    if pick < 0.8:
      return rng.choice(self.pools.file_names[split])
    if split == "heldout":   # colours and numbers have no held-out form
      return rng.choice(self.pools.words[split])
    return rng.choice(COLOURS) if pick < 0.9 else str(rng.randrange(1000))

  def _novel(self, rng: random.Random, field: str) -> str:
    """A value of 2-4 random pieces of `field`'s pool values, none of which it equals."""
    if field not in self._pieces:
      pool = getattr(self.pools, field)
      values = [v for split in SPLITS for v in pool.get(split, ())]
      pieces = sorted({self.tok.decode([t]).strip() for v in values for t in self.tok.encode(" " + v)} - {""})
      self._pieces[field] = (pieces, set(values))
    pieces, taken = self._pieces[field]
    while True:
      value = "".join(rng.choice(pieces) for _ in range(rng.randint(2, 4)))
      if value not in taken:
        return value

  def _split(self, rng: random.Random) -> str:
    has_heldout = self.pools.words.get("heldout") and self.pools.file_names.get("heldout")
    return "heldout" if has_heldout and rng.random() < 0.5 else "train"

  def repeat(self, rng: random.Random) -> list[tuple[str, str]]:
    return self._repeat(rng, self._split(rng))

  def _repeat(self, rng: random.Random, split: str) -> list[tuple[str, str]]:
    values = [self._value(rng, split) for _ in range(rng.randint(2, 6))]
    head = rng.choice(("List:", "Items:", "Remember these:", "Values:"))
    again = rng.choice(("Again:", "Repeat:", "Once more:", "The same list:"))
    pieces = [(head, TEXT)] + [(" " + v, VALUE) for v in values] + [("\n" + again, TEXT)]
    return pieces + [(" " + v, VALUE) for v in values] + [("\n", TEXT)]

  def recall(self, rng: random.Random) -> list[tuple[str, str]]:
    split = self._split(rng)
    n = rng.randint(2, 5)
    keys = rng.sample(range(100), n)
    values = [self._value(rng, split) for _ in range(n)]
    pieces: list[tuple[str, str]] = []
    for k, v in zip(keys, values):
      pieces += [(f"key {k} =", TEXT), (" " + v, VALUE), (";\n", TEXT)]
    j = rng.randrange(n)
    return pieces + [(f"What is key {keys[j]}? It is", TEXT), (" " + values[j], VALUE), ("\n", TEXT)]

  def room(self, length: int) -> int:
    """The most tokens a block may take in a row of `length` tokens (0: none fits)."""
    room = min(self.block_max, (length - _DOC_TOKENS) // 2)
    return room if self.block_share and room >= _MIN_BLOCK else 0

  def block(self, rng: random.Random, room: int) -> list[tuple[str, str]]:
    """What sits between an agent's instruction and its response: "\n\n", then an image-pad run
    (a screenshot) or sentences of screen words (an observation's text), of room/2 to room tokens."""
    size = int(room * rng.uniform(0.5, 1.0))
    if size < _MIN_BLOCK:
      return []
    if rng.random() < 0.5:
      return [("\n\n", TEXT), ("<|vision_start|>" + "<|image_pad|>" * size + "<|vision_end|>", TEXT)]
    pieces, n = [("\n\n", TEXT)], 0
    while n < size:
      for i in range(rng.randint(4, 10)):
        word = rng.choice(BLOCK_WORDS)
        pieces.append((word if len(pieces) == 1 else " " + word, TEXT))
        n += len(self._encode(pieces[-1][0]))
      pieces.append((" .", TEXT))
      n += 1
    return pieces

  def instruct(self, rng: random.Random, split: str = "train", *, file_task: bool | None = None,
               room: int = 0) -> list[tuple[str, str]]:
    """An instruction and an agent response that repeats its values (train values unless told);
    with `room` (see room()), a block between them in `block_share` of the documents."""
    block = self.block(rng, room) if room and rng.random() < self.block_share else []
    if file_task if file_task is not None else rng.random() < 0.75:
      if split == "train" and self.novel_share and rng.random() < self.novel_share:
        w, f = self._novel(rng, "words"), self._novel(rng, "file_names")
      else:
        w, f = rng.choice(self.pools.words[split]), rng.choice(self.pools.file_names[split])
      instruction = rng.choice(_FILE_INSTRUCTIONS)
      cmd = rng.choice(_FILE_COMMANDS)
      return _chat(instruction, {"w": w, "f": f},
                   think="The file {f} must hold the word {w} , so I write it.",
                   action="Write {w} to {f}", call=("bash", {"command": cmd}), block=block)
    c = rng.choice(COLOURS)
    x, y = rng.randrange(1000), rng.randrange(1000)
    return _chat(rng.choice(_CLICK_INSTRUCTIONS), {"c": c},
                 think="The {c} button is where I click.", action="Click the {c} button",
                 call=("computer_use", {"action": "left_click", "coordinate": [x, y]}), block=block)

  def document(self, rng: random.Random, room: int = 0) -> list[tuple[str, str]]:
    kind = rng.choice(self.kinds)
    return self.instruct(rng, room=room) if kind == "instruct" else getattr(self, kind)(rng)

  # --- encoding ---
  def _encode(self, text: str) -> list[int]:
    ids = self._cache.get(text)
    if ids is None:
      ids = self.tok.encode(text)
      if len(self._cache) < 200_000:
        self._cache[text] = ids
    return ids

  def encode(self, pieces: Sequence[tuple[str, str]]) -> tuple[list[int], list[int]]:
    """(ids, is_value per id); a value that repeats an earlier value of the document marks its ids 2."""
    ids: list[int] = []
    marks: list[int] = []
    seen: set[str] = set()
    for text, kind in pieces:
      piece = self._encode(text)
      mark = 0 if kind == TEXT else (2 if text in seen else 1)
      if kind == VALUE:
        seen.add(text)
      ids += piece
      marks += [mark] * len(piece)
    return ids, marks

  def _row(self, rng: random.Random, length: int, last: list[tuple[str, str]],
           preamble_last: bool = False) -> tuple[list[int], list[int]]:
    """Filler documents then `last`, cut to exactly `length + 1` ids (inputs + the next target).
    preamble_last: a preamble sits right before `last`, as an agent prompt's system turn does."""
    tail, tail_marks = self.encode(last)
    if len(tail) > length + 1:
      raise ValueError(f"row length {length} is shorter than one document ({len(tail)} tokens)")
    if preamble_last and self.preambles:
      tail = self._encode(rng.choice(self.preambles)) + tail
      tail_marks = [0] * (len(tail) - len(tail_marks)) + tail_marks
      tail, tail_marks = tail[-(length + 1):], tail_marks[-(length + 1):]
    ids: list[int] = []
    room = self.room(length)
    while len(ids) + len(tail) < length + 1:
      if self.preambles and rng.random() < self.preamble_share:
        ids += self._encode(rng.choice(self.preambles))
      else:
        ids += self.encode(self.document(rng, room))[0]
    ids = ids[len(ids) + len(tail) - (length + 1):] if ids else ids   # keep the filler's end
    return ids + tail, [0] * len(ids) + tail_marks

  def rows(self, rng: random.Random, batch: int, length: int) -> dict[str, np.ndarray]:
    """A training batch of `batch` rows of `length` tokens: next-token targets on every position."""
    out = [self._row(rng, length, self.document(rng, self.room(length))) for _ in range(batch)]
    b = _batch([ids for ids, _ in out], [marks for _, marks in out], length)
    del b["marks"]
    return b

  def probe_rows(self, rng: random.Random, batch: int, length: int, *, split: str = "heldout",
                 doc: str = "instruct") -> dict[str, np.ndarray]:
    """Rows ending in a document of `split` values; `value_mask` marks the targets that repeat a
    value from earlier in it (what a copying model gets right). The copy probe: held-out values in
    an `instruct` document. Diagnostics: train values (what the base saw in instructions; a gap to
    held-out is memorisation), a `repeat` list of held-out values (plain copying)."""
    if split not in SPLITS or doc not in ("instruct", "repeat"):
      raise ValueError(f"probe split={split!r} doc={doc!r}: expected one of {SPLITS} and instruct|repeat")
    if not (self.pools.words.get(split) and self.pools.file_names.get(split)):
      raise ValueError(f"the copy probe needs {split} words and file names in the pools")
    probe_rng = random.Random(rng.random())
    if doc == "instruct":
      # the pool values themselves, never novel ones: what an agent task holds
      novel, self.novel_share = self.novel_share, 0.0
      try:
        docs = [self.instruct(probe_rng, split, file_task=True, room=self.room(length)) for _ in range(batch)]
      finally:
        self.novel_share = novel
    else:
      docs = [self._repeat(probe_rng, split) for _ in range(batch)]
    out = [self._row(rng, length, d, preamble_last=doc == "instruct") for d in docs]
    b = _batch([ids for ids, _ in out], [marks for _, marks in out], length)
    b["value_mask"] = (b.pop("marks") == 2).astype(np.int32)
    return b

  # --- vocabulary ---
  def vocabulary(self, extra_texts: Iterable[str] = (), *, samples: int = 4_000, seed: int = 0) -> set[int]:
    """Every token id the corpus can produce (values in every position they take, a sample of each
    document kind), the special tokens, the extra texts (e.g. a task family's prompts) and the
    byte-level single-character tokens (ASCII), so rendering odd text rarely leaves it."""
    ids: set[int] = set(SPECIAL_IDS.values())
    values = [v for pool in (self.pools.words, self.pools.file_names) for split in SPLITS
              for v in pool.get(split, ())] + list(COLOURS) + [str(i) for i in range(1000)]
    forms = (" {}", "{}", "\"{}", " {}\"", "{}.", " {};", "/{}", "'{}'")
    texts = [f.format(v) for v in values for f in forms]
    extra = list(extra_texts)
    # a text's first word tokenizes differently after a space ("Action: Finish"), and its last
    # with the newline a rendered turn puts after it (" ." + "\n" is one token): every form
    texts += [chr(c) for c in range(32, 127)] + list(self.preambles)
    texts += [form.format(w) for w in BLOCK_WORDS for form in ("{}", " {}")] if self.block_share else []
    texts += [form.format(t) for t in extra for form in ("{}", " {}", "{}\n", " {}\n", "\n{}")]
    for enc in self.tok.encode_batch(texts):
      ids.update(enc)
    rng = random.Random(seed)
    room = self.room(_DOC_TOKENS + 2 * self.block_max)
    for _ in range(samples):
      ids.update(self.encode(self.document(rng, room))[0])
    for split in SPLITS:
      if self.pools.words.get(split) and self.pools.file_names.get(split):
        for _ in range(samples // 4):
          ids.update(self.encode(self.instruct(rng, split, file_task=True))[0])
    return ids


_SLOT = "\ue000"   # a private-use character marks a value slot through json.dumps


def _chat(instruction: str, values: dict[str, str], *, think: str, action: str,
          call: tuple[str, dict], block: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
  """A user turn (the instruction, then `block`'s pieces) and an assistant turn as pieces, each
  value occurrence a VALUE piece."""
  name, arguments = call
  slotted = {k: (_slots(v) if isinstance(v, str) else v) for k, v in arguments.items()}
  body = json.dumps({"name": name, "arguments": slotted}, ensure_ascii=False)
  reply = ("<|im_end|>\n<|im_start|>assistant\n<think>\n" + _slots(think) + "\n</think>\n\nAction: "
           + _slots(action) + "\n<tool_call>\n" + body + "\n</tool_call><|im_end|>\n")
  return _fill("<|im_start|>user\n" + _slots(instruction), values) + list(block) + _fill(reply, values)


def _slots(template: str) -> str:
  for k in ("w", "f", "c"):
    template = template.replace("{" + k + "}", _SLOT + k + _SLOT)
  return template


def _fill(text: str, values: dict[str, str]) -> list[tuple[str, str]]:
  """Split slotted text into text pieces and VALUE pieces; a value keeps the space before it, as
  the tokenizer's pre-split does."""
  out: list[tuple[str, str]] = []
  parts = text.split(_SLOT)
  for i, part in enumerate(parts):
    if i % 2 == 0:
      out.append((part, TEXT))
      continue
    space = out and out[-1][0].endswith(" ")
    if space:
      out[-1] = (out[-1][0][:-1], TEXT)
    out.append(((" " if space else "") + values[part], VALUE))
  return [(t, kind) for t, kind in out if t]


def _batch(rows: list[list[int]], marks: list[list[int]], length: int) -> dict[str, np.ndarray]:
  ids = np.asarray(rows, np.int32)
  m = np.asarray(marks, np.int32)
  b = ids.shape[0]
  return {"tokens": ids[:, :length], "targets": ids[:, 1:length + 1],
          "loss_mask": np.ones((b, length), np.int32),
          "segment_ids": np.ones((b, length), np.int32),
          "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (b, length)).copy(),
          "marks": m[:, 1:length + 1]}
