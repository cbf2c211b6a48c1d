"""The Mage-VL-Cowork curriculum: stages 1-4 (SFT), then stage 5 (online RL), in order.

  python -m launch.curriculum --config=configs/mage_vl_cowork.py:tiny --workdir=workdirs/demo
  python -m launch.curriculum --config=configs/mage_vl_cowork.py --workdir=workdirs/cowork \
      --config.init_from=/path/to/Qwen3-4B-Instruct-2507

Each stage trains in <workdir>/<stage name>, starts from the previous stage's
final params and is skipped when already complete (so a rerun resumes).
Stage 5 plays the built-in sandboxed terminal tasks against an embedded rollout
server (tiny: 3 updates; a model this small rarely earns a reward, so its
updates mostly check the plumbing).
`tiny` generates synthetic data once into <workdir>/synth and runs on 2 CPU cores.
"""
import ml_collections

from configs import common

STAGES = (
    ("stage1_midtrain", "configs/stage1_midtrain.py"),
    ("stage2_gui_sft", "configs/stage2_gui_sft.py"),
    ("stage3_code_sft", "configs/stage3_code_sft.py"),
    ("stage4_hybrid_sft", "configs/stage4_hybrid_sft.py"),
    ("stage5_rl", "configs/stage5_rl.py"),  # mage_jax.rl.loop.train_rl (embedded rollout server
                                            # unless rl.server_url names a vLLM engine)
)


def get_config(arg: str | None = None):
  arg = common.check_arg(arg)
  c = ml_collections.ConfigDict()
  c.arg = arg
  c.init_from = ""   # HF dir for stage 1 ('' = fresh init)
  c.compile_cache = True  # stages share a persistent compilation cache in <workdir>/jax_cache
  c.stages = ml_collections.ConfigDict()
  for i, (name, path) in enumerate(STAGES):
    c.stages[name] = ml_collections.ConfigDict(dict(
        order=i + 1, config=path, enabled=True, overrides=""))
  c.synth = ml_collections.ConfigDict(dict(
      enabled=arg == "tiny", seed=0, episodes=32, grounding=16, width=640, height=400))
  return c


def sweep(arg: str | None = None):
  return [{}]
