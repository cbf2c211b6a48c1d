"""Import third-party task suites as our task packages (docs/osworld_import.md).

  python -m launch.import_tasks --format=osworld --src=evaluation_examples/examples --out=tasks/osworld \
      [--cache=osworld_cache] [--references=references.json]

--src: one OSWorld task JSON or a directory searched recursively. --cache: the local file cache for
`download` steps (files named by the download's basename, or an index.json {url: file}); nothing
is fetched from the network. --references: {task id: {"references": [...], "near_miss": [...]}},
solutions we wrote (OSWorld ships none), merged into the packages so the gates can run them.
Writes <out>/<package id>/task.json per imported task and <out>.import_report.json listing every
imported task (with the config steps it dropped) and every refused one with its reasons.
Exit status 1 only if nothing was imported.
"""
from __future__ import annotations

import json
import sys

from absl import app, flags

_FORMAT = flags.DEFINE_enum("format", None, ["osworld"], "Input format.")
_SRC = flags.DEFINE_string("src", None, "A task JSON file or a directory of them.")
_OUT = flags.DEFINE_string("out", None, "Output directory for the packages (the report goes to <out>.import_report.json).")
_CACHE = flags.DEFINE_string("cache", None, "Local file cache for download steps.")
_REFS = flags.DEFINE_string("references", None, "JSON of references/near_miss per task id.")


def main(argv):
  del argv
  from mage_jax.agent.osworld import importer
  refs = None
  if _REFS.value:
    with open(_REFS.value) as f:
      refs = json.load(f)
  report = importer.import_dir(_SRC.value, _OUT.value, _CACHE.value, refs)
  for r in report["imported"]:
    print(f"imported {r['id']} -> {r['package']}" + "".join(f"\n    note: {n}" for n in r["notes"]))
  for r in report["refused"]:
    print(f"refused  {r['id']} ({r['source']})" + "".join(f"\n    {x}" for x in r["reasons"]))
  print(f"{len(report['imported'])} imported, {len(report['refused'])} refused; report: {importer.report_path(_OUT.value)}")
  if not report["imported"]:
    sys.exit(1)


if __name__ == "__main__":
  flags.mark_flags_as_required(["format", "src", "out"])
  app.run(main)
