"""The Mage-VL-Cowork curriculum: SFT stages in order (the logic of launch.curriculum).

Each stage trains in <workdir>/<stage> with its own config file
(`config.stages.<name>.config`, same arg as the curriculum's), starting from
the previous stage's final params (`init.from_dir`); stage 1 starts from
`config.init_from` (an HF dir) or fresh. A completed stage (summary.json +
final params) is not rebuilt: its summary is read back, so a rerun resumes at
the first unfinished stage. Synthetic data (tiny) is made once in
<workdir>/synth and shared by every stage.

Shared stages (`config.stages.<name>.shared`, with `config.shared_dir` set): a stage that does not
depend on the run's seed (the learning proof's teacher data and vision stage) runs at
`config.shared_seed` in <shared_dir>/<name>-<key>, where the key hashes its resolved config (the
workdir written as {workdir}) and the mage_jax source; <workdir>/<name> is a link to it. Another
seed's run with the same config and code finds it complete and reuses it.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os

import ml_collections

from mage_jax.models.config import build_model_config
from mage_jax.rl import loop as rl_loop
from mage_jax.runs.config_files import load_config_module
from mage_jax.runs.sweep import apply_point
from mage_jax.train import checkpoint as ckpt_lib
from mage_jax.train import flops as flops_lib
from mage_jax.train import loop
from mage_jax.train import metrics as metrics_lib
from mage_jax.train import run_setup
from mage_jax.train.run_setup import SUMMARY


def load_stage_config(path: str, arg: str) -> ml_collections.ConfigDict:
  return load_config_module(path).get_config(arg or None)


def is_step(cfg: ml_collections.ConfigDict) -> bool:
  """A step stage (data, evaluation, results), not a training one."""
  return isinstance(cfg.get("job"), str)


def run_step(cfg: ml_collections.ConfigDict, stage_dir: str, previous: str, workdir: str) -> dict:
  module, _, fn = cfg.job.partition(":")
  return getattr(importlib.import_module(module), fn)(cfg, stage_dir, previous, workdir)


def check_step(cfg: ml_collections.ConfigDict) -> None:
  """The step job module's own `check_config(cfg)`, when it has one (raises naming the field)."""
  check = getattr(importlib.import_module(cfg.job.partition(":")[0]), "check_config", None)
  if check is not None:
    check(cfg)


def apply_overrides(cfg: ml_collections.ConfigDict, overrides: str) -> None:
  """'a.b=1;c=x' -> fields (values parsed as JSON where possible); unknown fields raise."""
  point = {}
  for item in [x for x in overrides.split(";") if x.strip()]:
    key, value = item.split("=", 1)
    try:
      value = json.loads(value)
    except json.JSONDecodeError:
      pass
    point[key.strip()] = value
  apply_point(cfg, point)


def stage_list(config: ml_collections.ConfigDict) -> list[tuple[str, ml_collections.ConfigDict]]:
  items = sorted(config.stages.items(), key=lambda kv: kv[1].order)
  return [(name, s) for name, s in items if s.enabled]


def stage_config(config: ml_collections.ConfigDict, stage: ml_collections.ConfigDict,
                 previous: str, synth_out: str) -> ml_collections.ConfigDict:
  """One stage's resolved config: its file + shared synth settings + overrides."""
  cfg = load_stage_config(stage.config, stage.get("arg", config.arg))
  if "init" in cfg:
    cfg.init.from_dir = previous or ""
  if "seed" in config:   # one seed: model init, data order, RL sampling
    seed = config.get("shared_seed", 0) if is_shared(config, stage) else config.seed
    cfg.seed = seed
    if "data" in cfg and "shuffle_seed" in cfg.data:
      cfg.data.shuffle_seed = seed
  if "family" in config and "family" in cfg:   # one set of task values for every stage that has one
    for k, v in config.family.items():
      cfg.family[k] = ml_collections.ConfigDict(v.to_dict()) if isinstance(v, ml_collections.ConfigDict) else v
  if "vision_tower" in config and "model" in cfg and "vision" in cfg.model:
    # one vision tower for every stage that builds one (vision, SFT, RL, eval): a stage's params
    # load into the next stage's model, so its shape is set once here, not in each stage's overrides
    for k, v in config.vision_tower.items():
      if k not in cfg.model.vision:
        raise run_setup.ConfigError(f"config.vision_tower.{k}: not a field of the vision tower "
                                    f"(fields: {', '.join(sorted(cfg.model.vision))})")
      cfg.model.vision[k] = v
  if config.get("compile_cache", False):
    cfg.compile_cache_dir = os.path.join(os.path.dirname(synth_out), "jax_cache")
  if config.synth.enabled and "synth" in cfg:  # RL stages have no synthetic SFT data
    cfg.synth.enabled = True
    for k in ("seed", "episodes", "grounding", "width", "height"):
      cfg.synth[k] = config.synth[k]
    cfg.synth.out = synth_out
  workdir = os.path.dirname(synth_out)
  apply_overrides(cfg, stage.overrides.replace("{workdir}", workdir))
  return cfg


