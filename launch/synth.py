"""Generate a synthetic trajectory set (GUI, terminal, hybrid, stage-1 grounding).

  python -m launch.synth --out=workdirs/synth --seed=0 --episodes=24 --grounding=8 \
      --gui_terminal_ratio=0.68

Writes <out>/{gui,terminal,hybrid,grounding}.jsonl (native format, docs/data.md),
<out>/images/ and <out>/manifest.json with the realised GUI:terminal split of tool calls.
Deterministic by --seed.
"""
from __future__ import annotations

import json

from absl import app, flags

from mage_jax.data import synth

FLAGS = flags.DEFINE_string("out", None, "Output folder.", required=True)
_SEED = flags.DEFINE_integer("seed", 0, "Random seed (same seed, same files).")
_EPISODES = flags.DEFINE_integer("episodes", 24, "Trajectory episodes (GUI + terminal + hybrid).")
_GROUNDING = flags.DEFINE_integer("grounding", 8, "Stage-1 grounding samples.")
_RATIO = flags.DEFINE_float("gui_terminal_ratio", 0.68, "Target share of computer_use calls.")
_WIDTH = flags.DEFINE_integer("width", 640, "Screen width in pixels.")
_HEIGHT = flags.DEFINE_integer("height", 400, "Screen height in pixels.")
_HYBRID_EVERY = flags.DEFINE_integer("hybrid_every", 4, "Every N-th episode is hybrid (0: none).")


def main(argv):
  del argv
  manifest = synth.generate(FLAGS.value, seed=_SEED.value, episodes=_EPISODES.value,
                            grounding=_GROUNDING.value, gui_terminal_ratio=_RATIO.value,
                            width=_WIDTH.value, height=_HEIGHT.value,
                            hybrid_every=_HYBRID_EVERY.value)
  print(json.dumps(manifest, indent=2, sort_keys=True))


if __name__ == "__main__":
  app.run(main)
