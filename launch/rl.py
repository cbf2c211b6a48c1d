"""Online RL (stage 5): async GRPO against a rollout engine.

  python -m launch.rl --config=configs/stage5_rl.py:tiny --workdir=workdirs/stage5_tiny
  python -m launch.rl --config=configs/stage5_rl.py --workdir=workdirs/stage5 \
      --config.init.from_dir=workdirs/stage4 --server_url=http://vllm-host:8000/v1

Without --server_url an embedded rollout server (mage_jax.engine.rollout_server) is
started in this process on the exported initial weights; with it, the engine
(vLLM with VLLM_SERVER_DEV_MODE=1 and --logprobs-mode processed_logprobs, or
`python -m launch.serve`) gets the learner's weights by disk reload after every
update. The workdir auto-resumes (state, policy version, task sampler); SIGTERM
saves a checkpoint after the current update and exits 0. At the end it writes the report
<workdir>/report/ (launch.report: rollout groups, learning curve). See docs/rl.md.
"""
from __future__ import annotations

from absl import app, flags, logging
from ml_collections import config_flags

from launch import shell

_CONFIG = config_flags.DEFINE_config_file("config", None, "Stage 5 config file[:arg].", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (auto-resumes).", required=True)
_SERVER_URL = flags.DEFINE_string("server_url", None,
                                  "OpenAI base URL of the rollout engine (e.g. http://host:8000/v1); "
                                  "default: config.rl.server_url, '' = embedded server.")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # Orbax logs every write at INFO
  from mage_jax.rl import loop
  from mage_jax.train import run_setup
  config = shell.require_config(_CONFIG.value)
  if _SERVER_URL.value is not None:
    config.rl.server_url = _SERVER_URL.value
  shell.run_and_print(loop.train_rl, config, _WORKDIR.value, run_setup.ConfigError)
  from mage_jax.report.build import build_report   # the episode viewer's RL view (groups.jsonl)
  print("report:", build_report(_WORKDIR.value)["index"])


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main, flags_parser=shell.parse_flags)
