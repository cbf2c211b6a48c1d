"""Asynchronous GRPO: `train_rl(config, workdir)` (python -m launch.rl).

  build       mesh, model, optimizer, shardings (train/run_setup.py), the RL objective
  init        resume <workdir>/checkpoints (state + version + sampler), else init.from_dir / fresh
  engine      config.rl.server_url (vLLM or a running embedded server; weights pushed by sync)
              or an embedded RolloutServer started here on the exported initial weights
              (bound at rl.engine_host:rl.engine_port); episodes call it at
              rl.engine_advertise_url ('' = the learner's URL), checked from every env node
              when env.backend=ray (rl/engine_checks.py)
  workers     rollout threads: admit a group while (lag + 1) batches of work are not yet in
              flight, draw a task (FrontierSampler), run one task x N episodes (rollout_fn),
              queue the group (mage_jax.rl.workers); a failed engine group is dropped and
              counted, three in a row stop the run with the engine's error. With
              rl.group_queue="shared" every admitted group has a thread and all their
              episodes go through one fleet-wide queue (rl/group_queue.py)
  learner     pop G groups, drop stale ones (learner - sample version > lag; counted),
              group advantages -> RLSamples -> pack_rl_batch -> logp_old -> RL train step,
              version += 1, sync_weights (export, reload, verify) so new work uses it
  checkpoint  Orbax state + {version, sampler} every checkpoint.every_steps, at the end and on
              SIGTERM; final params + summary.json at the end
  metrics     metrics.jsonl / TensorBoard per update via train.metrics.Logger
"""
from __future__ import annotations

import collections
import dataclasses
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from mage_jax.rl import credit as credit_lib
from mage_jax.rl import objective as obj_lib
from mage_jax.rl.admission import AdmissionWindow
from mage_jax.rl.batch import RLSample, pack_rl_update
from mage_jax.engine.rollout_client import RolloutClient
from mage_jax.engine import address as engine_address
from mage_jax.rl import engine_checks
from mage_jax.rl.config_fields import RL_FIELDS
from mage_jax.rl.rollouts import (GROUP_QUEUES, RolloutContext, RolloutFn, RolloutGroup, ServedVersion,
                                  spray_stats)
from mage_jax.rl.sampler import FrontierSampler
from mage_jax.rl.workers import RolloutWorkers
from mage_jax.train import lifecycle
from mage_jax.report import rl_record
from mage_jax.train import flops as flops_lib
from mage_jax.train import metrics as metrics_lib
from mage_jax.train import optimizer as opt_lib
from mage_jax.train import run_setup as setup
from mage_jax.train import state as state_lib
from mage_jax.train import step as step_lib
from mage_jax.train.run_setup import ConfigError, Trainer
from mage_jax.agent.env import LocalEnv, env_config_from
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.agent.slots import BACKENDS, make_pool
from mage_jax.data.tokenizer import load_tokenizer
from mage_jax.engine.weight_sync import model_logprobs_fn, sync_weights
from mage_jax.machine.sandbox import SandboxUnavailable, check_available
from mage_jax.rl.rollouts import HarnessRollouts
from mage_jax.tasks.suites import load_tasks
from mage_jax.engine.rollout_server import RolloutServer
from mage_jax.engine.weight_sync import export


# --- build ---------------------------------------------------------------------------------------


