"""Stage 3: coding & terminal SFT (563.7K repository/terminal trajectories in the paper).

  python -m launch.train --config=configs/stage3_code_sft.py --workdir=workdirs/stage3 \
      --config.init.from_dir=workdirs/stage2 --config.data.packed_dir=data/packed/stage3
  python -m launch.train --config=configs/stage3_code_sft.py:tiny --workdir=workdirs/stage3_tiny

Terminal trajectories are mostly text, so the ViT is frozen here by default
(`optimizer.freeze=('visual',)`). Paper compute: 0.27 ZFLOPs; `paper_bins` derived from it.
"""
from configs import common


def get_config(arg: str | None = None):
  tiny = common.check_arg(arg) == "tiny"
  c = common.base_config(name="stage3_code_sft", stage=3, tiny=tiny)
  if tiny:
    common.set_sources(c, {"terminal": ("terminal.jsonl", 1.0, 3)})
    c.train.total_steps = 30
  else:
    common.set_sources(c, {"terminal": ("data/stage3/terminal_trajectories.jsonl", 1.0, 3)})
    c.train.paper_bins = 341_617
  c.optimizer.freeze = ("visual",)
  return c


def sweep(arg: str | None = None):
  return common.sweep_points(**{"optimizer.learning_rate": [5e-6, 1e-5]})
