"""Stage 5: online hybrid RL (async GRPO with truncated importance sampling).

Config only: the RL trainer is a later issue (`python -m launch.rl`). Numbers
from the paper (DESIGN.md): 1,988 tasks; 96 task groups × 8 episode slots per
update; admission window of lag + 1 = 4 batches; policy lag <= 3 updates; TIS
cap C = 2.0; frontier task sampling; 32 B200 GPUs (24 train, 8 vLLM
inference); 2.62 ZFLOPs.

  python -m launch.rl --config=configs/stage5_rl.py --workdir=workdirs/stage5 \
      --config.init.from_dir=workdirs/stage4
"""
import ml_collections

from configs import common


def get_config(arg: str | None = None):
  tiny = common.check_arg(arg) == "tiny"
  c = common.base_config(name="stage5_rl", stage=5, tiny=tiny)
  c.data.sources = ml_collections.ConfigDict()
  c.rl = ml_collections.ConfigDict(dict(
      num_tasks=1_988,
      groups_per_update=2 if tiny else 96,
      episodes_per_group=4 if tiny else 8,
      max_policy_lag=3,
      admission_window=4,          # = max_policy_lag + 1 batches of work ahead of the learner
      tis_cap=2.0,                 # truncated importance weight min(exp(logp_old - logp_rollout), C)
      clip_eps_low=0.2, clip_eps_high=0.28,
      adv_eps=1e-6,
      task_sampling="frontier",
      max_episode_steps=50,
      inference_gpus=0 if tiny else 8,
      env_slots=2 if tiny else 1_120,
      paper_zflops=2.62))
  c.optimizer.learning_rate = 1e-4 if tiny else 1e-6
  c.optimizer.warmup_steps = 0 if tiny else 10
  return c


def sweep(arg: str | None = None):
  return common.sweep_points(**{"rl.tis_cap": [2.0, 4.0]})