def validate(config: ml_collections.ConfigDict) -> None:
  """What an RL config alone must satisfy (no files read; `build` checks the init and vocabulary
  files); raises ConfigError naming the field."""
  setup.check_config(config, ("model", "mesh", "data", "optimizer", "step", "train", "init",
                              "checkpoint", "log", "rl"), RL_FIELDS)
  rl = config.rl
  if rl.admission_window != rl.max_policy_lag + 1:
    raise ConfigError(f"config.rl.admission_window={rl.admission_window} must be "
                      f"config.rl.max_policy_lag + 1 = {rl.max_policy_lag + 1} (DESIGN.md)")
  if rl.episodes_per_group < 2:
    raise ConfigError("config.rl.episodes_per_group must be >= 2 (group-relative advantages)")
  if rl.temperature != 1.0 or rl.top_p != 1.0:
    # The engine's log-probs are of the processed distribution; the learner's logp_old is at
    # temperature 1 over the full softmax, so anything else biases the importance weights.
    raise ConfigError(f"config.rl.temperature={rl.temperature}, top_p={rl.top_p}: RL samples at "
                      "temperature 1.0 and top_p 1.0 (the learner's log-probs are of the raw policy)")
  if rl.get("group_queue", "per_worker") not in GROUP_QUEUES:
    raise ConfigError(f"config.rl.group_queue={rl.group_queue!r}: expected one of {GROUP_QUEUES}")
  if rl.get("group_redundancy", 0) and rl.group_queue != "shared":
    raise ConfigError(f"config.rl.group_redundancy={rl.group_redundancy} needs "
                      "config.rl.group_queue='shared' (extras are kept or dropped fleet-wide)")
  if rl.get("sync_probe", True) and rl.sync_tolerance > MAX_SYNC_TOLERANCE:
    raise ConfigError(
        f"config.rl.sync_tolerance={rl.sync_tolerance}: above {MAX_SYNC_TOLERANCE} nats the post-sync "
        "probe passes an engine serving the wrong weights; to run without the probe, say so with "
        "config.rl.sync_probe=False (recorded in the run's manifest.json)")
  if rl.get("credit", "episode") not in CREDITS:
    raise ConfigError(f"config.rl.credit={rl.credit!r}: expected one of {CREDITS}")
  if rl.get("entropy_groups", "all") not in ENTROPY_GROUPS:
    raise ConfigError(f"config.rl.entropy_groups={rl.entropy_groups!r}: expected one of {ENTROPY_GROUPS}")
  if rl.task_sampling != "frontier":
    raise ConfigError(f"config.rl.task_sampling={rl.task_sampling!r}: only 'frontier' is implemented")
  if config.episode.context_len + rl.max_tokens > config.data.seq_len:
    raise ConfigError(
        f"config.episode.context_len={config.episode.context_len} + config.rl.max_tokens="
        f"{rl.max_tokens} exceeds config.data.seq_len={config.data.seq_len}: a prompt plus its "
        "completion must fit one learner row (else prompts are cut and logp_old is computed on "
        "a context the engine never saw)")
  kinds = set(filter(None, rl.kinds.split(",")))
  if kinds - TASK_KINDS:
    raise ConfigError(f"config.rl.kinds={rl.kinds!r}: unknown kinds {sorted(kinds - TASK_KINDS)}; "
                      f"choose from {sorted(TASK_KINDS)} ('' = all)")
  if screenshot_kinds(rl.kinds):
    if config.model.get("arch") != "mage_vl":
      raise ConfigError(f"config.rl.kinds={rl.kinds!r} includes screenshot tasks (gui/hybrid), which "
                        f"need a Mage-VL model; config.model.arch is {config.model.get('arch')!r}")
    budget = int(config.data.get("patch_budget", 0))
    if budget < 4 or budget % 4:
      raise ConfigError(f"config.data.patch_budget={budget}: GUI/hybrid RL batches need patch slots "
                        "for the screenshots (a positive multiple of 4)")


TASK_KINDS = {"terminal", "gui", "hybrid"}
# How a group's advantage reaches the tokens: "episode" (GRPO: every token its episode's) or
# "prefix_tree" (each token its step in the value of the prefix the group shares; rl/credit.py).
CREDITS = ("episode", "prefix_tree")
ENTROPY_GROUPS = ("all", "rewarded")   # rl.entropy_groups: where the entropy term acts
# The widest post-sync probe tolerance (max abs log-prob, nats) a config may set: a bf16 engine
# needs ~0.05, while wrong weights (a stale or half-reloaded checkpoint) are off by whole nats.
MAX_SYNC_TOLERANCE = 1.0


def sync_probe_record(rl: ml_collections.ConfigDict) -> dict[str, Any]:
  """The manifest's account of the post-sync check: on with its tolerance, or off by choice."""
  if rl.get("sync_probe", True):
    return {"enabled": True, "tolerance": float(rl.sync_tolerance)}
  return {"enabled": False, "reason": "config.rl.sync_probe=False: the engine's weights are not "
                                      "checked against the learner's after a sync"}


def screenshot_kinds(kinds: str) -> bool:
  """Whether config.rl.kinds ('' = all) admits tasks whose prompts carry screenshots; then every
  RL batch carries the patch keys (data.patch_budget slots), so the step compiles once."""
  wanted = set(filter(None, kinds.split(","))) or TASK_KINDS
  return bool(wanted & {"gui", "hybrid"})


def build(config: ml_collections.ConfigDict, workdir: str) -> Trainer:
  """The SFT trainer's build without a data pipeline (batches come from rollouts)."""
  validate(config)
  # Files are checked here, not in validate: the curriculum validates every stage before the first
  # runs, when an RL stage's init and compact vocabulary are still to be written by earlier stages.
  setup.check_init(config)
  setup.check_workdir(workdir)
  mesh = setup.make_mesh(config)
  updates = int(config.rl.total_updates)
  return setup.build_trainer(config, workdir, mesh, updates, config.data,
                             optimizer_steps=updates * epochs_per_update(config.rl))


