"""OSWorld's task-specific Impress checks, re-implemented from their documented semantics (our code).

Presentations and LibreOffice's settings file arrive as bytes (None when absent: score 0).
  check_slide_orientation_Portrait  the slide width is below its height
  check_transition          rules {slide_idx, transition_type}: that slide's p:transition holds a
                            p:<transition_type> element (e.g. dissolve)
  check_page_number_colors  rules {color: red|blue|green|black}: the colour OSWorld reads as the page
                            numbers' (the second-to-last a:srgbClr inside an a:solidFill of
                            slideMaster1.xml) is that colour: the named channel exceeds the other two
                            by more than 50, black is every channel below 50
  evaluate_presentation_fill_to_rgb_distance  rules {rgb}: 1 - the mean over slides of the RGB
                            distance (normalised by the white-black distance) between the slide's
                            solid background (or, if it follows the master, the master's solid
                            background) and rgb; any other fill counts distance 1
  check_image_stretch_and_center  the picture of the expected (original) deck's first slide, found
                            by its bytes on the result's first slide, is within 0.5 inch of the
                            slide size and of the centred position
  check_presenter_console_disable  settings: Impress/Misc/Start EnablePresenterScreen is false
  check_auto_saving_time    settings: Common/Save/Document AutoSaveTimeIntervall equals rules.minutes
"""
from __future__ import annotations

import io
import math
from typing import Any
from xml.etree import ElementTree
import zipfile

from mage_jax.tasks.osworld import lo_registry

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
EMU_PER_INCH = 914400


def _prs(data: bytes | None):
  from pptx import Presentation   # office-format library only for this document type (start-up cost)
  if not data:
    return None
  try:
    return Presentation(io.BytesIO(data))
  except Exception:
    return None


def _part(data: bytes | None, name: str):
  try:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
      return ElementTree.fromstring(z.read(name))
  except (KeyError, zipfile.BadZipFile, ElementTree.ParseError, TypeError):
    return None


def check_slide_orientation_Portrait(result: bytes | None, expected: Any = None, **_) -> float:
  p = _prs(result)
  return float(p is not None and p.slide_width < p.slide_height)


def check_transition(result: bytes | None, rules: dict, **_) -> float:
  root = _part(result, f"ppt/slides/slide{int(rules['slide_idx']) + 1}.xml")
  t = root.find(f".//{_P}transition") if root is not None else None
  return float(t is not None and t.find(f".//{_P}{rules['transition_type']}") is not None)


def _colour_is(hex_rgb: str, colour: str, margin: int = 50) -> bool:
  r, g, b = (int(hex_rgb[i:i + 2], 16) for i in (0, 2, 4))
  named = {"red": (r, g, b), "green": (g, r, b), "blue": (b, r, g)}
  if colour == "black":
    return r < margin and g < margin and b < margin
  if colour in named:
    x, y, z = named[colour]
    return x > y + margin and x > z + margin
  return True   # OSWorld accepts any other colour name unchecked


def check_page_number_colors(result: bytes | None, rules: dict, **_) -> float:
  root = _part(result, "ppt/slideMasters/slideMaster1.xml")
  if root is None:
    return 0.0
  colours = [c.get("val") for fill in root.iter(f"{_A}solidFill") for c in fill.iter(f"{_A}srgbClr")]
  if len(colours) < 2 or not colours[-2]:
    return 0.0
  return float(_colour_is(colours[-2], rules["color"]))


def evaluate_presentation_fill_to_rgb_distance(result: bytes | None, rules: dict, **_) -> float:
  from pptx.enum.dml import MSO_FILL   # office-format library only for this document type (start-up cost)
  p = _prs(result)
  if p is None or not len(p.slides):
    return 0.0
  want = rules["rgb"]

  def distance(slide) -> float:
    fill = slide.background.fill
    if fill.type == MSO_FILL.BACKGROUND:   # follows the master
      fill = slide.slide_layout.slide_master.background.fill
    if fill.type != MSO_FILL.SOLID:
      return 1.0
    try:
      rgb = fill.fore_color.rgb
    except AttributeError:   # a theme colour, no RGB value
      return 1.0
    return math.dist(tuple(rgb), want) / math.dist((0, 0, 0), (255, 255, 255))
  return 1.0 - sum(distance(s) for s in p.slides) / len(p.slides)


def check_image_stretch_and_center(result: bytes | None, expected: bytes | None, **_) -> float:
  from pptx.enum.shapes import MSO_SHAPE_TYPE   # office-format library only for this document type (start-up cost)
  modified, original = _prs(result), _prs(expected)
  if modified is None or original is None or not len(modified.slides) or not len(original.slides):
    return 0.0
  pictures = lambda prs: [s for s in prs.slides[0].shapes if s.shape_type == MSO_SHAPE_TYPE.PICTURE]
  before = pictures(original)
  if not before:
    return 0.0
  same = [s for s in pictures(modified) if s.image.blob == before[0].image.blob]
  if not same:
    return 0.0
  img, w, h, tol = same[-1], original.slide_width, original.slide_height, EMU_PER_INCH / 2
  return float(abs(img.width - w) <= tol and abs(img.height - h) <= tol and
               abs(img.left - (w - img.width) / 2) <= tol and abs(img.top - (h - img.height) / 2) <= tol)


def check_presenter_console_disable(result: bytes | None, expected: Any = None, **_) -> float:
  v = lo_registry.registry_value(result, "/org.openoffice.Office.Impress/Misc/Start", "EnablePresenterScreen")
  return float(v is not None and v.lower() == "false")


def check_auto_saving_time(result: bytes | None, rules: dict, **_) -> float:
  v = lo_registry.registry_value(result, "/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall")
  return float(v is not None and v.strip().isdigit() and int(v) == int(rules["minutes"]))


NAMES = ("check_slide_orientation_Portrait", "check_transition", "check_page_number_colors",
         "evaluate_presentation_fill_to_rgb_distance", "check_image_stretch_and_center",
         "check_presenter_console_disable", "check_auto_saving_time")
