"""Why file_and_click's file name is not copied (issue 36, docs/results.md "Issue 36, sessions 30-32").

Teacher-forced NLL of the held-out file names and words in a finished proof run's held-out teacher
episodes (data/teacher_heldout), under one stage's params, for:
  file_and_click           as the data stage wrote them (instruction, then the screenshot)
  file_and_click_noshot    the first screenshot removed (the name then sits where make_file's does)
  file_and_click_worded    the first think in make_file's words ("The file X must hold the word Y ...")
  make_file                the terminal template that does copy its names
  make_file_shot           make_file with the hybrid episode's first screenshot (and tool set) in its first turn
  make_file_text           make_file_shot with text of the screenshot's length in the screenshot's place
Each line splits the value tokens into the first one of each sample (the one no earlier copy in the
response can help) and the rest: after a screenshot the file name's first token is the one not copied.

  PYTHONPATH=. python experiments/stem_probe.py /abs/workdirs/proof_s0 sft   # or base/hf, vision, rl
  PYTHONPATH=. python experiments/stem_probe.py /abs/workdirs/proof_s0 sft make_file_shot,make_file_text
"""
import dataclasses
import json
import os
import re
import sys

import ml_collections
import numpy as np

from configs import proof
from mage_jax.data import render, trajectory
from mage_jax.runs import curriculum as cur
from mage_jax.tasks import proof_family as fam
from mage_jax.train import copy_probe
from mage_jax.train import run_setup as setup

W, STAGE = sys.argv[1], sys.argv[2]
ONLY = sys.argv[3].split(",") if len(sys.argv) > 3 else None   # variants to run (default: all)
TEACHER = f"{W}/data/teacher_heldout"
OUT = os.path.join(W, "stem_probe")
TEXT_BLOCK = " ".join(["A window with a red button and a blue button is on the screen ."] * 17)


def variants() -> dict[str, list[dict]]:
  hybrid = [json.loads(line) for line in open(f"{TEACHER}/hybrid.jsonl")]
  noshot, worded = json.loads(json.dumps(hybrid)), json.loads(json.dumps(hybrid))
  for e in noshot:
    e["steps"][0]["observation"] = {"screenshot": None, "text": None}
  for e in worded:
    name, word = re.search(r"named (\S+) holding the word (\S+)", e["instruction"]).groups()
    e["steps"][0]["think"] = f"The file {name} must hold the word {word} , so I echo it into the file."
  make_file = [json.loads(line) for line in open(f"{TEACHER}/terminal.jsonl") if "proof_make_file_" in line]
  shot = json.loads(json.dumps(make_file))
  for e, h in zip(shot, hybrid):
    e["steps"][0]["observation"], e["tools"] = h["steps"][0]["observation"], h["tools"]
  # the screenshot's place held by text of about its length (242 image tokens): is it the distance or
  # the image block that the first token is not copied across?
  text = json.loads(json.dumps(shot))
  for e in text:
    e["steps"][0]["observation"] = {"screenshot": None, "text": TEXT_BLOCK}
  return {"file_and_click": hybrid, "file_and_click_noshot": noshot, "file_and_click_worded": worded,
          "make_file": make_file, "make_file_shot": shot[:len(hybrid)], "make_file_text": text[:len(hybrid)]}


def first_only(segments: list, first: bool) -> list:
  """Each segment's first value token alone (first=True) or its other value tokens."""
  out = []
  for s in segments:
    idx = np.flatnonzero(s.loss_mask)
    mask = np.zeros_like(s.loss_mask)
    mask[idx[:1] if first else idx[1:]] = True
    if mask.any():
      out.append(dataclasses.replace(s, loss_mask=mask))
  return out


def main() -> None:
  os.makedirs(OUT, exist_ok=True)
  if not os.path.lexists(f"{OUT}/shots"):   # the episodes' screenshot paths are relative
    os.symlink(f"{TEACHER}/shots", f"{OUT}/shots")
  config = proof.get_config(None)
  stage = config.stages.eval_sft
  stage.overrides = (f"proof.heldout_suite={W}/data/heldout_suite;proof.modes=t1;"
                     f"model.compact_vocab={W}/base/vocab.json")
  cfg = cur.stage_config(config, stage, f"{W}/{STAGE}", f"{W}/synth")
  c = ml_collections.ConfigDict(cfg.to_dict())
  c.init.from_dir = f"{W}/{STAGE}"
  t = setup.build_trainer(c, os.path.join(OUT, "trainer"), setup.make_mesh(c), 1, c.data)
  params = setup.initial_state(t).params
  pools = fam.value_pools(cfg.get("family"))
  render_cfg = render.RenderConfig.from_config(cfg.data.render)
  for name, rows in variants().items():
    if ONLY and name not in ONLY:
      continue
    path = f"{OUT}/{name}.jsonl"
    with open(path, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in rows)
    for kind in ("file_names", "words"):
      segments, _ = copy_probe.probe_segments(trajectory.read_episodes(path), pools[kind]["heldout"], render_cfg,
                                              cfg.data.seq_len, cfg.data.patch_budget)
      fig = copy_probe.measure(t, params, segments, cfg.step.loss_chunk_size)
      head = copy_probe.measure(t, params, first_only(segments, True), cfg.step.loss_chunk_size)
      rest = copy_probe.measure(t, params, first_only(segments, False), cfg.step.loss_chunk_size)
      # by step: the first response copies from the instruction; later ones can copy the earlier
      # responses, and a base has never seen a second assistant turn (session 33)
      steps = sorted({s.meta["step"] for s in segments})
      by_step = {k: copy_probe.measure(t, params, first_only([s for s in segments if s.meta["step"] == k], True),
                                       cfg.step.loss_chunk_size) for k in steps}
      print(f"{STAGE} {name:24s} {kind:10s} NLL {fig['nll']:.3f} nats, accuracy {fig['accuracy']:.3f} "
            f"({fig['value_tokens']} tokens, first trained token at {int(segments[0].loss_mask.argmax())}); "
            f"each sample's first value token {head['nll']:.3f} ({head['value_tokens']}), the rest "
            f"{rest['nll']:.3f}; first value token by step "
            + ", ".join(f"{k}: {v['nll']:.3f} ({v['value_tokens']})" for k, v in by_step.items()), flush=True)


if __name__ == "__main__":
  main()