def advantage_weights(rl: ml_collections.ConfigDict) -> tuple[float, float]:
  """(weight of positive advantages, of negative ones): (1, 1) is GRPO; (1, 0) trains only the calls
  of episodes that beat their group (PSR), (0, 1) only those that fell below it (NSR)."""
  return (float(rl.get("positive_advantage_weight", 1.0)),
          float(rl.get("negative_advantage_weight", 1.0)))


def entropy_coeff(rl: ml_collections.ConfigDict) -> float:
  """c of the loss's - c * H term (verl's sign): > 0 keeps the policy's entropy up, < 0 sharpens
  it toward its mode (entropy minimisation, Agarwal et al. 2025); 0 (default) is GRPO's loss."""
  return float(rl.get("entropy_coeff", 0.0))


def groups_for_update(groups: Sequence[RolloutGroup], rl: ml_collections.ConfigDict
                      ) -> tuple[list[RolloutGroup], int]:
  """(the groups an update trains on, how many were left out). With an entropy term and
  rl.entropy_groups = "rewarded", a group in which no episode earned a reward is left out: its
  advantages are all 0, so its only gradient would be the entropy term's, sharpening the policy
  toward a mode that fails the task. Why: from an SFT policy that solved no count_lines task, 16
  updates with the term on every group raised the held-out copy probe 0.43 -> 1.56 nats
  (docs/results.md, session 28). "all" (the default) trains every group."""
  if not entropy_coeff(rl) or rl.get("entropy_groups", "all") == "all":
    return list(groups), 0
  kept = [g for g in groups if np.any(np.asarray(g.rewards) > 0)]
  return kept, len(groups) - len(kept)


def loss_config(rl: ml_collections.ConfigDict) -> obj_lib.RLLossConfig:
  return obj_lib.RLLossConfig(rl.clip_eps_low, rl.clip_eps_high, rl.tis_cap, entropy_coeff(rl),
                              float(rl.get("entropy_gate_nats", 0.0)))


def epochs_per_update(rl: ml_collections.ConfigDict) -> int:
  """Optimizer steps per update, each over the update's whole batch (PPO's epochs)."""
  return int(rl.get("epochs_per_update", 1))


# --- learner helpers -----------------------------------------------------------------------------


def samples_with_advantages(groups: Sequence[RolloutGroup], eps: float,
                            weights: tuple[float, float] = (1.0, 1.0), credit: str = "episode",
                            parse_error_advantage: float = 0.0) -> tuple[list[RLSample], int]:
  """Every sample of every group with its episode's group-relative advantage, except that a call
  the harness could not parse (`RLSample.parsed` False) is never reinforced:
  min(A, parse_error_advantage) (rl.parse_error_advantage, in [-1, 0]; 0: min(A, 0)); then a
  positive advantage is scaled by weights[0], a negative one by weights[1]
  (rl.positive_advantage_weight, rl.negative_advantage_weight; (1, 1) is GRPO). With (1, 0) only
  the calls of episodes that beat their group train: SFT on the policy's own successes weighted by
  A ("positive sample reinforcement", Zhu et al. 2025); with (0, 1) only those below it are pushed
  down ("negative sample reinforcement"). credit (rl.credit): "episode", every token of a call
  gets its episode's advantage; "prefix_tree", each token its step in the value of the prefix
  the group's episodes share (rl/credit.py), with the same parse rule and weights per token.
  Returns (samples, groups whose rewards are all equal: zero advantage, no gradient).

  Why the exception: a parse error is a step with no action, and an episode can still succeed
  after one (the step budget has room). With the episode's advantage its broken call was
  pushed up: after 12 updates of 4 epochs at lr 1e-4 the proof's RL rollouts had 17-19
  unparsable calls per 64 episodes (3 in the first update) and solved held-out episodes
  contained loops like '"status": "key", "status": "key", ...' (docs/results.md, session 25).
  What a negative parse_error_advantage is for: with min(A, 0) a broken call in an episode that succeeds
  anyway (file_and_click's click is scored, not the call after it) gets 0, so nothing holds it
  down; from session 41's seed-0 SFT, 16 updates turned file_and_click's third call into
  "<think>" and a run of newlines in 58 of 60 held-out episodes (2 of 60 after SFT; session 42). At
  -1 the same run broke it in 58 of 60 again: the push alone does not hold that loop down."""
  if not -1.0 <= parse_error_advantage <= 0.0:
    raise ValueError(f"parse_error_advantage={parse_error_advantage}: expected a number in [-1, 0]")
  if not all(0.0 <= w <= 1.0 for w in weights):
    raise ValueError(f"advantage weights {weights}: expected (positive, negative) weights in [0, 1]")
  if credit not in CREDITS:
    raise ValueError(f"credit={credit!r}: expected one of {CREDITS}")
  positive_weight, negative_weight = weights

  def weighted(a, parsed: bool):
    a = (np.asarray(a, np.float32) if parsed
         else np.minimum(np.asarray(a, np.float32), parse_error_advantage))
    return np.where(a < 0, a * negative_weight, a * positive_weight).astype(np.float32)

  out, flat = [], 0
  for g in groups:
    adv = np.asarray(obj_lib.group_advantages(jnp.asarray(g.rewards)[None], eps))[0]
    flat += int(not np.any(adv))  # what the objective did, not a tolerance on the rewards
    per_token = (credit_lib.prefix_tree_advantages(
        [[(s.prompt_ids, s.completion_ids) for s in ep.samples] for ep in g.episodes], g.rewards, eps)
        if credit == "prefix_tree" else None)
    for i, (ep, a) in enumerate(zip(g.episodes, adv)):
      for j, s in enumerate(ep.samples):
        out.append(dataclasses.replace(
            s, advantage=float(weighted(a, s.parsed)),
            token_advantages=None if per_token is None else weighted(per_token[i][j], s.parsed)))
  return out, flat


