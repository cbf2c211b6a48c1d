"""Evaluation during training.

- Held-out loss per data source: packed held-out shards (`eval.heldout_dir`,
  one sub-folder per source like training), each source on its own through
  the jitted eval step; token-mean NLL and accuracy per source.
- Click accuracy on grounding episodes (`eval.click_jsonl`; the paper's
  stage-1 measure): render the prompt of the episode's single step, greedy
  generate, parse the tool call (mage_jax.actions.parsing) and count a hit when
  the predicted [x, y] (0..999 units) falls inside `meta.target_box`
  ([x0, y0, x1, y1] in the same units, inclusive; synthetic data), or, for
  imported benchmarks (ScreenSpot-v2, OSWorld-G: `meta.grounding`), by the
  importers' pixel-space test (`click_hit`). Per-split tables: launch.eval_grounding.
  Episodes that list every button (`meta.button_boxes`: the proof's click screens) add
  click_on_button (the click lands on some button) and click_target_share (hits among those).
"""
from __future__ import annotations

import itertools
import os
from typing import Any

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np

from mage_jax.actions import parsing
from mage_jax.data import images, render, trajectory
from mage_jax.data import pipeline, records
from mage_jax.data.config import source_names
from mage_jax.data.importers import grounding
from mage_jax.data.tokenizer import load_tokenizer
from mage_jax.models import sampling
from mage_jax.train import step as step_lib
from mage_jax.train.state import merge_model