def is_shared(config: ml_collections.ConfigDict, stage: ml_collections.ConfigDict) -> bool:
  return bool(stage.get("shared", False) and config.get("shared_dir", ""))


def _source_hash() -> str:
  """sha256 of every .py file of the mage_jax package (paths and bytes)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  h = hashlib.sha256()
  for dirpath, dirnames, files in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
    for f in sorted(files):
      if f.endswith(".py"):
        path = os.path.join(dirpath, f)
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as fh:
          h.update(fh.read())
  return h.hexdigest()


def _strings(tree) -> list[str]:
  if isinstance(tree, dict):
    return [s for v in tree.values() for s in _strings(v)]
  if isinstance(tree, (list, tuple)):
    return [s for v in tree for s in _strings(v)]
  return [p for p in str(tree).split(",") if p] if isinstance(tree, str) else []


def shared_stage_dir(config: ml_collections.ConfigDict, name: str, cfg: ml_collections.ConfigDict,
                     workdir: str) -> str:
  """<shared_dir>/<name>-<key> for a shared stage, linked as <workdir>/<name> (returned). A real
  folder already at <workdir>/<name> (a run from before sharing) is kept and used as it is."""
  link = os.path.join(workdir, name)
  if os.path.isdir(link) and not os.path.islink(link):
    print(f"{name}: {link} is a folder of this run, not a link: used as it is, not shared", flush=True)
    return link
  flat = cfg.to_dict()
  text = json.dumps(flat, sort_keys=True, default=str).replace(workdir, "{workdir}")
  # what the stage reads: a path in its config that exists now (the data stage's files, the base)
  # counts by where it really lies (a shared or cached folder's name carries its own key); this
  # run's own folders (the compile cache) do not
  real = {os.path.realpath(v) for v in _strings(flat) if v.startswith("/") and os.path.lexists(v)}
  inputs = sorted(r for r in real if not r.startswith(os.path.realpath(workdir) + os.sep))
  key = hashlib.sha256((text + json.dumps(inputs) + _source_hash()).encode()).hexdigest()[:12]
  real = os.path.join(os.path.abspath(config.shared_dir), f"{name}-{key}")
  os.makedirs(real, exist_ok=True)
  if os.path.lexists(link):
    os.remove(link)
  os.symlink(real, link)
  return link


def check_stages(config: ml_collections.ConfigDict, synth_out: str) -> None:
  """Every enabled stage's config, before the first stage trains: a bad field in stage 5
  fails now (ConfigError naming it), not after hours of SFT."""
  for name, s in stage_list(config):
    try:
      cfg = stage_config(config, s, "", synth_out)
    except run_setup.ConfigError:
      raise
    except (KeyError, ValueError) as e:  # an unknown field, an item without '='
      raise run_setup.ConfigError(f"config.stages.{name}.overrides={s.overrides!r}: "
                                  f"{e.args[0]}") from None
    try:
      if is_step(cfg):
        check_step(cfg)
        continue
      if "rl" in cfg:
        rl_loop.validate(cfg)
      else:
        run_setup.check_config(cfg, ())
    except (run_setup.ConfigError, ValueError) as e:
      raise run_setup.ConfigError(f"stage {name}: {e}") from None


def run(config: ml_collections.ConfigDict, workdir: str) -> list[dict]:
  """Train every enabled stage in order; returns one table row per finished stage."""
  synth_out = os.path.join(os.path.abspath(workdir), "synth")
  check_stages(config, synth_out)
  os.makedirs(workdir, exist_ok=True)
  previous = config.init_from
  rows = []
  for name, s in sorted(config.stages.items(), key=lambda kv: kv[1].order):
    if not s.enabled:
      # A disabled training stage that finished in this workdir still feeds the next one: with
      # `sft.enabled=False` to run only rl, rl once started from random init (session 22).
      finished = os.path.abspath(os.path.join(workdir, name))
      if ckpt_lib.has_final_params(finished):
        previous = finished
        print(f"=== {name} (disabled; its finished params feed the next stages) -> {finished}", flush=True)
      continue
    cfg = stage_config(config, s, previous, synth_out)
    stage_dir = os.path.join(workdir, name)
    if is_shared(config, s):
      stage_dir = shared_stage_dir(config, name, cfg, os.path.abspath(workdir))
    summary_path = os.path.join(stage_dir, SUMMARY)
    step = is_step(cfg)
    done = os.path.exists(summary_path) and (step or ckpt_lib.has_final_params(stage_dir))
    print(f"=== {name} ({'complete, skipping' if done else 'running' if step else 'training'}) "
          f"-> {stage_dir}", flush=True)
    if step:
      if done:
        with open(summary_path) as f:
          summary = json.load(f)
      else:
        os.makedirs(stage_dir, exist_ok=True)
        summary = run_step(cfg, os.path.abspath(stage_dir), previous, os.path.abspath(workdir))
        with open(summary_path, "w") as f:
          json.dump(summary, f, indent=1)
      rows.append(dict(stage=name, kind="step", wall_s=summary.get("wall_s", 0.0),
                       summary=summary.get("row", {})))
      continue
    if done:
      with open(summary_path) as f:
        summary = json.load(f)
    elif "rl" in cfg:
      summary = rl_loop.train_rl(cfg, stage_dir)
    else:
      summary = loop.train(cfg, stage_dir)
    if summary.get("stopped"):
      print(f"{name} stopped early; rerun the same command to resume", flush=True)
      return rows
    if "rl" in cfg:
      rows.append(rl_row(name, summary, stage_dir))
      previous = os.path.abspath(stage_dir)
      continue
    model_cfg = build_model_config(cfg.model)
    seq = cfg.data.seq_len
    # FLOPs of the batches trained (real tokens, segments, images) when the summary has them,
    # else full bins of seq_len without images.
    run_flops = ({f"flops_{k}": v for k, v in summary["flops"].items()} if summary.get("flops")
                 else flops_lib.stage_flops(model_cfg, bins=summary["steps"] * cfg.data.batch_size,
                                            epochs=1, seq_len=seq))
    paper = (flops_lib.stage_flops(model_cfg, bins=cfg.train.paper_bins,
                                   epochs=cfg.train.num_epochs, seq_len=seq)["flops_6nd"]
             if cfg.train.paper_bins else 0.0)
    rows.append(dict(stage=name, steps=summary["steps"], tokens=summary["tokens"],
                     first_loss=summary["first_loss"], final_loss=summary["final_loss"],
                     flops_6nd=run_flops["flops_6nd"], flops_total=run_flops["flops_total"],
                     paper_flops_6nd=paper, wall_s=summary["wall_s"], eval=summary.get("eval", {})))
    previous = os.path.abspath(stage_dir)
  return rows


def rl_row(name: str, summary: dict, stage_dir: str) -> dict:
  """A table row for an RL stage: updates, policy tokens trained, first/last mean reward."""
  tokens = sum(r.get("policy_tokens", 0.0) for r in metrics_lib.read_metrics(stage_dir) if "step" in r)
  return dict(stage=name, kind="rl", steps=summary["updates"], tokens=tokens,
              reward_first=summary.get("reward_mean_first"), reward_last=summary.get("reward_mean_last"),
              wall_s=summary["wall_s"], eval={})


def heldout_mean(row: dict) -> float | None:
  """Mean over sources of a stage's held-out loss (None when it had no held-out set)."""
  losses = [v for k, v in (row.get("eval") or {}).items() if k.startswith("heldout_loss/")]
  return sum(losses) / len(losses) if losses else None