def samples_with_gradient(samples: Sequence[RLSample], entropy_coeff: float = 0.0
                          ) -> tuple[list[RLSample], int]:
  """(the samples whose advantage is not 0, how many were left out). A sample with advantage 0
  (every one of a group whose rewards are equal) adds nothing to the gradient, so packing it
  only costs micro-batches; DAPO's dynamic sampling drops such groups too. The update's token
  mean is then over the samples trained (Adam is indifferent to the gradient's scale). With an
  entropy term (rl.entropy_coeff not 0) every sample has a gradient, so every one is kept."""
  if entropy_coeff:
    return list(samples), 0
  kept = [s for s in samples if s.has_gradient()]
  return kept, len(samples) - len(kept)


def rollout_stats(groups: Sequence[RolloutGroup], samples: Sequence[RLSample], version: int,
                  lag: int) -> dict[str, float]:
  rewards = np.concatenate([g.rewards for g in groups]) if groups else np.zeros(0)
  stale = collections.Counter(version - s.version for s in samples)
  out = {"reward_mean": float(rewards.mean()) if rewards.size else 0.0,
         "reward_std": float(rewards.std()) if rewards.size else 0.0,
         "pass_rate": float((rewards >= 1.0).mean()) if rewards.size else 0.0,
         "episodes": float(rewards.size), "samples": float(len(samples)),
         "env_errors": float(sum(g.env_errors for g in groups)),
         "deadline_episodes": float(sum(g.deadline_episodes for g in groups)),
         "dropped_extra_episodes": float(sum(g.dropped_extras for g in groups)),
         "parse_errors": float(sum(e.parse_errors for g in groups for e in g.episodes)),
         "max_staleness": float(max(stale) if stale else 0),
         # the largest episode's screenshots as they came back from an env host (Ray; 0 local)
         "returned_screenshot_mb_max": max((e.returned_image_bytes for g in groups
                                            for e in g.episodes), default=0) / 2 ** 20}
  out.update({f"staleness_{k}": float(stale.get(k, 0)) for k in range(lag + 1)})
  out.update(spray_stats(groups))   # shell output bytes / clicks per step, click targets
  return out


def probe_prompt() -> list[int]:
  """A short chat prompt for the post-sync check (real tokenizer ids)."""
  return [int(i) for i in load_tokenizer("").encode(
      "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")]


# --- train ---------------------------------------------------------------------------------------


