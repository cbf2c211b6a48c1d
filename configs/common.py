"""Shared builders for the stage configs (configs/stage*.py).

Every SFT stage config has the same sections, read by `mage_jax.train.loop` and checked
by `mage_jax.train.run_setup.check_config` (every numeric field: NUMERIC_FIELDS):

  name, stage, seed, compile_cache_dir; workdir-independent settings only
  model        configs/models.py preset (+ runtime knobs: compute dtype, remat)
  mesh         data / fsdp / tensor sizes (one may be -1 = fill)
  data         mage_jax/data/config.py default_data_config() + stage overrides
  optimizer    mage_jax/train/optimizer.OptimizerConfig fields
  step         mage_jax/train/step.StepConfig fields
  train        num_epochs / total_steps / paper_bins (FLOPs accounting) / max_nonfinite_steps
  init         from_dir (previous stage workdir or HF dir) / vision_dir
  checkpoint   every_steps / keep / async_save
  log          every_steps / tensorboard / peak_tflops_per_device / profile_steps
  eval         every_steps / num_batches / heldout_dir / click_jsonl / click_samples
  synth        (tiny) synthetic data generation via mage_jax.data.synth

Full-size numbers are the paper's (DESIGN.md): 32,768-token bins, bf16
compute, a 24-GPU training mesh (data 3 × fsdp 8).
"""
from __future__ import annotations

import ml_collections

from configs import models
from mage_jax.data.config import default_data_config, sources_config
from mage_jax.train import guards
from mage_jax.runs.config_files import load_config_module  # noqa: F401  (kept for existing callers)

PAPER_SEQ_LEN = 32_768
PAPER_MESH = dict(data=3, fsdp=8, tensor=1)
LM_PARAMS = 4.02e9  # the paper's 6·N·D uses LM parameters only


def base_config(*, name: str, stage: int, tiny: bool) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = name
  c.stage = stage
  c.seed = 0
  # Persistent XLA compilation cache ('' = off): runs with the same program (a
  # resumed run, the curriculum's stages of one shape) load it instead of compiling.
  c.compile_cache_dir = ""

  c.model = models.get_config("mage_vl_tiny" if tiny else "mage_vl_4b")
  for tower in ("text", "vision"):
    c.model[tower].compute_dtype = "float32" if tiny else "bfloat16"
    c.model[tower].param_dtype = "float32"
    c.model[tower].remat_policy = "none" if tiny else "full"
    # Full size targets NVIDIA GPUs: the segment-aware flash kernel. Tiny runs on CPU.
    c.model[tower].attention_backend = "xla" if tiny else "pallas_gpu"

  c.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=-1, tensor=1) if tiny else PAPER_MESH)

  c.data = default_data_config()
  if tiny:
    c.data.seq_len = 1024
    c.data.patch_budget = 1024
    c.data.pack_buffer = 64
    c.data.batch_size = 4
    c.data.read_threads = 1
    c.data.read_prefetch = 4
    c.data.records_per_shard = 64
    c.data.render.context_len = 1024
    c.data.render.max_pixels = 320 * 224
  else:
    c.data.seq_len = PAPER_SEQ_LEN
    c.data.render.context_len = PAPER_SEQ_LEN
    c.data.batch_size = 24  # one 32k bin per training GPU per step

  c.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=3e-3 if tiny else 1e-5, warmup_steps=5 if tiny else 200,
      end_lr_ratio=0.1, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0 if tiny else 0.1,
      clip_norm=1.0, lr_multipliers=ml_collections.ConfigDict(), freeze=()))

  c.step = ml_collections.ConfigDict(dict(
      grad_accum_steps=1, loss_chunk_size=64 if tiny else 2048, z_loss_weight=0.0,
      per_sequence_loss=False, nonfinite="skip"))

  c.train = ml_collections.ConfigDict(dict(
      num_epochs=1,
      total_steps=-1,     # -1: num_epochs x bins in the packed data / batch_size
      paper_bins=0,       # bins per epoch in the paper's run (FLOPs accounting only)
      # Stop with an error (saving nothing as final) after this many consecutive steps whose
      # loss or gradient is non-finite: the step skips such updates, so a diverged run would
      # otherwise run to the end and export its last finite params as a success.
      max_nonfinite_steps=guards.DEFAULT_MAX_NONFINITE_STEPS,
  ))

  c.init = ml_collections.ConfigDict(dict(
      from_dir="",       # '' fresh | previous stage workdir (Orbax) | HF dir (safetensors)
      vision_dir="",     # optional HF dir for the ViT when `from_dir` is an LM-only HF dir
  ))

  c.checkpoint = ml_collections.ConfigDict(dict(
      every_steps=10 if tiny else 500, keep=3, async_save=True))

  c.log = ml_collections.ConfigDict(dict(
      every_steps=5 if tiny else 10, tensorboard=True,
      peak_tflops_per_device=0.0,   # 0: measure a matmul peak at start
      profile_steps="",             # "start:stop" writes a jax.profiler trace for those steps
      batch_fingerprints=False))    # log a hash per trained bin (resume tests)

  c.eval = ml_collections.ConfigDict(dict(
      every_steps=0,            # also every N steps during training (0: only at the end)
      num_batches=2 if tiny else 20,
      heldout_dir="",           # packed held-out shards per source; '' = skip held-out loss
      click_jsonl="",           # grounding episodes for click accuracy; '' = skip
      click_samples=8 if tiny else 500,
      max_new_tokens=48 if tiny else 256))

  # Data preparation before training. Relative source paths resolve against
  # synth.out (default <workdir>/synth); an empty data.packed_dir means
  # <workdir>/packed, packed from the JSONL sources when `pack_if_missing`;
  # then the last `heldout_episodes` episodes of each source are packed into
  # <packed_dir>_heldout instead, for the held-out loss (eval.heldout_dir wins when set).
  c.prep = ml_collections.ConfigDict(dict(pack_if_missing=tiny, heldout_episodes=1 if tiny else 0))
  c.synth = ml_collections.ConfigDict(dict(
      enabled=tiny, out="", seed=0, episodes=32, grounding=16, width=640, height=400))
  return c


