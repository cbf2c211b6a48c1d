"""Render trajectory JSONL and pack it into ArrayRecord shards of fixed-shape bins.

  python -m launch.pack --config=configs/data_tiny.py:workdirs/synth [--out=DIR] [--workers=N]

Works with any config module whose get_config() has a `.data` field built from
mage_jax/data/config.py. Each source (config.data.sources.<name>.paths, JSONL,
comma-separated) is read, rendered in a multiprocessing pool (one task per
episode), packed with windowed best-fit-decreasing under the token and patch
budgets, and written to <packed_dir>/<name>/shard-*.array_record.
<packed_dir>/manifest.json holds counts of episodes, samples and bins, token and
patch fill, skipped items by reason (reading, rendering, packing) and per-source counts.
The work is `mage_jax.data.pack_job.pack()`; this module is only its command line.
"""
from __future__ import annotations

import json

from absl import app, flags
from ml_collections import config_flags

from mage_jax.data import pack_job

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file with a .data field.")
_OUT = flags.DEFINE_string("out", None, "Output folder (default: config.data.packed_dir).")
_WORKERS = flags.DEFINE_integer("workers", None, "Render processes (default: config.data.pack_workers; "
                                "0 = all cores, 1 = in this process).")


def main(argv):
  del argv
  config = _CONFIG.value
  if config is None or "data" not in config:
    raise app.UsageError("--config is required and must have a .data field")
  out = _OUT.value or config.data.packed_dir
  if not out:
    raise app.UsageError("no output folder: pass --out or set config.data.packed_dir")
  workers = _WORKERS.value if _WORKERS.value is not None else config.data.pack_workers
  m = pack_job.pack(config.data, out, workers)
  summary = {k: m[k] for k in ("episodes", "samples", "bins", "token_fill", "patch_fill",
                               "skipped", "samples_per_s")}
  summary["per_source"] = {n: {k: s[k] for k in ("episodes", "samples", "bins")}
                           for n, s in m["sources"].items()}
  print(json.dumps(summary, indent=2))
  print(f"packed {m['samples']} samples into {m['bins']} bins ({pack_job.describe_skipped(m) or '0 skipped'})")
  print(f"wrote {out}/manifest.json")


if __name__ == "__main__":
  app.run(main)
