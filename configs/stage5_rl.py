"""Stage 5: online hybrid RL (async GRPO with truncated importance sampling).

    python -m launch.rl --config=configs/stage5_rl.py:tiny --workdir=workdirs/stage5_tiny
    python -m launch.rl --config=configs/stage5_rl.py --workdir=workdirs/stage5 \
        --config.init.from_dir=workdirs/stage4 --server_url=http://vllm-host:8000/v1

`mage_jax.rl.loop.train_rl` (docs/rl.md). Without --server_url (config.rl.server_url)
an embedded rollout server is started in process on the initial weights. Full size:
hybrid RL on terminal, GUI and hybrid tasks (screenshot prompts go to the engine's
chat route with image parts; RL batches carry `data.patch_budget` patch slots per row).
`tiny`: the tiny Mage-VL (random init unless init.from_dir), 3 easy terminal tasks of
the built-in suite, 2 groups x 4 episodes of 2 model calls, 8 x 1536-token batches;
runs on CPU in under 2 minutes per update. A harness screenshot (1280x800 -> 1,000
image tokens, 4,000 patches) per call would crowd a 1,536-token row and triple the
CPU step, so tiny stays terminal-only; `--config.rl.kinds=terminal,gui,hybrid` turns
screenshots on there too (the tiny patch budget holds one screenshot per row).

Numbers from the paper (DESIGN.md): 1,988 tasks; 96 task groups × 8 episode slots per
update; admission window of lag + 1 = 4 batches; policy lag <= 3 updates; TIS cap C = 2.0;
frontier task sampling; 32 B200 GPUs (24 train, 8 vLLM inference); 2.62 ZFLOPs.
"""
import ml_collections

from configs import common