def train_rl(config: ml_collections.ConfigDict, workdir: str, *, rollout_fn: RolloutFn | None = None
             ) -> dict[str, Any]:
  """Run (or resume) async GRPO; returns the summary (also <workdir>/summary.json)."""
  wall0 = time.perf_counter()
  setup.enable_compile_cache(config.get("compile_cache_dir", ""))
  rl = config.rl
  validate(config)
  # Before anything is built: a loopback engine URL with env hosts elsewhere is a config error.
  engine_checks.refuse_loopback_across_hosts(
      config, rl.server_url or engine_address.learner_url(rl.get("engine_host", "127.0.0.1"),
                                                  rl.get("engine_port", 0)),
      env_slots_per_pool(config))
  t = build(config, workdir)
  done = lifecycle.finished_summary(workdir)   # a larger rl.total_updates continues from its checkpoint
  if done is not None and done.get("updates", 0) >= t.total_steps:
    print(f"{workdir}: already complete ({done['updates']} updates); nothing to do", flush=True)
    return done
  metrics_lib.write_manifest(workdir, config, t.mesh, {"total_updates": t.total_steps,
                                                       "sync_probe": sync_probe_record(rl)})
  if not rl.get("sync_probe", True):
    print("WARNING: config.rl.sync_probe=False: weight syncs are not verified by the log-prob probe "
          "(recorded in manifest.json)", flush=True)

  # init: resume or fresh
  run = lifecycle.Run(config, workdir, t, unit="update", count_key="updates")
  state, data_state_saved, version = run.resume_or_init()
  rollout_fn_owned = None
  if rollout_fn is None:
    rollout_fn = rollout_fn_owned = harness_rollout_fn(config, workdir)
  sampler = FrontierSampler(_task_ids(config, rollout_fn), seed=config.seed,
                            floor=rl.sampler_floor, prior_attempts=rl.sampler_prior_attempts)
  totals = collections.Counter()
  if data_state_saved:
    sampler.load_state_dict(data_state_saved["sampler"])
    totals.update(data_state_saved.get("totals", {}))

  # engine
  weights_root = os.path.join(workdir, "weights")
  server = None
  probe = probe_prompt()
  if rl.server_url:
    client = RolloutClient(rl.server_url, rl.model_name, timeout=rl.request_timeout_s)
    client.wait_ready(rl.server_ready_timeout_s)
    served = _sync(client, t, state.params, weights_root, version, probe, rl)
  else:
    path = export(*t.served_params(state.params), weights_root, version)
    server = RolloutServer(path, model_name=rl.model_name, host=rl.get("engine_host", "127.0.0.1"),
                           port=rl.get("engine_port", 0)).start()
    client = RolloutClient(server.url, rl.model_name, timeout=rl.request_timeout_s)
    client.wait_ready(rl.server_ready_timeout_s)
    client.update_weight_version(str(version))   # samples read their version off the engine
    served = {"version": version, "path": path, "seconds": 0.0, "probe_max_abs_diff": None}
    print(f"embedded rollout server at {server.url} serving {path}", flush=True)
  served_version = [version]
  episode_url = engine_checks.advertised_url(rl, client.base_url)
  reach = engine_checks.check_reachable(config, episode_url, env_slots_per_pool(config))
  if reach:
    print(f"engine {episode_url} reachable from {len(reach)} env nodes", flush=True)
  episode_client = client if episode_url == client.base_url else RolloutClient(
      episode_url, rl.model_name, timeout=rl.request_timeout_s)
  # Each model call's version is read off the engine where the call is made (the env host under
  # Ray), not pickled with the job: a long episode's late calls may be made by newer weights.
  ctx = RolloutContext(episode_client, ServedVersion(episode_client, lambda: served_version[0]),
                       max_tokens=rl.max_tokens,
                       temperature=rl.temperature, top_p=rl.top_p, seed=config.seed)

  admission = AdmissionWindow(rl.max_policy_lag)
  workers = RolloutWorkers(rollout_fn, ctx, sampler, admission, groups_per_update=rl.groups_per_update,
                           episodes_per_group=rl.episodes_per_group, num_workers=rollout_threads(config),
                           learner_version=version, group_prefix=f"r{version}",
                           served_version=lambda: served_version[0])

  # step (compiled on the first batch's shapes; every RL batch has the same shapes)
  scfg = step_lib.StepConfig(**config.step.to_dict())
  # One optimizer step per batch: logp_old is the update's own forward (no separate pass). With
  # several (rl.epochs_per_update), logp_old is the policy's before the first step, filled once,
  # and the clip is what keeps the later steps near it: one step never clips (ratio 1).
  epochs = epochs_per_update(rl)
  objective = obj_lib.rl_objective(loss_config(rl), scfg.loss_chunk_size, logp_old_in_update=epochs == 1)
  logp_fns: dict[int, Callable] = {}
  rows, seq_len = config.data.batch_size, config.data.seq_len
  # An update trains every sample of its groups that fits max_micro_batches micro-batches of `rows`
  # rows, by gradient accumulation (one optimizer step, so logp_old stays the update's own forward);
  # one compiled step per micro-batch count used (powers of two).
  max_micro = int(rl.get("max_micro_batches", 1))
  if scfg.grad_accum_steps != 1:
    raise ConfigError(f"step.grad_accum_steps={scfg.grad_accum_steps}: RL accumulates over "
                      "rl.max_micro_batches micro-batches of data.batch_size rows; set step.grad_accum_steps=1")
  with_images = screenshot_kinds(rl.kinds)
  patch_budget = int(config.data.patch_budget) if with_images else 0
  train_steps: dict[int, Callable] = {}
  schedule = opt_lib.schedule(opt_lib.OptimizerConfig.from_config(config.optimizer, t.total_steps))
  peak, _ = metrics_lib.device_peak_tflops(config.log.peak_tflops_per_device)
  logger = metrics_lib.Logger.from_config(workdir, config, t.total_steps, peak)
  patches = f" + {patch_budget} patches" if with_images else ""
  print(f"{config.get('name', '')}: {t.total_steps} updates of {rl.groups_per_update} groups x "
        f"{rl.episodes_per_group} episodes, batch {rows} x ({seq_len} tokens{patches}), "
        f"kinds {rl.kinds or 'all'}, lag <= {rl.max_policy_lag}, mesh {dict(t.mesh.shape)}", flush=True)
  run.logger = logger
  stop, diverged = run.stop, run.diverged
  last: dict[str, float] = {}

  def data_state() -> dict:
    return {"version": version, "sampler": sampler.state_dict(), "totals": dict(totals)}

  restored_failed, restored_started = totals["failed_groups"], totals["started_groups"]
  workers.start()
  with run.guarded():   # SIGTERM caught; a NonFiniteRun closes the checkpointer and logger
    try:
      while version < t.total_steps:
        t0 = time.perf_counter()
        groups, dropped, empty = gather_groups(workers, admission, rl, version, lambda: stop.requested)
        if stop.requested and len(groups) < rl.groups_per_update:
          run.save_now(version, state, data_state())
          return run.stopped(version)
        wait_s = time.perf_counter() - t0
        trained_groups, unrewarded = groups_for_update(groups, rl)
        samples, flat = samples_with_advantages(trained_groups, rl.adv_eps, advantage_weights(rl),
                                                rl.get("credit", "episode"),
                                                float(rl.get("parse_error_advantage", 0.0)))
        flat += unrewarded   # left out: every reward 0, so flat too
        samples, zero_adv = samples_with_gradient(samples, entropy_coeff(rl))
        batch, report = pack_rl_update(samples, rows=rows, max_micro_batches=max_micro, seq_len=seq_len,
                                       patch_budget=patch_budget, image_keys=with_images)
        micro = report["micro_batches"]
        trained = [samples[i] for r in report["row_samples"] for i in r]
        stats = rollout_stats(groups, trained, version, rl.max_policy_lag)
        stats["unrewarded_groups_left_out"] = float(unrewarded)
        if stats["max_staleness"] > rl.max_policy_lag:  # the drop above makes this unreachable
          raise AssertionError(f"a sample {stats['max_staleness']} updates old reached the learner")
        t1 = time.perf_counter()
        rest_targets = rest_target_count(t, batch)
        dev = t.device_batch(batch, strict=False)   # a compact learner: sampled ids on its rows
        with jax.set_mesh(t.mesh):
          if micro not in train_steps:
            train_steps[micro] = step_lib.jit_train_step(t.graphdef, t.rest, t.tx,
                                                         dataclasses.replace(scfg, grad_accum_steps=micro),
                                                         t.mesh, t.shardings, batch, objective=objective)
          if epochs > 1:
            if micro not in logp_fns:
              logp_fns[micro] = jax.jit(obj_lib.make_logp_fn(t.graphdef, t.rest, scfg.loss_chunk_size, micro),
                                        out_shardings=step_lib.batch_shardings(t.mesh, batch)["logp_old"])
            dev["logp_old"] = logp_fns[micro](state.params, dev)
          first = None
          for _ in range(epochs):
            state, metrics = train_steps[micro](state, dev)
            first = first or metrics
        host = {k: float(np.asarray(v)) for k, v in jax.device_get(metrics).items()}
        if epochs > 1:   # the last step's figures (how far the update went), and the first's loss
          host["first_epoch_loss"] = float(np.asarray(first["loss"]))
        update_s = time.perf_counter() - t1
        version += 1
        workers.set_learner_version(version)
        workers.release(len(groups))
        served = _sync(client, t, state.params, weights_root, version, probe, rl)
        served_version[0] = version
        workers.set_learner_version(version)   # the sync landed: admit work at the new version
        totals["failed_groups"] = workers.failed_groups + restored_failed
        totals["started_groups"] = workers.started_groups + restored_started
        totals.update(dropped_stale_groups=dropped, empty_groups=empty, groups=len(groups),
                      env_errors=int(stats["env_errors"]), deadline_episodes=int(stats["deadline_episodes"]),
                      dropped_extra_episodes=int(stats["dropped_extra_episodes"]),
                      left_out_samples=report["left_out"], skipped_samples=sum(report["skipped"].values()))
        host.update(update_metrics(host, stats, served, totals, report, samples, dropped=dropped, empty=empty,
                                   flat=flat, zero_adv=zero_adv, version=version, wait_s=wait_s, update_s=update_s,
                                   wall_s=time.perf_counter() - t0))
        if rest_targets is not None:
          host["rest_targets"] = float(rest_targets)
        if int(host.get("nonfinite", 0)) and scfg.nonfinite == "stop":
          raise FloatingPointError(f"update {version}: non-finite loss or gradient")
        flops = flops_lib.batch_flops(t.model_cfg, batch, loss_chunk_size=scfg.loss_chunk_size)
        # each epoch is one step's compute (logp_old's forward, ~1/3 of a step, is not counted)
        flops = {k: v * epochs if k.startswith("flops") else v for k, v in flops.items()}
        last = logger.step(version, host, flops,
                           {"lr": float(schedule((version - 1) * epochs))}) or host
        rl_record.append_groups(workdir, version, groups, samples, host)   # the report's RL view
        diverged.update(version, host)
        if run.save_if_due(version, state, data_state):
          return run.stopped(version)
        # a SIGTERM during the last update falls through to the final save below
    finally:
      workers.stop()
      # Closing the rollouts first ends the groups still waiting in the queue (their threads
      # return at once) instead of playing every admitted episode out.
      if rollout_fn_owned is not None and hasattr(rollout_fn_owned, "close"):
        rollout_fn_owned.close()
      workers.close(30.0)   # daemon threads: an engine call still running is left behind
      if server is not None:
        server.stop()

  run.finish(version, state, data_state(), setup.final_params(t, state.params))
  logger.close()
  rows_ = [r for r in metrics_lib.read_metrics(workdir) if "reward_mean" in r and "step" in r]
  summary = {"name": config.get("name", ""), "updates": version, "total_updates": t.total_steps,
             "reward_mean_first": rows_[0]["reward_mean"] if rows_ else None,
             "reward_mean_last": rows_[-1]["reward_mean"] if rows_ else None,
             "final": {k: v for k, v in (last or {}).items() if isinstance(v, float)},
             "totals": dict(totals), "served_weights": served["path"],
             "wall_s": time.perf_counter() - wall0}
  return run.write_summary(summary)