def format_table(rows: list[dict]) -> str:
  """Per-stage table: steps, trained tokens, first/final train loss, held-out loss
  (mean over sources), FLOPs of the trained batches (6·N·D over LM params, the
  paper's accounting; and all: + untied head, attention and ViT), wall time."""
  head = f"{'stage':<20} {'steps':>6} {'trained tok':>12} {'first loss':>10} {'final loss':>10} " \
         f"{'held-out':>9} {'FLOPs 6ND':>10} {'FLOPs all':>10} {'wall s':>8}"
  lines = [head, "-" * len(head)]
  for r in rows:
    if r.get("kind") == "step":   # a data / evaluation step: its one-line summary
      text = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in r.get("summary", {}).items())
      lines.append(f"{r['stage']:<20} {text[:len(head) - 30]:<{len(head) - 30}} {r['wall_s']:>8.1f}")
      continue
    if r.get("kind") == "rl":  # no loss to compare with SFT's: mean reward, first -> last update
      reward = f"reward {r['reward_first'] or 0.0:.3f} -> {r['reward_last'] or 0.0:.3f}"
      lines.append(f"{r['stage']:<20} {r['steps']:>6} {r['tokens']:>12.0f} {reward:>31} "
                   f"{'-':>10} {'-':>10} {r['wall_s']:>8.1f}")
      continue
    h = heldout_mean(r)
    lines.append(f"{r['stage']:<20} {r['steps']:>6} {r['tokens']:>12.0f} {r['first_loss']:>10.4f} "
                 f"{r['final_loss']:>10.4f} {'-' if h is None else f'{h:.4f}':>9} "
                 f"{r['flops_6nd']:>10.3g} {r['flops_total']:>10.3g} {r['wall_s']:>8.1f}")
  return "\n".join(lines)
