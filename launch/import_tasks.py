"""Import third-party task suites as our task packages (docs/osworld_import.md).

  python -m launch.import_tasks --format=osworld --src=evaluation_examples/examples --out=tasks/osworld \
      [--osworld_cache=osworld_cache] [--references=references.json]
  python -m launch.import_tasks --format=osworld --src=evaluation_examples/examples \
      --list_needed=needs.tsv [--make_placeholders=DIR]

--src: one OSWorld task JSON or a directory searched recursively (folders named in --exclude_dirs
skipped: Windows VMs, Google Drive). --osworld_cache (alias --cache): the local file cache for
downloads and expected files (layout: mage_jax/tasks/osworld/cache.py), nothing is fetched from the
network. --list_needed: writes `url<TAB>cache name<TAB>task ids` for every file the task set
downloads, and imports nothing. --make_placeholders=DIR (with --list_needed): writes a placeholder
under every cache name in DIR, to measure importability only (placeholders are not the real files:
tasks imported from them can't be run). --references: {task id: {"references": [...], "near_miss": [...]}},
solutions we wrote (OSWorld ships none), merged into the packages so the gates can run them.
Writes <out>/<package id>/task.json per imported task and <out>.import_report.json listing every
imported task (with the config steps it dropped), every refused one with its reasons, and the counts
per OSWorld domain. Exit status 1 only if nothing was imported.
"""
from __future__ import annotations

import json
import sys

from absl import app, flags

_FORMAT = flags.DEFINE_enum("format", None, ["osworld"], "Input format.")
_SRC = flags.DEFINE_string("src", None, "A task JSON file or a directory of them.")
_OUT = flags.DEFINE_string("out", None, "Output directory for the packages (the report goes to <out>.import_report.json).")
_CACHE = flags.DEFINE_string("osworld_cache", None, "Local file cache for OSWorld's downloads.")
flags.DEFINE_alias("cache", "osworld_cache")
_REFS = flags.DEFINE_string("references", None, "JSON of references/near_miss per task id.")
_EXCLUDE = flags.DEFINE_list("exclude_dirs", ["Windows", "googledrive", "google_drive"], "Folder names skipped under --src.")
_NEEDED = flags.DEFINE_string("list_needed", None, "Write the files the task set downloads (TSV) and stop.")
_PLACEHOLDERS = flags.DEFINE_string("make_placeholders", None,
                                    "With --list_needed: fill this cache directory with placeholder files.")


def main(argv):
  del argv
  from mage_jax.tasks.osworld import cache, importer
  exclude = tuple(_EXCLUDE.value)
  if _NEEDED.value:
    tasks, bad = importer.load_tasks(_SRC.value, exclude)
    rows = cache.needed([(p, t) for p, t in tasks if isinstance(t, dict)])
    cache.write_needed(rows, _NEEDED.value)
    print(f"{len(rows)} files needed by {len(tasks)} tasks ({len(bad)} unreadable): {_NEEDED.value}")
    if _PLACEHOLDERS.value:
      n = cache.make_placeholders(rows, _PLACEHOLDERS.value)
      print(f"wrote {n} placeholder files in {_PLACEHOLDERS.value} (importability only: not the real files)")
    return
  if not _OUT.value:
    sys.exit("--out is required (or --list_needed)")
  refs = None
  if _REFS.value:
    with open(_REFS.value) as f:
      refs = json.load(f)
  report = importer.import_dir(_SRC.value, _OUT.value, _CACHE.value, refs, exclude)
  for r in report["imported"]:
    print(f"imported {r['id']} -> {r['package']}" + "".join(f"\n    note: {n}" for n in r["notes"]))
  for r in report["refused"]:
    print(f"refused  {r['id']} ({r['source']})" + "".join(f"\n    {x}" for x in r["reasons"]))
  for domain, row in report["by_domain"].items():
    print(f"  {domain:22s} {row['imported']:4d} imported {row['refused']:4d} refused")
  print(f"{len(report['imported'])} imported, {len(report['refused'])} refused; report: {importer.report_path(_OUT.value)}")
  if not report["imported"]:
    sys.exit(1)


if __name__ == "__main__":
  flags.mark_flags_as_required(["format", "src"])
  app.run(main)
