"""Run by tests/test_proof.py in a subprocess (one CPU device, like the pipeline):

  python tests/_proof_rl_check.py <smoke workdir>

One RL update, through the pipeline's own RL config (configs/proof.py:rl,smoke), trainer build,
group advantages, packing and step, from the smoke run's SFT params, on a group of two
completions of one train prompt rendered by the data path: the teacher's (reward 1) and another
template's teacher completion (reward 0). Prints JSON with the mean completion log-probs of both
before and after the update.
"""
from __future__ import annotations

import json
import os
import sys

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def completion(sample) -> tuple[list[int], list[int]]:
  """(prompt ids, target ids) of a rendered SFT sample: tokens before / at the loss mask."""
  mask = np.asarray(sample.loss_mask) > 0
  cut = int(np.argmax(mask))
  return sample.tokens[:cut].tolist(), sample.tokens[mask].tolist()


def main(workdir: str) -> None:
  from configs import proof
  from mage_jax.data import render
  from mage_jax.data import trajectory as tr
  from mage_jax.rl import loop as rl_loop
  from mage_jax.rl import objective as obj_lib
  from mage_jax.rl.batch import RLSample, pack_rl_batch
  from mage_jax.rl.rollouts import EpisodeSamples, RolloutGroup
  from mage_jax.engine.weight_sync import model_logprobs_fn
  from mage_jax.train import run_setup as setup
  from mage_jax.train import state as state_lib
  from mage_jax.train import step as step_lib
  cfg = proof.get_config("rl,smoke")
  cfg.init.from_dir = os.path.join(workdir, "sft")
  setup.enable_compile_cache(os.path.join(workdir, "jax_cache"))
  t = rl_loop.build(cfg, os.path.join(workdir, "rl_check"))
  state = setup.initial_state(t)
  episodes = {e.meta.get("task_id", e.id): e for e in
              tr.read_episodes(os.path.join(workdir, "data", "teacher", "episodes.jsonl"))}
  terminal = [e for e in episodes.values() if e.meta.get("kind") == "terminal"]
  make_file = next(e for e in terminal if "make_file" in e.meta["task_id"])
  count_lines = next(e for e in terminal if "count_lines" in e.meta["task_id"])
  renderer = render.Renderer(render.RenderConfig.from_config(proof.get_config("sft,smoke").data.render))
  prompt, good = completion(renderer.render_step(make_file, 1))
  _, bad = completion(renderer.render_step(count_lines, 1))   # a plausible, wrong turn

  def mean_logps(params) -> tuple[float, float, list[float], list[float]]:
    fn = model_logprobs_fn(state_lib.merge_model(t.graphdef, params, t.rest), t.model_cfg,
                           export_dtype=None)
    out = []
    for comp in (good, bad):
      lp = fn(prompt + comp)[len(prompt) - 1:]
      out.append([float(x) for x in lp])
    return float(np.mean(out[0])), float(np.mean(out[1])), out[0], out[1]

  g0, b0, lp_good, lp_bad = mean_logps(state.params)
  group = RolloutGroup("check", "g0", [
      EpisodeSamples("good", 1.0, [RLSample(prompt, good, lp_good, 0.0, 0, "check", "good")]),
      EpisodeSamples("bad", 0.0, [RLSample(prompt, bad, lp_bad, 0.0, 0, "check", "bad")])])
  samples, flat = rl_loop.samples_with_advantages([group], cfg.rl.adv_eps)
  batch, report = pack_rl_batch(samples, rows=cfg.data.batch_size, seq_len=cfg.data.seq_len,
                                patch_budget=cfg.data.patch_budget, image_keys=True)
  scfg = step_lib.StepConfig(**cfg.step.to_dict())
  rl = cfg.rl
  objective = obj_lib.rl_objective(obj_lib.RLLossConfig(rl.clip_eps_low, rl.clip_eps_high, rl.tis_cap),
                                   scfg.loss_chunk_size, logp_old_in_update=True)
  dev = setup.to_device(batch, t.mesh, cfg.data)
  with jax.set_mesh(t.mesh):
    train_step = step_lib.jit_train_step(t.graphdef, t.rest, t.tx, scfg, t.mesh, t.shardings, batch,
                                         objective=objective)
    state, metrics = train_step(state, dev)
  g1, b1, _, _ = mean_logps(state.params)
  print(json.dumps({"advantages": [s.advantage for s in samples], "flat_groups": flat,
                    "packed": report["packed"], "good_before": g0, "good_after": g1,
                    "bad_before": b0, "bad_after": b1,
                    "loss": float(np.asarray(jax.device_get(metrics["loss"])))}))


if __name__ == "__main__":
  main(sys.argv[1])