def gather_groups(workers: RolloutWorkers, admission: AdmissionWindow, rl: ml_collections.ConfigDict,
                  version: int, stop_requested: Callable[[], bool]) -> tuple[list[RolloutGroup], int, int]:
  """Up to rl.groups_per_update fresh groups for the update at `version`: (groups, stale groups
  dropped, empty groups). Fewer groups only on SIGTERM (the state stays that of the last update)."""
  groups, dropped, empty = [], 0, 0
  while len(groups) < rl.groups_per_update:
    g = workers.take(rl.group_timeout_s, stop=stop_requested)
    if g is None:  # SIGTERM while waiting
      workers.release(len(groups))
      break
    if g.version is None:
      empty += 1
      workers.release(1)
    elif not admission.is_fresh(g.version, version):
      dropped += 1
      workers.release(1)
    else:
      groups.append(g)
  return groups, dropped, empty


def update_metrics(host: dict[str, float], stats: dict[str, float], served: dict[str, Any], totals: Any,
                   report: dict[str, Any], samples: Sequence[RLSample], *, dropped: int, empty: int, flat: int,
                   zero_adv: int, version: int, wait_s: float, update_s: float, wall_s: float) -> dict[str, float]:
  """One update's logged scalars beside the step's own (`host`): rollout stats, sync, packing, timing."""
  out = dict(stats, version=float(version), served_version=float(served["version"]),
             sync_seconds=served["seconds"],
             dropped_stale_groups=float(dropped), dropped_stale_groups_total=float(totals["dropped_stale_groups"]),
             failed_groups_total=float(totals["failed_groups"]),
             empty_groups=float(empty), zero_advantage_groups=float(flat),
             zero_advantage_samples=float(zero_adv),   # not packed: no gradient
             live_micro_batches=float(report.get("live_micro_batches", 1)),
             packed_samples=float(report["packed"]), left_out_samples=float(report["left_out"]),
             micro_batches=float(report.get("micro_batches", 1)),
             skipped_samples=float(sum(report["skipped"].values())),
             truncated_prompts=float(report["truncated_prompt"]), fill=float(report["fill"]),
             patch_fill=float(report["patch_fill"]),
             image_samples=float(sum(bool(samples[i].images) for r in report["row_samples"] for i in r)),
             wait_seconds=wait_s, update_seconds=update_s,
             # waiting for groups / the update's wall time (wait, pack, step, sync)
             learner_idle_fraction=wait_s / max(wall_s, 1e-9),
             policy_tokens_per_s=host.get("policy_tokens", 0.0) / max(update_s, 1e-9))
  if served["probe_max_abs_diff"] is not None:   # None: config.rl.sync_probe=False
    out["probe_max_abs_diff"] = served["probe_max_abs_diff"]
  return out