def _heldout_batches(paths: list[str], max_bins: int, batch_size: int):
  """Host batches [batch_size, ...] of this process's share of the first `max_bins`
  bins of `paths`; the last batch is padded with empty bins (no trained tokens),
  so every bin is evaluated exactly once whatever the count."""
  pc, pi = jax.process_count(), jax.process_index()
  per = batch_size // pc
  records_ = itertools.islice(records.read_records(paths), max_bins)
  mine = (r for i, r in enumerate(records_) if i % pc == pi)
  empty = None
  while True:
    rows = [records.decode_bin(r) for r in itertools.islice(mine, per)]
    # Every process runs the same number of batches: stop only when all are out of bins.
    if not _any_process(bool(rows)):
      return
    if empty is None and rows:
      empty = {k: np.zeros_like(v) for k, v in rows[0].items()}
      empty["source_ids"] = np.full_like(rows[0]["source_ids"], -1)
    if empty is None:  # this process has no bins at all but others do
      raise ValueError(f"held-out shards {paths[:1]}...: fewer bins than processes")
    rows += [empty] * (per - len(rows))
    yield {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def _any_process(flag: bool) -> bool:
  return bool(np.any(_gather_processes(flag)))


def _sum_processes(x: float) -> float:
  return float(np.sum(_gather_processes(x)))


def _gather_processes(x: Any) -> np.ndarray:
  """[process_count] of a host scalar (just [x] in one process)."""
  if jax.process_count() == 1:
    return np.asarray([x])
  return np.asarray(multihost_utils.process_allgather(np.asarray(x)))


def heldout_root(t: Any, config: ml_collections.ConfigDict) -> str:
  """eval.heldout_dir, else the held-out episodes the trainer packed (data.heldout_dir)."""
  return config.eval.heldout_dir or t.data.get("heldout_dir", "") or ""


def heldout_loss(t: Any, params: Any, config: ml_collections.ConfigDict) -> dict[str, float]:
  """Per training source with a <eval.heldout_dir>/<source>/ folder of packed shards:
  token-mean NLL and accuracy over its first eval.num_batches × batch_size bins.

  Sources are evaluated one at a time and every trained token of a source's
  shards counts for that source, whatever source ids the held-out packing
  stored, so the result is exact per source (not a sample of a mixture)."""
  names = source_names(t.data)
  scfg = step_lib.StepConfig(**config.step.to_dict())
  fn = t.jitted.setdefault("heldout", jax.jit(
      lambda p, b: step_lib.eval_step(t.graphdef, t.rest, scfg, p, b, 1)))
  max_bins = config.eval.num_batches * t.data.batch_size
  res: dict[str, float] = {}
  for name in names:
    d = os.path.join(heldout_root(t, config), name)
    if not os.path.isdir(d):
      continue
    try:
      paths = records.shard_paths(d)
    except (FileNotFoundError, ValueError):  # every held-out sample was skipped when packing
      paths = []
    nll = correct = tokens = 0.0
    bins = 0
    for batch in _heldout_batches(paths, max_bins, t.data.batch_size) if paths else ():
      bins += int(np.count_nonzero(batch["segment_ids"].max(axis=1)))
      batch["source_ids"] = np.where(batch["segment_ids"] > 0, 0, -1).astype(np.int32)
      with jax.set_mesh(t.mesh):
        out = jax.device_get(fn(params, t.device_batch(batch)))
      nll += float(out["nll_sum"][0])
      correct += float(out["correct_sum"][0])
      tokens += float(out["tokens"][0])
    # Each process counted the bins of its own host batches; nll/tokens came out of
    # the jitted step already summed over every process.
    res[f"heldout_bins/{name}"] = _sum_processes(bins) if paths else 0.0
    if tokens > 0:
      res[f"heldout_loss/{name}"] = nll / tokens
      res[f"heldout_accuracy/{name}"] = correct / tokens
  return res


def point_in_box(point: Any, box: Any) -> bool:
  if not isinstance(point, (list, tuple)) or len(point) != 2:
    return False
  x, y = point
  return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def click_hit(ep: Any, text: str) -> tuple[bool, bool]:
  """(parsed, hit) of a reply to a grounding episode: synthetic ones (meta.target_box, 0..999
  units) test the predicted [x, y] in the box; imported ones (meta.grounding: ScreenSpot-v2,
  OSWorld-G, generic) use the importers' pixel-space test (box, polygon or refusal)."""
  r = parsing.parse_response(text)
  if not r.ok:
    return False, False
  if "target_box" in ep.meta:
    point = (r.arguments or {}).get("coordinate")
    return point is not None, point is not None and point_in_box(point, ep.meta["target_box"])
  return True, grounding.hits(ep.meta["grounding"], r.name, r.arguments)


def click_on_button(ep: Any, text: str) -> bool | None:
  """Whether a reply's click lands on any button of the screen (meta.button_boxes: the target's and
  the others'); None for an episode without them. Beside click_hit it tells a model that finds
  buttons and picks one at random (on a button often, on the target 1 time in n) from one that
  binds the instruction to its button."""
  if "button_boxes" not in ep.meta:
    return None
  r = parsing.parse_response(text)
  point = (r.arguments or {}).get("coordinate") if r.ok else None
  return point is not None and any(point_in_box(point, b) for b in ep.meta["button_boxes"])


def click_accuracy(t: Any, params: Any, config: ml_collections.ConfigDict,
                   jsonl: str) -> dict[str, float]:
  rcfg = render.RenderConfig.from_config(t.data.render.to_dict())
  renderer = render.Renderer(rcfg)
  tok = load_tokenizer(rcfg.tokenizer_path)
  episodes = [e for e in trajectory.read_all([jsonl])
              if "target_box" in e.meta or isinstance(e.meta.get("grounding"), dict)][:config.eval.click_samples]
  vocab = getattr(t, "vocab", None)   # a compact vocabulary: prompt ids in, rows out (mapped back)
  prompts = []
  for ep in episodes:
    s = renderer.render_step(ep, 1)
    if s is None:
      continue
    first = int(np.argmax(s.loss_mask))
    rows = [images.patchify(im) for im in s.images]
    tokens = s.tokens[:first] if vocab is None else vocab.to_compact(s.tokens[:first], strict=False)
    prompts.append((tokens, rows, ep))
  if not prompts:
    return {}
  model = merge_model(t.graphdef, params, t.rest)
  max_len = max(len(p[0]) for p in prompts)
  budget = t.data.patch_budget
  hits = parsed = 0
  on_button = []   # click_on_button of the episodes that list their buttons
  for tokens, rows, ep in prompts:
    pad_id, eos_id = sampling.PAD_ID, sampling.IM_END_ID
    if vocab is not None:
      pad_id, eos_id = (int(vocab.to_compact(np.array([i]), strict=False)[0]) for i in (pad_id, eos_id))
    prompt = np.full((1, max_len), pad_id, np.int32)
    prompt[0, :len(tokens)] = tokens
    patches = np.zeros((1, budget, 768), np.uint8)
    ids = np.zeros((1, budget), np.int32)
    pos = np.zeros((1, budget, 3), np.int32)
    off = 0
    for i, (r, p) in enumerate(rows):
      patches[0, off:off + len(r)], pos[0, off:off + len(r)], ids[0, off:off + len(r)] = r, p, i + 1
      off += len(r)
    vision = {}
    if hasattr(model, "visual"):
      vision = dict(patch_rows=jnp.asarray(patches), patch_image_ids=jnp.asarray(ids),
                    patch_positions=jnp.asarray(pos))
    out = sampling.generate(model, prompt, config.eval.max_new_tokens,
                            prompt_lengths=np.array([len(tokens)], np.int32), greedy=True,
                            eos_id=eos_id, pad_id=pad_id, **vision)
    n = int(out.lengths[0])
    ids = np.asarray(out.tokens[0, :n])
    if vocab is not None:   # the rest row stands for no one id: an unparseable reply
      ids = vocab.to_full(ids)
      ids = ids[:int(np.argmax(ids < 0))] if (ids < 0).any() else ids
    text = tok.decode(ids.tolist())
    ok, hit = click_hit(ep, text)
    parsed += ok
    hits += hit
    on = click_on_button(ep, text)
    if on is not None:
      on_button.append((on, hit))
  out = {"click_accuracy": hits / len(prompts), "click_parsed": parsed / len(prompts),
         "click_samples": float(len(prompts))}
  if on_button:   # and the target's share of the clicks that hit a button (random pick: 1 / buttons)
    n_on = sum(on for on, _ in on_button)
    out["click_on_button"] = n_on / len(on_button)
    out["click_target_share"] = sum(hit for _, hit in on_button) / n_on if n_on else 0.0
  return out


def run_all(t: Any, params: Any, config: ml_collections.ConfigDict, data_root: str
            ) -> dict[str, float]:
  """Every configured evaluation; a relative eval.click_jsonl is under `data_root`."""
  res: dict[str, float] = {}
  if heldout_root(t, config):
    res.update(heldout_loss(t, params, config))
  if config.eval.click_jsonl:
    res.update(click_accuracy(t, params, config, os.path.join(data_root, config.eval.click_jsonl)))
  if res:
    print("eval: " + " ".join(f"{k}={v:.4f}" for k, v in sorted(res.items())), flush=True)
  return res
