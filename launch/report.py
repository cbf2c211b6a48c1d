"""The episode viewer: a static HTML report of an eval, RL or curriculum workdir.

    python -m launch.report --workdir=workdirs/eval_scripted
    python -m launch.report --workdir=workdirs/eval_rl --compare=workdirs/eval_sft

Writes <workdir>/report/index.html (summary, per-family/per-task tables, sortable episode table,
skipped lines), one page per episode under report/episodes/, report/rl.html for an RL run, and JPEG
thumbnails under report/thumbs/. The pages open from file:// with no server and no network.
"""
from __future__ import annotations

import json
import sys

from absl import app, flags

_WORKDIR = flags.DEFINE_string("workdir", None, "Eval, RL or curriculum workdir.", required=True)
_COMPARE = flags.DEFINE_string("compare", None, "Another run's workdir: its tasks side by side with this one's.")


def main(argv):
  del argv
  from mage_jax.report.build import build_report
  try:
    out = build_report(_WORKDIR.value, _COMPARE.value)
  except (FileNotFoundError, ValueError) as e:
    sys.exit(f"launch.report: {e}")
  print(json.dumps(out, indent=1))


if __name__ == "__main__":
  app.run(main)
