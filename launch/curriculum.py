"""Run the Mage-VL-Cowork curriculum: SFT stages 1-4 in order.

  python -m launch.curriculum --config=configs/mage_vl_cowork.py:tiny --workdir=workdirs/demo

Each stage trains in <workdir>/<stage> with its own config file
(`configs.stages.<name>.config`, same arg as this one), starting from the
previous stage's final params (`init.from_dir`); stage 1 starts from
`config.init_from` (an HF dir) or fresh. Completed stages are skipped, an
interrupted one resumes from its checkpoint. Synthetic data (tiny) is made
once in <workdir>/synth and shared. At the end: a per-stage table (steps,
tokens, final loss, FLOPs, wall time) and PNG plots in <workdir>/plots.
"""
from __future__ import annotations

import importlib.util
import json
import os
import time

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Curriculum config file[:arg].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Curriculum directory (resumes).", required=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_stage_config(path: str, arg: str):
  full = path if os.path.isabs(path) else os.path.join(ROOT, path)
  if not os.path.exists(full):
    raise FileNotFoundError(f"stage config {path} does not exist")
  spec = importlib.util.spec_from_file_location(os.path.basename(full)[:-3], full)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.get_config(arg or None)


def apply_overrides(cfg, overrides: str) -> None:
  """'a.b=1;c=x' -> fields (values parsed as JSON where possible)."""
  for item in [x for x in overrides.split(";") if x.strip()]:
    key, value = item.split("=", 1)
    try:
      value = json.loads(value)
    except json.JSONDecodeError:
      pass
    node = cfg
    parts = key.strip().split(".")
    for p in parts[:-1]:
      node = node[p]
    if parts[-1] not in node:
      raise KeyError(f"override {key!r}: no such config field")
    node[parts[-1]] = value


def stage_list(config) -> list[tuple[str, object]]:
  items = sorted(config.stages.items(), key=lambda kv: kv[1].order)
  return [(name, s) for name, s in items if s.enabled]


def run(config, workdir: str) -> list[dict]:
  from mage_jax.train import checkpoint as ckpt_lib
  from mage_jax.train import flops as flops_lib
  from mage_jax.train import loop
  from configs import models as model_presets
  os.makedirs(workdir, exist_ok=True)
  synth_out = os.path.join(os.path.abspath(workdir), "synth")
  previous = config.init_from
  rows = []
  for name, s in stage_list(config):
    cfg = load_stage_config(s.config, config.arg)
    cfg.init.from_dir = previous or ""
    if config.synth.enabled:
      cfg.synth.enabled = True
      for k in ("seed", "episodes", "grounding", "width", "height"):
        cfg.synth[k] = config.synth[k]
      cfg.synth.out = synth_out
    apply_overrides(cfg, s.overrides)
    stage_dir = os.path.join(workdir, name)
    done = os.path.exists(os.path.join(stage_dir, loop.SUMMARY)) and ckpt_lib.has_final_params(stage_dir)
    print(f"=== {name} ({'complete, skipping' if done else 'training'}) -> {stage_dir}", flush=True)
    summary = loop.train(cfg, stage_dir)
    if summary.get("stopped"):
      print(f"{name} stopped early; rerun the same command to resume", flush=True)
      return rows
    model_cfg = model_presets.build_model_config(cfg.model)
    seq = cfg.data.seq_len
    run_flops = flops_lib.stage_flops(model_cfg, bins=summary["steps"] * cfg.data.batch_size,
                                      epochs=1, seq_len=seq)
    paper = (flops_lib.stage_flops(model_cfg, bins=cfg.train.paper_bins,
                                   epochs=cfg.train.num_epochs, seq_len=seq)["flops_6nd"]
             if cfg.train.paper_bins else 0.0)
    rows.append(dict(stage=name, steps=summary["steps"], tokens=summary["tokens"],
                     first_loss=summary["first_loss"], final_loss=summary["final_loss"],
                     flops_6nd=run_flops["flops_6nd"], flops_total=run_flops["flops_total"],
                     paper_flops_6nd=paper, wall_s=summary["wall_s"], eval=summary.get("eval", {})))
    previous = os.path.abspath(stage_dir)
  return rows


def format_table(rows: list[dict]) -> str:
  head = f"{'stage':<20} {'steps':>6} {'trained tok':>12} {'first loss':>10} {'final loss':>10} " \
         f"{'FLOPs 6ND':>10} {'FLOPs all':>10} {'wall s':>8}"
  lines = [head, "-" * len(head)]
  for r in rows:
    lines.append(f"{r['stage']:<20} {r['steps']:>6} {r['tokens']:>12.0f} {r['first_loss']:>10.4f} "
                 f"{r['final_loss']:>10.4f} {r['flops_6nd']:>10.3g} {r['flops_total']:>10.3g} "
                 f"{r['wall_s']:>8.1f}")
  return "\n".join(lines)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  start = time.perf_counter()
  workdir = _WORKDIR.value
  rows = run(_CONFIG.value, workdir)
  print(format_table(rows))
  with open(os.path.join(workdir, "curriculum.json"), "w") as f:
    json.dump(rows, f, indent=1)
  from launch import plot
  for p in plot.plot(workdir):
    print(f"wrote {p}")
  print(f"curriculum wall time {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
  app.run(main)
