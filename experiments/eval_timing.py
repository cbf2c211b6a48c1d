"""Where the learning proof's evaluation spends its time: one eval stage (runs/proof_steps.evaluate,
the proof config's engine, episodes and slots) on a folder of held-out task packages, with wall
timers around the environment (LocalEnv.reset / step / close), the policy call (RolloutPolicy.act:
HTTP, queueing and the engine), and the engine's device calls (prefill_row, decode_slots), plus
each prefill's prompt length and pool length. `--code` picks the source tree, so two trees (e.g. a
`git worktree` of an older commit) run the same instances back to back; BENCHMARKS.md "Rollout
engine on the proof's evaluation" compared d921312~1 with d921312 this way, and session 41 prefix
reuse on and off (`--prefix_cache_bytes=0`).

  # 24 held-out instances per template of a data stage, the base as the policy
  mkdir -p /tmp/sub96 && for t in click_colour file_and_click make_file count_lines; do
    for i in $(seq -w 0 23); do ln -sfn $DATA/heldout_suite/proof_${t}_heldout_0$i /tmp/sub96/; done; done
  .venv/bin/python experiments/eval_timing.py --code=$PWD --suite=/tmp/sub96 --modes=t1,greedy \\
      --params=$WORKDIR/base/hf --out=/tmp/eval_timing_new
  .venv/bin/python experiments/eval_timing.py --code=/work/wt-old --suite=/tmp/sub96 --modes=t1,greedy \\
      --params=$WORKDIR/base/hf --out=/tmp/eval_timing_old

`--params=init` evaluates the random init at `--seed` (eval_init). The episodes land in
`<out>/eval/episodes.json`, so two runs can be compared call by call.
"""
import argparse
import collections
import functools
import json
import os
import sys
import threading
import time


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--code", required=True, help="source tree to import mage_jax and configs from")
  ap.add_argument("--suite", required=True, help="folder of held-out task packages")
  ap.add_argument("--modes", default="t1", help="comma list of t1, greedy, blind")
  ap.add_argument("--params", default="init", help="an HF directory or stage dir, or 'init'")
  ap.add_argument("--slots", type=int, default=6)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--compile_cache_dir", default="",
                  help="JAX's persistent compile cache (default <out>/jax_cache, cold); share one between runs "
                       "to time them warm, as a proof chain's later stages run (<workdir>/jax_cache)")
  ap.add_argument("--prefix_cache_bytes", type=int, default=-1,
                  help="the engine's kept-rows budget (0: no prefix reuse; -1: the engine's default)")
  ap.add_argument("--out", required=True, help="work folder (created; must not hold an earlier run)")
  args = ap.parse_args()
  if not os.path.isdir(args.suite):
    ap.error(f"--suite={args.suite}: no such folder")
  if args.params != "init" and not os.path.isdir(args.params):
    ap.error(f"--params={args.params}: no such folder (or pass 'init')")
  if os.path.exists(os.path.join(args.out, "eval")):
    ap.error(f"--out={args.out}: holds an earlier run (eval/); pick a new folder")
  sys.path.insert(0, os.path.abspath(args.code))

  import jax
  import numpy as np
  from configs import proof
  from mage_jax.agent import env as envmod
  from mage_jax.engine import generate_batcher as gb
  from mage_jax.models import slot_decode as sd
  from mage_jax.rl import rollouts
  from mage_jax.runs import curriculum as cur
  from mage_jax.runs import proof_steps
  print(f"code: {os.path.dirname(sd.__file__)}", flush=True)

  spans, lock = collections.defaultdict(list), threading.Lock()

  def timed(name, fn, block=False):
    @functools.wraps(fn)
    def wrapper(*a, **k):
      t = time.perf_counter()
      out = fn(*a, **k)
      if block:
        jax.block_until_ready(out)
      with lock:
        spans[name].append(time.perf_counter() - t)
      return out
    return wrapper

  for name in ("reset", "step", "close"):
    setattr(envmod.LocalEnv, name, timed("env." + name, getattr(envmod.LocalEnv, name)))
  rollouts.RolloutPolicy.act = timed("policy.act", rollouts.RolloutPolicy.act)
  gb.slot_decode.prefill_row = timed("engine.prefill_row", sd.prefill_row, block=True)
  gb.slot_decode.decode_slots = timed("engine.decode_slots", sd.decode_slots, block=True)
  if hasattr(sd, "extend_slot"):   # prefix reuse (since session 41)
    gb.slot_decode.extend_slot = timed("engine.extend_slot", sd.extend_slot, block=True)
    gb.slot_decode.embed_tokens = timed("engine.embed_tokens", sd.embed_tokens, block=True)
    gb.slot_decode.first_token = timed("engine.first_token", sd.first_token, block=True)
  prefills, engines = [], []
  plain_prefill, plain_init = gb.SlotEngine._prefill, gb.SlotEngine.__init__

  def prefill(self, job, slot, *rest):
    out = plain_prefill(self, job, slot, *rest)
    prefills.append((len(job.prompt), int(self.pool.segment_ids.shape[1])))
    return out

  def init(self, *a, **k):
    if args.prefix_cache_bytes >= 0:
      k["prefix_cache_bytes"] = args.prefix_cache_bytes
    plain_init(self, *a, **k)
    engines.append(self)
  gb.SlotEngine._prefill, gb.SlotEngine.__init__ = prefill, init

  config = proof.get_config()
  config.seed, config.shared_dir = args.seed, ""
  init = args.params == "init"
  stage = config.stages.eval_init if init else config.stages.eval_sft
  stage.overrides = (f"proof.heldout_suite={os.path.abspath(args.suite)};proof.probe_episodes=;"
                     f"proof.modes={args.modes};proof.slots={args.slots}" + (";proof.params=init" if init else ""))
  previous = "" if init else os.path.abspath(args.params)
  cfg = cur.stage_config(config, stage, previous, os.path.join(args.out, "synth"))
  cfg.compile_cache_dir = os.path.abspath(args.compile_cache_dir) if args.compile_cache_dir else os.path.join(args.out, "jax_cache")
  os.makedirs(os.path.join(args.out, "eval"))
  t0, cpu0 = time.perf_counter(), time.process_time()
  out = proof_steps.evaluate(cfg, os.path.join(args.out, "eval"), previous, args.out)
  report = {"wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - cpu0, 1),
            "slots": args.slots, "success": out["row"],
            "parts": {k: {"n": len(v), "total_s": round(sum(v), 1), "mean_ms": round(1e3 * np.mean(v), 1),
                          "median_ms": round(1e3 * np.median(v), 1)} for k, v in sorted(spans.items())},
            "prompt_len": {"min": min(p for p, _ in prefills), "median": float(np.median([p for p, _ in prefills])),
                           "max": max(p for p, _ in prefills)} if prefills else {},
            "pool_lengths": sorted({m for _, m in prefills}),
            "prefix_cache": [e.prefix.stats() for e in engines if hasattr(e, "prefix")]}
  with open(os.path.join(args.out, "timing.json"), "w") as f:
    json.dump(report, f, indent=1)
  print(json.dumps(report, indent=1))


if __name__ == "__main__":
  main()