def rest_target_count(t: Trainer, batch: dict[str, np.ndarray]) -> int | None:
  """Trained tokens the engine sampled outside a compact learner's vocabulary (they train its rest
  row); None without one."""
  if t.vocab is None:
    return None
  trained = np.asarray(batch["loss_mask"]) > 0
  return int((t.vocab.table[np.asarray(batch["targets"])[trained]] == t.vocab.rest_row).sum())


def _sync(client: RolloutClient, t: Trainer, params: Any, out_root: str, version: int,
          probe: list[int], rl: ml_collections.ConfigDict) -> dict[str, Any]:
  """Export + reload + verify (weight_sync.sync_weights: the engine must serve the new path
  and its greedy probe log-probs must match the learner's, unless config.rl.sync_probe=False)."""
  check = bool(rl.get("sync_probe", True))
  # The probe's reference is the learner as it trains (on compact rows when it has a vocabulary);
  # the engine gets the full-vocabulary params it stands for.
  learner = (model_logprobs_fn(state_lib.merge_model(t.graphdef, params, t.rest), t.model_cfg,
                               vocab=t.vocab) if check else None)
  served_params, served_cfg = t.served_params(params)
  rep = sync_weights(client, served_params, served_cfg, out_root=out_root, version=version,
                     probe_tokens=probe, learner_logprobs_fn=learner,
                     tolerance=rl.sync_tolerance, keep=rl.keep_exports, probe=check)
  return {"version": rep.version, "path": rep.path, "seconds": rep.seconds,
          "probe_max_abs_diff": rep.probe_max_abs_diff}


