"""Stage 0 of the learning proof: a tiny pretrained base LM built here, standing in for the base
checkpoint the recipe starts from (launch.pretrain, configs/pretrain.py).

  vocabulary  the ids the generated corpus (data/copy_corpus.py) and the task family's texts use:
              the model trains on that compact vocabulary (models/compact_vocab.py)
  curriculum  rows of `lengths[0]` tokens first; every `probe_every` steps the copy probe scores
              held-out values at the current length, and the row length advances when the probe
              is at or under `advance_nll` (or the stage's step cap is hit); the tokens per step
              stay ~`tokens_per_step` (the batch shrinks as rows grow)
  end         passed: the probe at the last length is at or under `pass_nll`;
              failed: the step budget ran out first (base.json says with which figure)
  outputs     <workdir>/vocab.json, metrics.jsonl (steps and probes), base.json (status, build time,
              probe curve), hf/ (the base expanded to the full vocabulary: a plain Qwen3 HF
              checkpoint, what SFT's init.from_dir reads; CompactVocab.compact_params gives the
              compact rows back exactly)
  cache       `cache_dir`/<key>/ holds a finished build; the key hashes the config and the code
              it runs, so every proof seed reuses one base and a code change rebuilds it

The step is train.step's jitted SFT step (the loss over every row position); only the batches
(generated, not packed) and the stage logic are this module's.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import time
from typing import Any, Callable, Sequence

import jax
import ml_collections
import numpy as np

from mage_jax import sharding
from mage_jax.data import copy_corpus
from mage_jax.data.tokenizer import Tokenizer
from mage_jax.models.compact_vocab import CompactVocab
from mage_jax.models.config import Qwen3Config
from mage_jax.models.qwen3 import Qwen3ForCausalLM
from mage_jax.train import loss as loss_lib
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import state as state_lib
from mage_jax.train import step as step_lib
from mage_jax.train.run_setup import model_factory
from mage_jax.weights.hf import save_hf

BASE_FILE = "base.json"
CODE_FILES = ("data/copy_corpus.py", "train/pretrain.py", "models/compact_vocab.py", "models/qwen3.py",
              "train/step.py", "train/loss.py")


@dataclasses.dataclass
class Build:
  """Everything a pretraining run builds before its first step."""
  model_cfg: Qwen3Config          # compact
  full_cfg: Qwen3Config           # what it expands to
  vocab: CompactVocab
  corpus: copy_corpus.CopyCorpus


KEY_FIELDS = ("base_seed", "tokenizer", "model", "family", "corpus", "curriculum", "optimizer",
              "loss_chunk_size")


def cache_key(config: ml_collections.ConfigDict, extra_texts: Sequence[str] = (),
              preambles: Sequence[str] = ()) -> str:
  """A hash of everything that decides the base (KEY_FIELDS of the config, not where it is written
  or which proof seed asks; the extra texts, which decide the vocabulary, and the preambles) and
  of the source of the modules it runs."""
  cfg = {k: (config[k].to_dict() if hasattr(config[k], "to_dict") else config[k])
         for k in KEY_FIELDS if k in config}
  h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
  h.update(json.dumps([list(extra_texts), list(preambles)]).encode())
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for rel in CODE_FILES:
    with open(os.path.join(root, rel), "rb") as f:
      h.update(f.read())
  return h.hexdigest()[:16]


def cached_base(config: ml_collections.ConfigDict, extra_texts: Sequence[str] = (),
                preambles: Sequence[str] = ()) -> str | None:
  """The cache folder of a passed (or, with accept_failed, any finished) build of this config."""
  if not config.get("cache_dir"):
    return None
  d = os.path.join(config.cache_dir, cache_key(config, extra_texts, preambles))
  info = read_base(d)
  if info and (info["status"] == "passed" or config.get("accept_failed", False)):
    return d
  return None


def read_base(d: str) -> dict | None:
  path = os.path.join(d, BASE_FILE)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def build(config: ml_collections.ConfigDict, pools: copy_corpus.Pools, extra_texts: list[str],
          preambles: list[str]) -> Build:
  tok = Tokenizer(config.get("tokenizer", "") or None)
  corpus = copy_corpus.CopyCorpus(tok, pools, kinds=tuple(config.corpus.kinds),
                                  preambles=preambles, preamble_share=config.corpus.preamble_share,
                                  novel_share=config.corpus.get("novel_share", 0.0),
                                  block_share=config.corpus.get("block_share", 0.0),
                                  block_max=config.corpus.get("block_max", 250))
  ids = corpus.vocabulary(extra_texts, samples=config.corpus.vocab_samples)
  full_cfg = Qwen3Config(**config.model.to_dict())
  vocab = CompactVocab.from_token_ids(ids, full_cfg.vocab_size)
  return Build(vocab.compact_model_config(full_cfg), full_cfg, vocab, corpus)


def _check(config: ml_collections.ConfigDict) -> None:
  c = config.curriculum
  if not c.lengths or list(c.lengths) != sorted(c.lengths):
    raise ValueError(f"pretrain curriculum.lengths={list(c.lengths)} must be a non-empty increasing list")
  for field in ("tokens_per_step", "probe_every", "probe_rows", "max_steps", "stage_max_steps"):
    if int(c[field]) <= 0:
      raise ValueError(f"pretrain curriculum.{field}={c[field]} must be > 0")
  if not 0 < c.pass_nll <= c.advance_nll:
    raise ValueError(f"pretrain curriculum: need 0 < pass_nll ({c.pass_nll}) <= advance_nll ({c.advance_nll})")


def run(config: ml_collections.ConfigDict, workdir: str, pools: copy_corpus.Pools,
        extra_texts: list[str] = (), preambles: list[str] = (),
        log: Callable[[str], None] = print) -> dict[str, Any]:
  """Build the base in `workdir` (or take it from the cache); returns base.json's content."""
  _check(config)
  hit = cached_base(config, extra_texts, preambles)
  if hit:
    info = read_base(hit)
    log(f"pretrain: cached base {hit} ({info['status']}, probe {info['final_probe_nll']:.3f} nats)")
    return {**info, "dir": hit, "cached": True}
  t_start = time.time()
  os.makedirs(workdir, exist_ok=True)
  b = build(config, pools, list(extra_texts), list(preambles))
  b.vocab.save(os.path.join(workdir, "vocab.json"))
  log(f"pretrain: compact vocabulary {len(b.vocab.ids)} of {b.vocab.full_size} ids; model "
      f"{b.model_cfg.num_hidden_layers} x {b.model_cfg.hidden_size}")
  trainer = _Trainer(config, b)
  curve, status = _curriculum(config, b, trainer, workdir, log)
  params = trainer.host_params()
  info = {"status": status, "cache_key": cache_key(config, extra_texts, preambles), "vocab_ids": int(len(b.vocab.ids)),
          "steps": trainer.steps, "build_seconds": round(time.time() - t_start, 1),
          "final_length": curve[-1]["length"] if curve else 0,
          "final_probe_nll": curve[-1]["probe_nll"] if curve else float("nan"),
          "pass_nll": config.curriculum.pass_nll, "curve": curve}
  _save(workdir, b, params, info)
  if config.get("cache_dir"):
    dest = os.path.join(config.cache_dir, info["cache_key"])
    if os.path.abspath(dest) != os.path.abspath(workdir):
      shutil.rmtree(dest, ignore_errors=True)
      shutil.copytree(workdir, dest)
  log(f"pretrain: {status} after {trainer.steps} steps, {info['build_seconds']:.0f} s; probe "
      f"{info['final_probe_nll']:.3f} nats at {info['final_length']} tokens (pass <= {config.curriculum.pass_nll})")
  return {**info, "dir": workdir, "cached": False}