def get_config(arg: str | None = None):
  tiny = common.check_arg(arg) == "tiny"
  c = common.base_config(name="stage5_rl", stage=5, tiny=tiny)
  c.data.sources = ml_collections.ConfigDict()
  # RL batches: data.batch_size rows of data.seq_len slots, packed from policy calls
  # (rollouts that do not fit are counted as left_out_samples).
  # Patch slots per row for GUI/hybrid calls: up to episode.visual_turns = 3 screenshots per call,
  # 4,000 patches each at 1280x800; the SFT stages' 32k-row budget (98,304) holds ~8 such calls.
  c.data.patch_budget = 98_304
  if tiny:
    c.data.seq_len = 1536
    c.data.batch_size = 8
    c.data.patch_budget = 4_000
  for section in ("synth", "prep", "eval"):   # SFT-only sections
    del c[section]
  c.rl = ml_collections.ConfigDict(dict(
      num_tasks=1_988,
      total_updates=3 if tiny else 1_000,
      groups_per_update=2 if tiny else 96,
      episodes_per_group=4 if tiny else 8,
      # micro-batches of data.batch_size rows per update (gradient accumulation): the samples
      # beyond them are left out (left_out_samples). 1 at full size, where a row is a 32k-token,
      # 98k-patch slot and the batch already holds data.batch_size of them.
      max_micro_batches=1,
      # optimizer steps per update over its batch (PPO's epochs): 1 = logp_old is the update's
      # own forward and the clip never acts; > 1 fills logp_old once and the clip bounds the rest
      epochs_per_update=1,
      # weights of positive / negative advantages: 1, 1 = GRPO; 1, 0 = only calls of episodes that
      # beat their group train; 0, 1 = only those below it (docs/rl.md)
      positive_advantage_weight=1.0, negative_advantage_weight=1.0,
      # an unparsable call's advantage is min(A, this), in [-1, 0]: 0 never reinforces it; < 0 also
      # pushes it down when its episode succeeds anyway (docs/rl.md)
      parse_error_advantage=0.0,
      # "episode": every token its episode's advantage (GRPO); "prefix_tree": each token its step in
      # the value of the prefix the group's episodes share (mage_jax/rl/credit.py)
      credit="episode",
      # c of the loss's - c * H (H: the policy's next-token entropy, verl's sign): 0 = GRPO; < 0
      # sharpens the policy toward its mode, > 0 keeps its entropy up (docs/rl.md)
      entropy_coeff=0.0,
      # with the term on: "all" groups, or "rewarded" ones only (a group with no rewarded episode
      # would be trained by the entropy term alone, toward its failing mode; rl/loop.py)
      entropy_groups="all",
      # the term acts only where the policy's entropy is <= this (nats): a position with no mode is
      # left to the reward term; 0 = every token (rl/objective.py)
      entropy_gate_nats=0.0,
      max_policy_lag=3,
      admission_window=4,          # = max_policy_lag + 1 batches of work ahead of the learner
      tis_cap=2.0,                 # truncated importance weight min(exp(logp_old - logp_rollout), C)
      clip_eps_low=0.2, clip_eps_high=0.28,
      adv_eps=1e-6,
      task_sampling="frontier",
      sampler_floor=0.05,          # weight p(1-p) + floor: solved/unsolved tasks still come back
      sampler_prior_attempts=1,    # pseudo-attempts at a 50% pass rate per task
      max_episode_steps=2 if tiny else 50,
      inference_gpus=0 if tiny else 8,
      env_slots=2 if tiny else 1_120,
      # group_queue "shared": one fleet-wide FIFO of episodes feeds every env slot and each of
      # the admission window's groups (admission_window x groups_per_update) has a thread;
      # "per_worker": rollout_workers threads, each with env_slots / rollout_workers slots,
      # waiting for its group's slowest episode (rollout_workers is used only there).
      group_queue="shared",
      group_redundancy=0,          # extra episodes per group; the first episodes_per_group kept
      rollout_workers=1 if tiny else 96,
      # > 0: an episode still running after this many seconds ends as env_error "deadline"
      episode_deadline_s=600.0 if tiny else 3_600.0,
      # tasks: "builtin" or a directory of task packages; comma lists ("" = all). gui / hybrid
      # tasks (screenshots) need a Mage-VL model and data.patch_budget.
      suite="builtin",
      tasks="term_hello_file,term_multiply,term_count_lines" if tiny else "",
      kinds="terminal" if tiny else "terminal,gui,hybrid",
      # rollout engine: "" = embedded RolloutServer on the exported initial weights, bound at
      # engine_host:engine_port (0 = a free port; "0.0.0.0" or a LAN address for env hosts on
      # other machines: private network only, its dev routes have no authentication).
      # engine_advertise_url: the URL episodes call ("" = the learner's; required, and checked
      # from every env node at start-up, when env.backend=ray spans hosts).
      server_url="", model_name="mage",
      engine_host="127.0.0.1", engine_port=0, engine_advertise_url="",
      max_tokens=16 if tiny else 2048, temperature=1.0, top_p=1.0,
      request_timeout_s=300.0, server_ready_timeout_s=120.0 if tiny else 1_800.0,
      group_timeout_s=900.0 if tiny else 3_600.0,  # the learner's wait for one group
      # max |engine - learner| probe log-prob after a sync; the learner's reference uses the
      # bf16-rounded export, so the embedded fp32 engine matches to ~1e-5; vLLM computes in
      # bf16 and needs ~0.05, which cannot see one small update.
      sync_tolerance=1e-3 if tiny else 0.05,   # at most loop.MAX_SYNC_TOLERANCE (1.0)
      # False skips the probe (only by this explicit choice; manifest.json records it)
      sync_probe=True,
      keep_exports=2,
      paper_zflops=2.62))
  c.episode = ml_collections.ConfigDict(dict(
      # prompt + completion must fit one learner row (loop.validate checks it)
      full_responses=4, visual_turns=3, context_len=c.data.seq_len - c.rl.max_tokens,
      score_settle=0.3))
  c.env = ml_collections.ConfigDict(dict(
      width=1280, height=800, command_timeout=30.0, max_output=16_000 if not tiny else 2_000,
      home_mb=256, memory_mb=4096, nproc=256, **common.env_fleet_fields(16)))
  c.optimizer.learning_rate = 1e-4 if tiny else 1e-6
  c.optimizer.warmup_steps = 0 if tiny else 10
  c.checkpoint.every_steps = 1 if tiny else 10
  c.log.every_steps = 1
  return c


def sweep(arg: str | None = None):
  return common.sweep_points(**{"rl.tis_cap": [2.0, 4.0]})
