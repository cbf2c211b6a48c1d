"""Stage 2: GUI agent SFT on multi-step GUI trajectories (156.7K in the paper).

  python -m launch.train --config=configs/stage2_gui_sft.py --workdir=workdirs/stage2 \
      --config.init.from_dir=workdirs/stage1 --config.data.packed_dir=data/packed/stage2
  python -m launch.train --config=configs/stage2_gui_sft.py:tiny --workdir=workdirs/stage2_tiny

Paper compute: 1.55 ZFLOPs (6·N·D, LM only); `paper_bins` derived from it.
"""
from configs import common


def get_config(arg: str | None = None):
  tiny = common.check_arg(arg) == "tiny"
  c = common.base_config(name="stage2_gui_sft", stage=2, tiny=tiny)
  if tiny:
    common.set_sources(c, {"gui": ("gui.jsonl", 1.0, 2)})
    c.train.total_steps = 30
  else:
    common.set_sources(c, {"gui": ("data/stage2/gui_trajectories.jsonl", 1.0, 2)})
    c.train.paper_bins = 1_961_130
  return c


def sweep(arg: str | None = None):
  return common.sweep_points(**{"optimizer.learning_rate": [5e-6, 1e-5, 2e-5],
                                "optimizer.warmup_steps": [100, 300]})