class _Trainer:
  """The jitted SFT step on a one-device mesh, and the probe."""

  def __init__(self, config: ml_collections.ConfigDict, b: Build):
    from flax import nnx   # keeps this module free of Flax at import time (start-up cost)

    self.mesh = sharding.make_mesh(dict(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])
    factory = model_factory(b.model_cfg)
    ocfg = opt_lib.OptimizerConfig.from_config(config.optimizer, total_steps=config.curriculum.max_steps)
    abstract_params = state_lib.split_model(nnx.eval_shape(lambda: factory(nnx.Rngs(0))))[1]
    self.tx = opt_lib.make_optimizer(ocfg, abstract_params)
    self.graphdef, self.rest, abstract = state_lib.abstract_state(factory, self.tx)
    self.shardings = state_lib.state_shardings(self.tx, abstract, sharding.param_shardings(abstract.params, self.mesh), self.mesh)
    with jax.set_mesh(self.mesh):
      self.state, _ = state_lib.init_state(factory, self.tx, config.base_seed, self.shardings)
    self.scfg = step_lib.StepConfig(loss_chunk_size=config.get("loss_chunk_size", 4096))
    self._steps: dict[tuple, Any] = {}
    self.steps = 0
    self.vocab = b.vocab

    def probe(params, batch):
      model = state_lib.merge_model(self.graphdef, params, self.rest)
      hidden = step_lib.model_hidden(model, batch)
      stats = loss_lib.token_stats(hidden, model.lm_head_kernel(), batch["targets"],
                                   mask=batch["value_mask"], bias=model.lm_head_bias(),
                                   chunk_size=self.scfg.loss_chunk_size)
      m = batch["value_mask"].astype(jax.numpy.float32)
      return (stats.nll * m).sum() / m.sum(), (stats.correct * m).sum() / m.sum()
    self._probe = jax.jit(probe)

  def _batch(self, rows: dict[str, np.ndarray]) -> dict[str, Any]:
    rows = self.vocab.compact_batch(rows, strict=False)
    return {k: jax.device_put(v) for k, v in rows.items()}

  def step(self, rows: dict[str, np.ndarray]) -> dict[str, float]:
    batch = self._batch(rows)
    shape = tuple(batch["tokens"].shape)
    if shape not in self._steps:
      with jax.set_mesh(self.mesh):
        self._steps[shape] = step_lib.jit_train_step(self.graphdef, self.rest, self.tx, self.scfg, self.mesh,
                                                     self.shardings, batch)
    with jax.set_mesh(self.mesh):
      self.state, metrics = self._steps[shape](self.state, batch)
    self.steps += 1
    return {k: float(metrics[k]) for k in ("loss", "accuracy", "grad_norm")}

  def probe(self, rows: dict[str, np.ndarray]) -> tuple[float, float]:
    batch = self._batch(rows)
    with jax.set_mesh(self.mesh):
      nll, acc = self._probe(self.state.params, batch)
    return float(nll), float(acc)

  def host_params(self) -> Any:
    return jax.device_get(self.state.params)


