"""Train one SFT stage.

  python -m launch.train --config=configs/stage4_hybrid_sft.py:tiny --workdir=workdirs/stage4_tiny
  python -m launch.train --config=configs/stage4_hybrid_sft.py --workdir=workdirs/stage4 \
      --config.init.from_dir=workdirs/stage3 --config.optimizer.learning_rate=2e-5

`--config.<field>=...` overrides any field (unknown fields are an error). The
workdir auto-resumes from its latest good checkpoint. SIGTERM finishes the
current step, saves a checkpoint at it and exits with status 0 (the printed
summary has "stopped": true); rerun the same command to continue.
Multi-host: jax.distributed is initialised from SLURM variables or
--coordinator/--num_processes/--process_id (see launch/slurm/train.sbatch).
"""
from __future__ import annotations

from absl import app, flags, logging
from ml_collections import config_flags

from launch import shell

_CONFIG = config_flags.DEFINE_config_file("config", None, "Stage config file[:arg].", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (auto-resumes).", required=True)
_COORD = flags.DEFINE_string("coordinator", None, "host:port of process 0 (multi-host).")
_NPROC = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-host).")
_PID = flags.DEFINE_integer("process_id", None, "This process's index (multi-host).")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", None, "Fake CPU devices per process (tests).")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # Orbax logs every write at INFO
  from mage_jax.train import distributed
  distributed.initialize(coordinator=_COORD.value, num_processes=_NPROC.value,
                         process_id=_PID.value, cpu_devices=_CPU_DEVICES.value)
  from mage_jax.train import loop, run_setup
  shell.run_and_print(loop.train, _CONFIG.value, _WORKDIR.value, run_setup.ConfigError)


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main, flags_parser=shell.parse_flags)
