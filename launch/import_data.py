"""Convert agent transcripts, AgentNet trajectories and grounding benchmarks into the native
trajectory format (docs/data.md, "Importers").

  python -m launch.import_data --format=messages --src=chats.jsonl --out=data/chat/episodes.jsonl
  python -m launch.import_data --format=agentnet --src=agentnet_ubuntu_5k.jsonl \
      --image_root=AgentNet/ubuntu_images --out=data/agentnet/ubuntu.jsonl
  python -m launch.import_data --format=screenspot_v2 --src=ScreenSpot-v2/screenspot_web_v2.json \
      --image_root=ScreenSpot-v2/screenspotv2_image --out=data/ssv2/web.jsonl
  python -m launch.import_data --format=osworld_g --src=OSWorld-G/benchmark/OSWorld-G.json \
      --image_root=OSWorld-G/benchmark/images --out=data/osworld_g/episodes.jsonl
  python -m launch.import_data --format=grounding --src=ground.jsonl --out=data/g/episodes.jsonl \
      --images=copy

--format=messages reads OpenAI / ShareGPT / ms-swift / LLaMA-Factory tool-call transcripts
(with or without `Action:` lines and think text; --parallel_calls, --final_text); agentnet reads
AgentNet (OpenCUA) records (PyAutoGUI actions; --on_unmappable, --instruction_field);
screenspot_v2 / osworld_g / grounding read grounding records as stage-1 data. JSON Lines or one
JSON array. Think and Action text a source lacks is filled by the template and marked in each
episode's meta["filled"]; with --synthesis_base_url the synthesis LLM (harness/synthesis.py)
rewrites those parts (a rejected step keeps the template).

Image paths in the input resolve against --image_root (default: the input file's folder). In
the output they are relative to the output file's folder: --images=relative (default) points at
the original files, --images=copy copies them to <out folder>/images/ (keeping their path under
the image root) so the output folder is self-contained.

Bad records are skipped, never fatal: each is printed as file:line: kind: reason (bytes that
are not UTF-8, malformed or over-deep JSON, NaN, invalid fields, a repeated id, an action with
no counterpart in our action space as `unmappable:<what>`; docs/data.md) and listed with counts
by kind in the report (--report, default <out without .jsonl>.import_report.json), which also
counts filled fields, split turns, dropped steps and `unaccounted` records (always 0). Exit
status 1 only if nothing was imported.
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

from mage_jax.data import trajectory as tr
from mage_jax.data.importers import agentnet, chat, fill, grounding, sources

FORMATS = ("messages", "grounding", "agentnet", "screenspot_v2", "osworld_g")
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
_PARALLEL = flags.DEFINE_enum("parallel_calls", "split", chat.PARALLEL_CALLS,
                              "messages: a turn with several tool calls becomes one step per call "
                              "(split) or skips the record (skip).")
_FINAL_TEXT = flags.DEFINE_enum("final_text", "terminate", chat.FINAL_TEXT,
                                "messages: a closing assistant turn without a tool call becomes a "
                                "terminate(success) step (terminate) or is dropped (drop).")
_UNMAPPABLE = flags.DEFINE_enum("on_unmappable", "skip", agentnet.ON_UNMAPPABLE,
                                "agentnet: an action we cannot express skips the episode (skip) or "
                                "cuts it before that step (truncate).")
_INSTRUCTION_FIELD = flags.DEFINE_enum("instruction_field", "instruction", agentnet.INSTRUCTION_FIELDS,
                                       "agentnet: the record field used as the task instruction.")
_SPLIT = flags.DEFINE_enum("split", None, grounding.SCREENSPOT_SPLITS,
                           "screenspot_v2: the platform split (default: from the file name).")
_CATEGORIES = flags.DEFINE_string("categories", None, "osworld_g: classification_result.json "
                                  "(default: the one next to --src, if any).")
_SYN_URL = flags.DEFINE_string("synthesis_base_url", "", "OpenAI-compatible endpoint of the synthesis "
                               "LLM that rewrites template-filled think/Action text ('' = template only).")
_SYN_MODEL = flags.DEFINE_string("synthesis_model", "teacher", "Model name at --synthesis_base_url.")


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


def _reader(fmt: str, src: str, root: str, source: str | None, stage: int | None, options: dict):
  o = options
  if fmt == "messages":
    return chat.read_messages_file(src, root, source=source or "", stage=stage or 0,
                                   parallel_calls=o.get("parallel_calls", "split"),
                                   final_text=o.get("final_text", "terminate"))
  if fmt == "agentnet":
    return agentnet.read_agentnet_file(src, root, source=source, stage=stage,
                                       instruction_field=o.get("instruction_field", "instruction"),
                                       on_unmappable=o.get("on_unmappable", "skip"))
  if fmt == "screenspot_v2":
    return grounding.read_screenspot_file(src, root, split=o.get("split"), source=source, stage=stage)
  if fmt == "osworld_g":
    return grounding.read_osworld_g_file(src, root, categories=o.get("categories"), source=source,
                                         stage=stage)
  return grounding.read_grounding_file(src, root, source=source, stage=stage)


def import_file(fmt: str, src: str, out: str, *, image_root: str = "", images: str = "relative",
                source: str | None = None, stage: int | None = None, progress: bool = True,
                options: dict[str, Any] | None = None, synthesizer=None) -> dict[str, Any]:
  """Converts `src` into native JSONL at `out`; returns the report (also for tests).

  options: the format's switches (parallel_calls, final_text, on_unmappable, instruction_field,
  split, categories). synthesizer: a harness.synthesis.Synthesizer whose `refill` rewrites the
  template-filled parts of each episode (None: template only)."""
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
  total_records = sources.count_records(src)
  items = _reader(fmt, src, root, source, stage, options or {})
  copier = _ImageCopier(out_dir, root) if images == "copy" else None
  counts: dict[str, int] = collections.Counter()
  filled: dict[str, int] = collections.Counter()
  dropped: dict[str, int] = collections.Counter()
  skipped: list[tr.SkippedItem] = []
  bar = tqdm.tqdm(total=total_records, desc=f"import {os.path.basename(src)}", unit="rec",
                  disable=not progress)

  def episodes() -> Iterator[tr.Episode]:
    for item in items:
      bar.update(1)
      if isinstance(item, tr.SkippedItem):
        skipped.append(item)
        continue
      if synthesizer is not None and item.meta.get(fill.FILLED_KEY):
        item = synthesizer.refill(item)
      counts["steps"] += len(item.steps)
      for mark in item.meta.get(fill.FILLED_KEY, []):
        counts["steps_filled"] += 1
        filled.update(f"{part}:{how}" for part, how in mark.items() if part != "step")
      imported = item.meta.get("import", {})
      counts["split_turns"] += imported.get("split_turns", 0)
      dropped.update(imported.get("dropped", {}))
      if imported.get("final_text") == "drop":
        dropped["final_text"] += 1
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
                image_root=os.path.abspath(root), images=images, records=total_records,
                episodes=written, steps=counts["steps"], screenshots=counts["screenshots"],
                images_copied=len(copier.copied) if copier else 0,
                steps_filled=counts["steps_filled"], filled=dict(sorted(filled.items())),
                split_turns=counts["split_turns"], dropped_steps=dict(sorted(dropped.items())),
                skipped_total=len(skipped), skipped=dict(sorted(kinds.items())),
                unaccounted=total_records - written - len(skipped),
                skipped_items=[str(s) for s in skipped])
  if synthesizer is not None:
    report["synthesis"] = synthesizer.report.to_dict(synthesizer.ledger)
  return report


def _synthesizer():
  if not _SYN_URL.value:
    return None
  from mage_jax.forge import llm
  from mage_jax.harness import synthesis
  return synthesis.Synthesizer(llm.ChatClient(_SYN_URL.value, _SYN_MODEL.value),
                               synthesis.SynthesisConfig(on_reject="keep_original"))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  for flag in (_FORMAT, _SRC, _OUT):
    if flag.value is None:
      raise app.UsageError(f"--{flag.name} is required")
  options = dict(parallel_calls=_PARALLEL.value, final_text=_FINAL_TEXT.value,
                 on_unmappable=_UNMAPPABLE.value, instruction_field=_INSTRUCTION_FIELD.value,
                 split=_SPLIT.value, categories=_CATEGORIES.value)
  report = import_file(_FORMAT.value, _SRC.value, _OUT.value, image_root=_IMAGE_ROOT.value,
                       images=_IMAGES.value, source=_SOURCE.value, stage=_STAGE.value,
                       options=options, synthesizer=_synthesizer())
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
  if report["steps_filled"]:
    print(f"filled {report['steps_filled']} steps: {json.dumps(report['filled'])}")
  if report["split_turns"] or report["dropped_steps"]:
    print(f"split turns {report['split_turns']}, dropped steps: {json.dumps(report['dropped_steps'])}")
  print(f"skipped {report['skipped_total']}: {json.dumps(report['skipped'])}")
  if "synthesis" in report:
    print(f"synthesis: {json.dumps({k: v for k, v in report['synthesis'].items() if k != 'examples'})}")
  print(f"report: {report_path}")
  if report["unaccounted"]:
    print(f"error: {report['unaccounted']} records neither imported nor skipped", file=sys.stderr)
    sys.exit(2)
  if report["episodes"] == 0:
    print("error: nothing was imported", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