def env_fleet_fields(slots_per_node: int = 8) -> dict:
  """Where episodes run, for the `env` section of eval and RL configs (mage_jax.agent.slots.make_pool):
  backend "local" (threads on this host, the default) or "ray" (one actor per slot on hosts that
  advertise the `env_slot` resource); ray_address "" starts a private one-node Ray here,
  "auto" / "host:6379" joins a cluster; slots_per_node is what that private Ray (and
  launch/slurm/ray_env_node.sh) advertises. The paper's fleet: 1,120 slots on 70 hosts = 16 per host."""
  return dict(backend="local", ray_address="", slots_per_node=slots_per_node)


def endpoint_fields(**overrides) -> dict:
  """How an LLM path reaches its OpenAI-compatible endpoint (mage_jax/llm/client.py `from_config`),
  for the forge `llm`, evolve `author` and `synthesis` and eval/evolve `policy` sections.
  api_key_env names the environment variable holding the key ("" = no Authorization header): the
  key itself is never in a config, manifest or result. server "auto" asks GET /version whether
  it is vLLM (vLLM-only request fields are sent only then), or "vllm" / "openai". prices: $ per
  1M tokens by model name ("default" for any other), with an optional "cached" price."""
  return dict(api_key_env="", headers={}, server="auto", timeout_s=120.0, http_retries=4,
              max_backoff_s=60.0, max_concurrency=8,
              prices={"default": {"prompt": 0.60, "completion": 2.40, "cached": 0.30}}, **overrides)


def set_sources(c: ml_collections.ConfigDict, spec: dict) -> None:
  """spec: {source: (jsonl paths, weight, stage)}."""
  c.data.sources = sources_config(spec)


def sweep_points(**axes) -> list[dict]:
  """Cartesian product of {dotted.field: [values]} as a list of override dicts."""
  import itertools
  keys = list(axes)
  return [dict(zip(keys, vals)) for vals in itertools.product(*(axes[k] for k in keys))]


def check_arg(arg: str | None, allowed=("", "tiny")) -> str:
  arg = arg or ""
  if arg not in allowed:
    raise ValueError(f"config arg {arg!r} is not one of {allowed}")
  return arg
