"""PNG loss / throughput curves of a run (or of every stage of a curriculum).

  python -m launch.plot --workdir=workdirs/demo

Reads <workdir>/metrics.jsonl, or <workdir>/<stage>/metrics.jsonl for each stage
of a curriculum workdir, and writes <workdir>/plots/{loss,throughput}.png.
The logic is `mage_jax.train.plots`; this module is only its command line.
"""
from __future__ import annotations

from absl import app, flags

from mage_jax.train import plots

_WORKDIR = flags.DEFINE_string("workdir", None, "Run or curriculum directory.", required=True)


def main(argv):
  del argv
  for p in plots.plot(_WORKDIR.value):
    print(f"wrote {p}")


if __name__ == "__main__":
  app.run(main)
