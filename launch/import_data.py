"""Convert chat-style or grounding JSONL into the native trajectory format (docs/data.md).

  python -m launch.import_data --format=messages --src=chats.jsonl --out=data/chat/episodes.jsonl
  python -m launch.import_data --format=grounding --src=ground.jsonl --out=data/g/episodes.jsonl \
      --images=copy

--format=messages reads OpenAI / ms-swift / LLaMA-Factory records (`messages` or
ShareGPT `conversations`, `images`, `tools`); --format=grounding reads
(screenshot, instruction, point | box) records. Image paths in the input resolve
against --image_root (default: the input file's folder). In the output they are
relative to the output file's folder: --images=relative (default) points at the
original files, --images=copy copies them to <out folder>/images/ (keeping their
path under the image root) so the output folder is self-contained.

Bad records are skipped, never fatal: each is printed as file:line: kind: reason
(bytes that are not UTF-8, malformed or over-deep JSON, NaN, invalid fields, a
repeated id; docs/data.md) and listed with counts by kind in the report (--report, default
<out without .jsonl>.import_report.json). Exit status 1 only if nothing was imported.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import sys
from typing import Any, Iterator

from absl import app, flags
import tqdm

from mage_jax.data import importers
from mage_jax.data import trajectory as tr

FORMATS = ("messages", "grounding")
IMAGE_MODES = ("relative", "copy")

_FORMAT = flags.DEFINE_enum("format", None, FORMATS, "Input format.")
_SRC = flags.DEFINE_string("src", None, "Input JSONL file.")
_OUT = flags.DEFINE_string("out", None, "Output native JSONL, e.g. DIR/episodes.jsonl.")
_IMAGE_ROOT = flags.DEFINE_string("image_root", "", "Folder input image paths resolve against "
                                  "(default: the input file's folder).")
_IMAGES = flags.DEFINE_enum("images", "relative", IMAGE_MODES,
                            "relative: point at the original files; copy: copy them next to the output.")
_SOURCE = flags.DEFINE_string("source", None, "Source tag of records that have none (default: '' "
                              "for messages, 'grounding' for grounding).")
_STAGE = flags.DEFINE_integer("stage", None, "Curriculum stage of records that have none (default: 0 "
                              "for messages, 1 for grounding).")
_REPORT = flags.DEFINE_string("report", "", "Report JSON path (default: <out>.import_report.json).")
_SHOW = flags.DEFINE_integer("show_skipped", 50, "Print at most this many skipped records.")


def default_report_path(out: str) -> str:
  base = out[:-len(".jsonl")] if out.endswith(".jsonl") else out
  return base + ".import_report.json"


class _ImageCopier:
  """Copies each distinct screenshot once into <out dir>/images/, keeping its path under the root."""

  def __init__(self, out_dir: str, image_root: str):
    self.out_dir, self.root = out_dir, os.path.abspath(image_root)
    self.copied: dict[str, str] = {}

  def __call__(self, src: str) -> str:
    src = os.path.abspath(src)
    if src not in self.copied:
      rel = os.path.relpath(src, self.root)
      if rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        # Outside the image root: a name that cannot collide with the mirrored tree.
        digest = hashlib.sha1(src.encode()).hexdigest()[:12]
        rel = os.path.join("_external", f"{digest}_{os.path.basename(src)}")
      dst = os.path.join(self.out_dir, "images", rel)
      if dst != src:  # the image root may already be <out dir>/images
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
      self.copied[src] = dst
    return self.copied[src]


def _count_records(path: str) -> int:
  with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is counted here, skipped later
    return sum(1 for line in f if line.strip())


def import_file(fmt: str, src: str, out: str, *, image_root: str = "", images: str = "relative",
                source: str | None = None, stage: int | None = None, progress: bool = True
                ) -> dict[str, Any]:
  """Converts `src` into native JSONL at `out`; returns the report (also for tests)."""
  if fmt not in FORMATS:
    raise ValueError(f"format {fmt!r}: expected one of {FORMATS}")
  if images not in IMAGE_MODES:
    raise ValueError(f"images {images!r}: expected one of {IMAGE_MODES}")
  if not os.path.isfile(src):
    raise FileNotFoundError(f"--src {src}: no such file")
  if os.path.abspath(src) == os.path.abspath(out):
    raise ValueError("--out must differ from --src (the input would be overwritten)")
  root = image_root or os.path.dirname(os.path.abspath(src))
  out_dir = os.path.dirname(os.path.abspath(out))
  if fmt == "messages":
    items = importers.read_messages_file(src, root, source=source or "", stage=stage or 0)
  else:
    items = importers.read_grounding_file(src, root, source=source, stage=stage)
  copier = _ImageCopier(out_dir, root) if images == "copy" else None
  counts: dict[str, int] = collections.Counter()
  skipped: list[tr.SkippedItem] = []
  bar = tqdm.tqdm(total=_count_records(src), desc=f"import {os.path.basename(src)}", unit="rec",
                  disable=not progress)

  def episodes() -> Iterator[tr.Episode]:
    for item in items:
      bar.update(1)
      if isinstance(item, tr.SkippedItem):
        skipped.append(item)
        continue
      counts["steps"] += len(item.steps)
      for step in item.steps:
        shot = step.observation.screenshot
        if shot is not None:
          counts["screenshots"] += 1
          if copier is not None:
            step.observation.screenshot = copier(item.image_path(shot))
      yield item

  try:
    written = tr.write_episodes(out, episodes())
  finally:
    bar.close()
  kinds = collections.Counter(s.kind for s in skipped)
  report = dict(format=fmt, src=os.path.abspath(src), out=os.path.abspath(out),
                image_root=os.path.abspath(root), images=images, records=written + len(skipped),
                episodes=written, steps=counts["steps"], screenshots=counts["screenshots"],
                images_copied=len(copier.copied) if copier else 0,
                skipped_total=len(skipped), skipped=dict(sorted(kinds.items())),
                skipped_items=[str(s) for s in skipped])
  return report


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  for flag in (_FORMAT, _SRC, _OUT):
    if flag.value is None:
      raise app.UsageError(f"--{flag.name} is required")
  report = import_file(_FORMAT.value, _SRC.value, _OUT.value, image_root=_IMAGE_ROOT.value,
                       images=_IMAGES.value, source=_SOURCE.value, stage=_STAGE.value)
  report_path = _REPORT.value or default_report_path(_OUT.value)
  with open(report_path, "w", encoding="utf-8") as f:
    json.dump(report, f, indent=2, ensure_ascii=False)
  items = report["skipped_items"]
  for line in items[:_SHOW.value]:
    print(f"skipped {line}")
  if len(items) > _SHOW.value:
    print(f"... and {len(items) - _SHOW.value} more skipped records (see the report)")
  print(f"imported {report['episodes']} of {report['records']} records "
        f"({report['steps']} steps, {report['screenshots']} screenshots"
        + (f", {report['images_copied']} image files copied" if report["images"] == "copy" else "")
        + f") -> {report['out']}")
  print(f"skipped {report['skipped_total']}: {json.dumps(report['skipped'])}")
  print(f"report: {report_path}")
  if report["episodes"] == 0:
    print("error: nothing was imported", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
