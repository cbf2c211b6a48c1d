"""Evaluation during training.

- Held-out loss per data source: packed held-out shards (`eval.heldout_dir`,
  one sub-folder per source like training) through the jitted eval step;
  per-source token-mean NLL and accuracy from `source_ids`.
- Click accuracy on grounding episodes (`eval.click_jsonl`; the paper's
  stage-1 measure): render the prompt of the episode's single step, greedy
  generate, parse the tool call (mage_jax.agent.parsing) and count a hit when
  the predicted [x, y] (0..999 units) falls inside `meta.target_box`
  ([x0, y0, x1, y1] in the same units, inclusive).
"""
from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np


def heldout_loss(t: Any, params: Any, config: ml_collections.ConfigDict) -> dict[str, float]:
  from mage_jax.data import pipeline
  from mage_jax.data.config import source_names
  from mage_jax.train import step as step_lib
  d = ml_collections.ConfigDict(t.data.to_dict())
  d.packed_dir = config.eval.heldout_dir
  for n in d.sources.keys():
    d.sources[n].packed_dir = ""
  d.num_epochs = 1
  d.worker_count = 0
  names = source_names(d)
  present = [n for n in names if os.path.isdir(os.path.join(d.packed_dir, n))]
  if not present:
    return {}
  for n in names:
    if n not in present:
      del d.sources[n]
  it = pipeline.make_iterator(d)
  scfg = step_lib.StepConfig(**config.step.to_dict())
  fn = jax.jit(lambda p, b: step_lib.eval_step(t.graphdef, t.rest, scfg, p, b, len(names)))
  nll = np.zeros(len(names))
  correct = np.zeros(len(names))
  tokens = np.zeros(len(names))
  for _ in range(config.eval.num_batches):
    try:
      batch = next(it)
    except StopIteration:
      break
    # Held-out source ids follow the held-out config's order; map them to the training order.
    batch = dict(batch)
    sub = source_names(d)
    remap = np.array([names.index(n) for n in sub] + [-1])
    batch["source_ids"] = np.where(batch["source_ids"] >= 0, remap[batch["source_ids"]], -1)
    with jax.set_mesh(t.mesh):
      out = jax.device_get(fn(params, pipeline.to_global(batch, t.mesh, tuple(d.data_axes))))
    nll += out["nll_sum"]
    correct += out["correct_sum"]
    tokens += out["tokens"]
  res = {}
  for i, n in enumerate(names):
    if tokens[i] > 0:
      res[f"heldout_loss/{n}"] = float(nll[i] / tokens[i])
      res[f"heldout_accuracy/{n}"] = float(correct[i] / tokens[i])
  return res


def point_in_box(point: Any, box: Any) -> bool:
  if not isinstance(point, (list, tuple)) or len(point) != 2:
    return False
  x, y = point
  return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def predicted_click(text: str) -> list[int] | None:
  """[x, y] of a click in the model's reply, via the agent parser."""
  from mage_jax.agent import parsing
  r = parsing.parse_response(text)
  if r.ok and r.arguments and "coordinate" in r.arguments:
    return list(r.arguments["coordinate"])
  return None


def click_accuracy(t: Any, params: Any, config: ml_collections.ConfigDict,
                   jsonl: str) -> dict[str, float]:
  from mage_jax.data import images, render, trajectory
  from mage_jax.data.tokenizer import load_tokenizer
  from mage_jax.models import sampling
  from mage_jax.train.state import merge_model
  rcfg = render.RenderConfig.from_config(t.data.render.to_dict())
  renderer = render.Renderer(rcfg)
  tok = load_tokenizer(rcfg.tokenizer_path)
  episodes = [e for e in trajectory.read_all([jsonl]) if "target_box" in e.meta][
      :config.eval.click_samples]
  prompts = []
  for ep in episodes:
    s = renderer.render_step(ep, 1)
    if s is None:
      continue
    first = int(np.argmax(s.loss_mask))
    rows = [images.patchify(im) for im in s.images]
    prompts.append((s.tokens[:first], rows, ep.meta["target_box"]))
  if not prompts:
    return {}
  model = merge_model(t.graphdef, params, t.rest)
  max_len = max(len(p[0]) for p in prompts)
  budget = t.data.patch_budget
  hits = parsed = 0
  for tokens, rows, box in prompts:
    prompt = np.full((1, max_len), 151643, np.int32)
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
                            prompt_lengths=np.array([len(tokens)], np.int32), greedy=True, **vision)
    n = int(out.lengths[0])
    text = tok.decode(np.asarray(out.tokens[0, :n]).tolist())
    point = predicted_click(text)
    parsed += point is not None
    hits += point is not None and point_in_box(point, box)
  return {"click_accuracy": hits / len(prompts), "click_parsed": parsed / len(prompts),
          "click_samples": float(len(prompts))}


def run_all(t: Any, params: Any, config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
  res: dict[str, float] = {}
  if config.eval.heldout_dir:
    res.update(heldout_loss(t, params, config))
  if config.eval.click_jsonl:
    path = config.eval.click_jsonl
    if not os.path.isabs(path):
      from mage_jax.train.loop import synth_dir
      base = synth_dir(config, workdir) if config.get("synth") and config.synth.enabled else os.getcwd()
      path = os.path.join(base, path)
    res.update(click_accuracy(t, params, config, path))
  if res:
    print("eval: " + " ".join(f"{k}={v:.4f}" for k, v in sorted(res.items())), flush=True)
  return res
