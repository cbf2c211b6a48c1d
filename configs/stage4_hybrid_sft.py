"""Stage 4: hybrid CUA SFT — 318,837 hybrid trajectories packed into 1,377,805
bins of 32,768 tokens, trained for 2 epochs (2.17 ZFLOPs, 6·N·D over 4.02B LM params).

  python -m launch.train --config=configs/stage4_hybrid_sft.py --workdir=workdirs/stage4 \
      --config.init.from_dir=workdirs/stage3 --config.data.packed_dir=data/packed/stage4
  python -m launch.train --config=configs/stage4_hybrid_sft.py:tiny --workdir=workdirs/stage4_tiny

The mixture keeps GUI-only and terminal-only trajectories beside the hybrid
ones (weights per source in data.sources.<name>.weight).
"""
from configs import common


def get_config(arg: str | None = None):
  tiny = common.check_arg(arg) == "tiny"
  c = common.base_config(name="stage4_hybrid_sft", stage=4, tiny=tiny)
  if tiny:
    common.set_sources(c, {"hybrid": ("hybrid.jsonl", 2.0, 4), "gui": ("gui.jsonl", 1.0, 4),
                           "terminal": ("terminal.jsonl", 1.0, 4)})
    c.train.total_steps = 30
  else:
    common.set_sources(c, {"hybrid": ("data/stage4/hybrid_trajectories.jsonl", 1.0, 4)})
    c.train.paper_bins = 1_377_805
  c.train.num_epochs = 2
  c.data.num_epochs = -1  # the loop stops at train.num_epochs worth of steps
  return c


def sweep(arg: str | None = None):
  return common.sweep_points(**{"optimizer.learning_rate": [5e-6, 1e-5, 2e-5],
                                "step.z_loss_weight": [0.0, 1e-4]})
