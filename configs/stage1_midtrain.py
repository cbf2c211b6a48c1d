"""Stage 1: GUI-oriented midtraining (grounding, reasoning, schema-valid tool calls).

  python -m launch.train --config=configs/stage1_midtrain.py --workdir=workdirs/stage1 \
      --config.init.from_dir=/path/to/Qwen3-4B-Instruct-2507 --config.data.packed_dir=data/packed/stage1
  python -m launch.train --config=configs/stage1_midtrain.py:tiny --workdir=workdirs/stage1_tiny

Stage-1 data options: selective `<think>` body masking, prompt decoupling
(a drawn system-prompt phrasing per sample) and a grounding source whose
held-out clicks give click accuracy. Initialises from the Qwen3 LM (HF dir)
with a fresh ViT, or `init.vision_dir` for a given one.
Paper compute: 1.18 ZFLOPs (6·N·D, LM only); the paper gives no bin count, so
`paper_bins` is derived from it (1.18e21 / (6 × 4.02e9 × 32,768)).
"""
from configs import common


def get_config(arg: str | None = None):
  tiny = common.check_arg(arg) == "tiny"
  c = common.base_config(name="stage1_midtrain", stage=1, tiny=tiny)
  if tiny:
    common.set_sources(c, {"grounding": ("grounding.jsonl", 1.0, 1), "gui": ("gui.jsonl", 1.0, 1)})
    c.train.total_steps = 30
    c.eval.click_jsonl = "grounding.jsonl"
  else:
    common.set_sources(c, {"grounding": ("data/stage1/grounding.jsonl", 1.0, 1),
                           "gui_reasoning": ("data/stage1/gui_reasoning.jsonl", 1.0, 1)})
    c.train.paper_bins = 1_492_990
    c.optimizer.learning_rate = 2e-5
    c.eval.click_jsonl = "data/stage1/grounding_heldout.jsonl"
  c.data.render.mask_think_body = True
  c.data.render.prompt_variants = True
  return c


def sweep(arg: str | None = None):
  return common.sweep_points(**{"optimizer.learning_rate": [1e-5, 2e-5, 4e-5]}) if arg != "tiny" \
      else common.sweep_points(**{"optimizer.learning_rate": [1e-3, 3e-3]})