def _curriculum(config, b: Build, trainer: _Trainer, workdir: str, log) -> tuple[list[dict], str]:
  c = config.curriculum
  rng = random.Random(config.base_seed)
  probe_rng_seed = config.base_seed + 10_000
  curve: list[dict] = []
  t0 = time.time()
  lengths = list(c.lengths)
  with open(os.path.join(workdir, "metrics.jsonl"), "a") as out:
    for i, length in enumerate(lengths):
      last = i == len(lengths) - 1
      batch = max(1, int(c.tokens_per_step) // length)
      target = c.pass_nll if last else c.advance_nll
      stage_steps = 0
      losses: list[float] = []
      while True:
        m = trainer.step(b.corpus.rows(rng, batch, length))
        stage_steps += 1
        losses.append(m["loss"])
        if trainer.steps % config.log_every == 0:
          row = {"step": trainer.steps, "length": length, "batch": batch, **m, "wall": round(time.time() - t0, 1)}
          out.write(json.dumps(row) + "\n")
          out.flush()
        if trainer.steps % c.probe_every and stage_steps < c.stage_max_steps and trainer.steps < c.max_steps:
          continue
        nll, acc = trainer.probe(b.corpus.probe_rows(random.Random(probe_rng_seed), int(c.probe_rows), length))
        # diagnostics: instructions with train values (a gap to held-out = memorised values) and
        # plain copying of a held-out list
        seen_nll, _ = trainer.probe(b.corpus.probe_rows(random.Random(probe_rng_seed), int(c.probe_rows),
                                                        length, split="train"))
        list_nll, _ = trainer.probe(b.corpus.probe_rows(random.Random(probe_rng_seed), int(c.probe_rows),
                                                        length, doc="repeat"))
        point = {"step": trainer.steps, "length": length, "probe_nll": round(nll, 4),
                 "probe_acc": round(acc, 4), "probe_train_values_nll": round(seen_nll, 4),
                 "probe_list_copy_nll": round(list_nll, 4),
                 "loss": round(float(np.mean(losses[-c.probe_every:])), 4),
                 "wall": round(time.time() - t0, 1)}
        curve.append(point)
        out.write(json.dumps({"probe": True, **point}) + "\n")
        out.flush()
        log(f"pretrain: step {trainer.steps} len {length} loss {point['loss']:.3f} probe {nll:.3f} nats "
            f"(acc {acc:.2f}; train values {seen_nll:.3f}, list copy {list_nll:.3f}) {point['wall']:.0f} s")
        if not math.isfinite(nll):
          return curve, "failed"
        if nll <= target:
          if last:
            return curve, "passed"
          break
        if trainer.steps >= c.max_steps:
          return curve, "failed"
        if stage_steps >= c.stage_max_steps and not last:
          break
  return curve, "failed"


def _save(workdir: str, b: Build, params: Any, info: dict) -> None:
  from flax import nnx   # keeps this module free of Flax at import time (start-up cost)

  pure = nnx.to_pure_dict(params)
  full = b.vocab.expand_params(jax.tree_util.tree_map(np.asarray, pure))
  model = nnx.eval_shape(lambda: Qwen3ForCausalLM(b.full_cfg, rngs=nnx.Rngs(0)))
  state = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(state, full)
  save_hf(state, b.full_cfg, os.path.join(workdir, "hf"), dtype="float32")
  with open(os.path.join(workdir, BASE_FILE), "w") as f:
    json.dump(info, f, indent=1)