# --- harness -------------------------------------------------------------------------------------


def harness_rollout_fn(config: ml_collections.ConfigDict, workdir: str):
  """HarnessRollouts over config.rl.suite / tasks / kinds with local sandboxed environments."""
  rl = config.rl
  try:
    check_available()
  except SandboxUnavailable as e:
    raise ConfigError(f"RL rollouts need the episode sandbox: {e}") from None
  tasks = load_rl_tasks(rl.suite, rl.tasks, rl.kinds)
  e = config.env
  env_cfg = env_config_from(e)
  ep_cfg = EpisodeConfig(max_steps=rl.max_episode_steps, out_dir=os.path.join(workdir, "episodes"),
                         deadline_s=rl.get("episode_deadline_s", 0.0), **config.episode.to_dict())
  slots = env_slots_per_pool(config)
  env_factory = lambda: LocalEnv(env_cfg)
  backend = e.get("backend", "local")
  if backend not in BACKENDS:
    raise ConfigError(f"config.env.backend={backend!r}: expected one of {BACKENDS}")
  return HarnessRollouts(tasks, env_factory, ep_cfg, slots, pool_factory=lambda: make_pool(
      backend, env_factory, ep_cfg, slots, ray_address=e.get("ray_address", ""),
      slots_per_node=e.get("slots_per_node", slots)),
      group_queue=rl.get("group_queue", "per_worker"), redundancy=rl.get("group_redundancy", 0))


def env_slots_per_pool(config: ml_collections.ConfigDict) -> int:
  """Slots of one pool: the whole fleet with the shared group queue, else each thread's share."""
  rl = config.rl
  if rl.get("group_queue", "per_worker") == "shared":
    return rl.env_slots
  return max(1, rl.env_slots // rl.rollout_workers)


def rollout_threads(config: ml_collections.ConfigDict) -> int:
  """Rollout threads: with the shared queue one per group the admission window lets in flight
  (each only waits for its group), else rl.rollout_workers (each with its own pool)."""
  rl = config.rl
  if rl.get("group_queue", "per_worker") == "shared":
    return rl.admission_window * rl.groups_per_update
  return rl.rollout_workers


def load_rl_tasks(suite: str, tasks: str, kinds: str) -> list:
  try:
    pkgs = load_tasks(suite, tasks, kinds, field="config.rl")
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if not pkgs:
    raise ConfigError(f"no RL tasks left from suite={suite!r} tasks={tasks!r} kinds={kinds!r}")
  return pkgs


def _task_ids(config: ml_collections.ConfigDict, rollout_fn) -> list[str]:
  if hasattr(rollout_fn, "tasks"):
    return list(rollout_fn.tasks)
  if not config.rl.tasks:
    raise ConfigError("a custom rollout_fn needs config.rl.tasks (comma-separated task ids)")
  return config.rl.tasks.split(",")
