"""Print a packed bin or a rendered sample for a human.

  python -m launch.inspect --path=workdirs/synth/packed/gui [--index=0]        # shard file or folder
  python -m launch.inspect --path=workdirs/synth/hybrid.jsonl --index=0 --step=3  # episode -> sample

Trained tokens (those that are labels) are shown «like this» (or green with
--ansi); runs of <|image_pad|> are summarised as one image block; segment
boundaries, per-segment metadata and token/patch counts are printed.
"""
from __future__ import annotations

import numpy as np
from absl import app, flags

from mage_jax.data import records
from mage_jax.data import tokenizer as tok_lib

_PATH = flags.DEFINE_string("path", None, "Shard file, shard folder, or trajectory JSONL.", required=True)
_INDEX = flags.DEFINE_integer("index", 0, "Bin index (shards) or episode index (JSONL, good episodes only).")
_STEP = flags.DEFINE_integer("step", 0, "JSONL: 1-based step to render (0 = the last).")
_ANSI = flags.DEFINE_bool("ansi", False, "Mark trained spans with colour instead of «…».")
_TOKENIZER = flags.DEFINE_string("tokenizer", "", "Tokenizer folder (default: the shipped Qwen3).")
_MAX_CHARS = flags.DEFINE_integer("max_chars", 0, "Truncate each segment's text (0 = no limit).")


def format_text(tok: tok_lib.Tokenizer, tokens: np.ndarray, trained: np.ndarray,
                image_grids: list[tuple[int, int]] | None = None, ansi: bool = False) -> str:
  """Decoded text with trained spans marked and image-pad runs collapsed to one line each."""
  open_, close = ("\x1b[32m", "\x1b[0m") if ansi else ("«", "»")
  out, i, n, image = [], 0, len(tokens), 0
  grids = list(image_grids or [])
  while i < n:
    if tokens[i] == tok_lib.IMAGE_PAD_ID:
      j = i
      while j < n and tokens[j] == tok_lib.IMAGE_PAD_ID:
        j += 1
      grid = f", {grids[image][0]}x{grids[image][1]} patches" if image < len(grids) else ""
      out.append(f"[image {image + 1}: {j - i} <|image_pad|> tokens{grid}]")
      image += 1
      i = j
      continue
    j = i
    while (j < n and tokens[j] != tok_lib.IMAGE_PAD_ID and bool(trained[j]) == bool(trained[i])):
      j += 1
    text = tok.decode([int(t) for t in tokens[i:j]])
    out.append(f"{open_}{text}{close}" if trained[i] else text)
    i = j
  return "".join(out)


def _image_grids(patch_image_ids: np.ndarray, patch_positions: np.ndarray) -> list[tuple[int, int]]:
  grids = []
  for k in range(1, int(patch_image_ids.max(initial=0)) + 1):
    pos = patch_positions[patch_image_ids == k]
    grids.append((int(pos[:, 1].max()) + 1, int(pos[:, 2].max()) + 1))
  return grids


def describe_bin(b: dict[str, np.ndarray], meta: list[dict], tok: tok_lib.Tokenizer,
                 ansi: bool = False, max_chars: int = 0) -> str:
  seg = b["segment_ids"]
  real = int(np.count_nonzero(seg))
  patches = int(np.count_nonzero(b["patch_image_ids"]))
  grids = _image_grids(b["patch_image_ids"], b["patch_positions"])
  lines = [f"bin: {len(meta)} segments | tokens {real}/{len(seg)} ({real / len(seg):.1%}) | "
           f"trained labels {int(b['loss_mask'].sum())} | patches {patches}/{len(b['patch_image_ids'])} "
           f"({patches / len(b['patch_image_ids']):.1%}) in {len(grids)} images"]
  image_base = 0
  for k in range(1, int(seg.max(initial=0)) + 1):
    idx = np.flatnonzero(seg == k)
    toks = b["tokens"][idx]
    # loss_mask[i] trains targets[i] = token i+1: token j is trained if loss_mask[j-1].
    trained = np.zeros(len(idx), bool)
    trained[1:] = b["loss_mask"][idx[:-1]] > 0
    n_img = int(np.count_nonzero(np.diff(np.concatenate([[0], toks == tok_lib.IMAGE_PAD_ID])) == 1))
    m = meta[k - 1] if k - 1 < len(meta) else {}
    lines.append(f"\n=== segment {k}: slots {idx[0]}..{idx[-1]} ({len(idx)} tokens, "
                 f"{int(trained.sum())} trained, {n_img} images, source_id {int(b['source_ids'][idx[0]])}) "
                 + " ".join(f"{key}={m[key]}" for key in ("episode_id", "step", "stage", "data_source", "source")
                            if key in m))
    text = format_text(tok, toks, trained, grids[image_base:image_base + n_img], ansi)
    image_base += n_img
    if max_chars and len(text) > max_chars:
      head = max_chars // 3  # the system turn is long and alike; keep more of the end
      text = (text[:head] + f" …[{len(text) - max_chars} chars]… "
              + text[len(text) - (max_chars - head):])
    lines.append(text)
  pad = len(seg) - real
  if pad:
    lines.append(f"\n=== padding: {pad} slots")
  return "\n".join(lines)


def describe_sample(sample, tok: tok_lib.Tokenizer, ansi: bool = False) -> str:
  from mage_jax.data import images
  grids = [(im.shape[0] // images.PATCH, im.shape[1] // images.PATCH) for im in sample.images]
  trained = np.asarray(sample.loss_mask, bool)
  head = (f"sample: {len(sample.tokens)} tokens, {int(trained.sum())} trained, {len(grids)} images, "
          f"{sum(h * w for h, w in grids)} patches | " + " ".join(f"{k}={v}" for k, v in sample.meta.items()))
  return head + "\n" + format_text(tok, np.asarray(sample.tokens), trained, grids, ansi)


def main(argv):
  del argv
  tok = tok_lib.load_tokenizer(_TOKENIZER.value)
  path = _PATH.value
  if path.endswith(".jsonl"):
    from mage_jax.data import render, trajectory
    eps = [e for e in trajectory.read_episodes(path) if isinstance(e, trajectory.Episode)]
    if not 0 <= _INDEX.value < len(eps):
      raise app.UsageError(f"{path} has {len(eps)} good episodes; --index={_INDEX.value} is out of range")
    ep = eps[_INDEX.value]
    step = _STEP.value or len(ep.steps)
    report = render.RenderReport()
    sample = render.Renderer(render.RenderConfig(), tok).render_step(ep, step, report)
    if sample is None:
      print(f"episode {ep.id} step {step} was skipped: {report.skipped_items}")
      return
    print(describe_sample(sample, tok, _ANSI.value))
    return
  count = 0
  for i, rec in enumerate(records.read_records(records.shard_paths(path))):
    count += 1
    if i == _INDEX.value:
      print(describe_bin(records.decode_bin(rec), records.decode_meta(rec), tok, _ANSI.value,
                         _MAX_CHARS.value))
      return
  raise app.UsageError(f"{path} has {count} bins; --index={_INDEX.value} is out of range")


if __name__ == "__main__":
  app.run(main)
