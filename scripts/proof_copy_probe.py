"""Copy probe for the learning proof: can a trained model copy parameter values it never saw?

Takes the teacher's terminal episodes, swaps every train word / file name of an instruction for a
held-out one (the run's value pools, W/data/pools.json; the same swap in the think line, Action line and command),
renders them through the SFT data path and prints the target-token NLL of the params given, split
into the tokens of the swapped values and all other target tokens:

  .venv/bin/python scripts/proof_copy_probe.py --params=W/sft --episodes=W/data/teacher/episodes.jsonl

A model that copies values out of the instruction scores near 0 on the value tokens; one that has
only learnt the templates scores about log(number of train values) there (~2-3.5 nats: it guesses
a base name and a digit). This tells in seconds what a held-out evaluation (~20 min here) would:
greedy decoding cannot solve a task whose file name or word it cannot copy. `--params` is a stage
dir with final params (`final_params/`); a run stopped mid-way has none, export one first.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def swap_to_heldout(ep: dict, rng: random.Random, pools: dict | None = None) -> tuple[dict, list[str]] | None:
  """The episode with its instruction's train values replaced by held-out ones, or None.
  `pools`: proof_family.value_pools' dict (the data stage's pools.json); None: the defaults."""
  from mage_jax.agent.tasks import proof_family as pf
  pools = pools or pf.value_pools()
  words, names = set(pools["words"]["train"]), set(pools["file_names"]["train"])
  found = [v for v in words | names if re.search(r"\b" + re.escape(v) + r"\b", ep["instruction"])]
  if not found:
    return None
  new = {}
  for v in sorted(found, key=len, reverse=True):
    pool = pools["file_names"]["heldout"] if v in names else pools["words"]["heldout"]
    new[v] = rng.choice([x for x in pool if x not in new.values()])
  text = json.dumps(ep)
  for v, w in new.items():
    text = re.sub(r"\b" + re.escape(v) + r"\b", w, text)
  return json.loads(text), list(new.values())


def value_positions(tokens: list[int], values: list[str], tok) -> set[int]:
  """Indices of tokens that spell a value (without '.txt'), found as token subsequences."""
  out = set()
  for v in values:
    stem = v[:-4] if v.endswith(".txt") else v
    for form in {tuple(tok.encode(" " + stem)), tuple(tok.encode(stem))}:
      n = len(form)
      for i in range(len(tokens) - n + 1):
        if tuple(tokens[i:i + n]) == form:
          out.update(range(i, i + n))
  return out


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--params", required=True, help="stage dir holding final_params/")
  ap.add_argument("--episodes", required=True, help="teacher episodes.jsonl")
  ap.add_argument("--samples", type=int, default=16)
  ap.add_argument("--config", default="sft", help="configs/proof.py arg of the trained model")
  ap.add_argument("--overrides", default="", help="'a.b=1;c=x': the run's --config.* overrides")
  ap.add_argument("--pools", default="", help="the data stage's pools.json (default: the one two folders "
                  "above --episodes, W/data/pools.json, if there; else proof_family's default pools)")
  args = ap.parse_args()
  pools_path = args.pools or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.episodes))), "pools.json")
  pools = None
  if os.path.exists(pools_path):
    with open(pools_path) as f:
      pools = json.load(f)
  elif args.pools:
    raise SystemExit(f"--pools={args.pools}: no such file")
  import jax
  import jax.numpy as jnp
  import numpy as np
  from configs import proof
  from mage_jax.data import render, trajectory as tr
  from mage_jax.train import run_setup as setup, step as step_lib
  from mage_jax.train.curriculum import apply_overrides
  cfg = proof.get_config(args.config)
  apply_overrides(cfg, args.overrides)
  cfg.init.from_dir = args.params
  mesh = setup.make_mesh(cfg)
  t = setup.build_trainer(cfg, tempfile.mkdtemp(prefix="copy_probe_"), mesh, 1, cfg.data)
  model = step_lib.merge_model(t.graphdef, setup.initial_state(t).params, t.rest)
  renderer = render.Renderer(render.RenderConfig.from_config(cfg.data.render))
  rng = random.Random(0)

  @jax.jit
  def logp(tokens, positions, segment_ids):
    h = step_lib.model_hidden(model, {"tokens": tokens, "positions": positions, "segment_ids": segment_ids})
    w = model.lm_head_kernel()
    return jax.nn.log_softmax((h @ (w if w.shape[0] == h.shape[-1] else w.T)).astype(jnp.float32), -1)

  value_nll, other_nll, n = [], [], 0
  with open(args.episodes) as f:
    for line in f:
      d = json.loads(line)
      if d.get("meta", {}).get("kind") != "terminal":
        continue   # GUI values are (colour, slot) pairs: read off the screen, not copied
      swapped = swap_to_heldout(d, rng, pools)
      if swapped is None:
        continue
      ep = tr.episode_from_dict(swapped[0], root=os.path.dirname(os.path.abspath(args.episodes)))
      s = next(iter(render.render_episodes([ep], renderer)))
      tokens = [int(x) for x in s.tokens]
      bucket = 1 << (len(tokens) - 1).bit_length()
      pad = np.zeros((1, bucket), np.int32)
      toks, seg, pos = pad.copy(), pad.copy(), pad.copy()
      toks[0, :len(tokens)], seg[0, :len(tokens)], pos[0, :len(tokens)] = tokens, 1, np.arange(len(tokens))
      lp = np.asarray(logp(jnp.asarray(toks), jnp.asarray(pos), jnp.asarray(seg)))[0]
      vals = value_positions(tokens, swapped[1], renderer.tok)
      for i in range(1, len(tokens)):
        if s.loss_mask[i]:
          (value_nll if i in vals else other_nll).append(-lp[i - 1, tokens[i]])
      n += 1
      if n >= args.samples:
        break
  if not value_nll:
    raise SystemExit(f"{args.episodes}: no terminal episode with a train value in its instruction")
  print(f"{n} samples with held-out values: target NLL {np.mean(value_nll):.3f} nats on the "
        f"{len(value_nll)} value tokens (median {np.median(value_nll):.3f}), {np.mean(other_nll):.3f} "
        f"on the {len(other_nll)} other target tokens")


if __name__ == "__main__":
  main()
