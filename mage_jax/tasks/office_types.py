"""Preparer and checker types for real applications (LibreOffice, GIMP); documents and images
themselves come from doc_types (docx) and data_types (png).

Preparers:
  office  {app: calc|writer|impress|gimp, path}        starts the app on the file (machine/apps.py) and
                                                       waits until its window is drawn
Checkers:
  xlsx_values  {path, cells: {"B7": value}, sheet?}    cached values (what the app computed), not formulas
  image_props  {path, size?: [w, h], alpha?: bool, mode?: "L" | "RGB" | ..., pixels?: [{at: [x, y], rgba: [r, g, b, a], tol?}]}
               a PNG/JPEG read directly; an .xcf first exported to PNG by GIMP's batch mode
               (`gimp -i -b`) in a throwaway sandbox, so the agent's file is never parsed by a
               privileged process
"""
from __future__ import annotations

import io
from typing import Any

from mage_jax.machine import apps
from mage_jax.machine.sandbox import Sandbox, SandboxConfig
from mage_jax.tasks import checkers, preparers

APPS = ("calc", "writer", "impress", "gimp")


def _need(spec: dict[str, Any], where: str, *keys: str) -> None:
  for k in keys:
    if k not in spec:
      raise ValueError(f"{where}: {spec['type']!r} needs field {k!r}")


# ---- preparers ---------------------------------------------------------------------------------
def _validate_office(spec, where):
  _need(spec, where, "app", "path")
  if spec["app"] not in APPS:
    raise ValueError(f"{where}: office app must be one of {APPS}, got {spec['app']!r}")


def _run_office(target, spec, root):
  desktop = getattr(target, "desktop", None)
  if desktop is None:
    raise preparers.SetupError("an office app needs a local desktop; the task kind is 'terminal' "
                               "or the environment is remote")
  try:
    apps.launch(desktop, spec["app"], spec["path"], timeout=float(spec.get("timeout", 90)))
  except RuntimeError as e:
    raise preparers.SetupError(str(e)) from e


preparers.register("office", preparers.Extension(_run_office, _validate_office))


# ---- checkers ----------------------------------------------------------------------------------
def _xlsx_values(ctx, spec) -> float:
  import openpyxl   # office-format library only for this document type (start-up cost)
  data = ctx.read_file(spec["path"])
  if data is None:
    return 0.0
  wb = openpyxl.load_workbook(io.BytesIO(data), data_only=True)
  ws = wb[spec["sheet"]] if spec.get("sheet") else wb.worksheets[0]
  return float(all(checkers._same(ws[ref].value, v) for ref, v in spec["cells"].items()))


XCF_TO_PNG = ('(let* ((img (car (gimp-file-load RUN-NONINTERACTIVE "/tmp/in.xcf" "/tmp/in.xcf"))) '
              '(layer (car (gimp-image-merge-visible-layers img CLIP-TO-IMAGE)))) '
              '(file-png-save-defaults RUN-NONINTERACTIVE img layer "/tmp/out.png" "/tmp/out.png"))')


def xcf_to_png(data: bytes, timeout: float = 120) -> bytes | None:
  """GIMP's batch mode exports an .xcf's visible layers to PNG, in a sandbox of its own."""
  with Sandbox(SandboxConfig(ro_binds=apps.etc_binds())) as sb:
    sb.write_file("/tmp/in.xcf", data)
    apps._seed_profile(sb, "gimp")
    env = apps.app_env(sb)
    argv = ["env", *[f"{k}={v}" for k, v in env.items()], "gimp", "-i", "-d", "-f",
            "-b", XCF_TO_PNG, "-b", "(gimp-quit 0)"]
    sb.run(argv, timeout=timeout)
    return sb.read_file("/tmp/out.png")


def _image_props(ctx, spec) -> float:
  from PIL import Image   # Pillow only when an image is read or drawn (start-up cost)
  data = ctx.read_file(spec["path"])
  if data is None:
    return 0.0
  if spec["path"].lower().endswith(".xcf"):
    if not data.startswith(b"gimp xcf"):
      return 0.0
    data = xcf_to_png(data)
    if data is None:
      return 0.0
  im = Image.open(io.BytesIO(data))
  has_alpha = im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info
  if "size" in spec and list(im.size) != list(spec["size"]):
    return 0.0
  if "alpha" in spec and has_alpha != spec["alpha"]:
    return 0.0
  if "mode" in spec and im.mode != spec["mode"]:   # PIL's mode of the file as saved ("L": grayscale)
    return 0.0
  rgba = im.convert("RGBA")
  for px in spec.get("pixels", ()):
    x, y = px["at"]
    if not (0 <= x < im.width and 0 <= y < im.height):
      return 0.0
    got, tol = rgba.getpixel((x, y)), px.get("tol", 8)
    want = list(px["rgba"])
    if want[3] == 0 and got[3] == 0:  # a transparent pixel's colour does not matter
      continue
    if any(abs(g - w) > tol for g, w in zip(got, want)):
      return 0.0
  return 1.0


_ERRORS = ("zipfile", "openpyxl", "docx", "lxml", "PIL", "xml")
checkers.register("xlsx_values", checkers.Extension(_xlsx_values, lambda s, w: _need(s, w, "path", "cells"),
                                                    content_errors=_ERRORS))
checkers.register("image_props", checkers.Extension(_image_props, lambda s, w: _need(s, w, "path"),
                                                    content_errors=_ERRORS))
