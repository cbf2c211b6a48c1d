"""Images (Pillow): resize, crop, rotate, flip, convert, draw, compose, read pixels and sizes."""
from __future__ import annotations

from mage_jax.forge.skills.base import COLORS, WORDS, capability, define, distinct, domain, package, py

domain("image", "Raster images through Pillow: geometry, colour modes, formats, pixels")
capability("image.resize", "Scale images to a size or a bound")
capability("image.geometry", "Crop, rotate and flip")
capability("image.convert", "Change colour mode and file format")
capability("image.draw", "Draw on and compose images")
capability("image.read", "Answer questions about pixels and sizes")
A = ("png",)


def _pic(r):
  """A picture: a background and a coloured block in its left half (so flips and rotations show)."""
  w, h = r.choice([(320, 200), (400, 240), (360, 180)])
  bg, fg = distinct(r, list(COLORS), 2)
  return {"w": w, "h": h, "bg": bg, "fg": fg, "rect": [20, 20, w // 3, h // 2]}


def _png(p, path="pic.png"):
  return [{"type": "png", "path": path, "size": [p["w"], p["h"]], "fill": COLORS[p["bg"]],
           "rects": [p["rect"] + [COLORS[p["fg"]]]]}]


def _pil(code, src="pic.png"):
  return py(f"from PIL import Image\nim = Image.open('{src}')\n{code}", "Use Pillow")


def _size(path, w, h):
  return {"type": "image_size", "path": path, "size": [w, h]}


def _px(path, *points):
  return {"type": "image_pixels", "path": path, "points": [[x, y, c] for x, y, c in points]}


def sk(id, desc, build, sample=_pic, apps=A):
  define(id, desc, sample, build, apps=apps)


# ---- resize ------------------------------------------------------------------------------------
sk("image.resize.exact", "Resize an image to an exact size",
   lambda p: package(f"Resize pic.png to exactly {p['w'] // 2 + 10}x{p['h'] // 2 + 10} pixels and save it as small.png.",
                     _png(p), _size("small.png", p["w"] // 2 + 10, p["h"] // 2 + 10),
                     [_pil(f"im.resize(({p['w'] // 2 + 10}, {p['h'] // 2})).save('small.png')")],
                     terminal=[_pil(f"im.resize(({p['w'] // 2 + 10}, {p['h'] // 2 + 10})).save('small.png')")]))

sk("image.resize.fit_within", "Shrink an image to fit a box, keeping its aspect ratio",
   lambda p: package("Shrink pic.png so that it fits within 100x100 pixels keeping its aspect ratio (as large as possible); "
                     "save as thumb.png.", _png(p),
                     _size("thumb.png", 100, round(p["h"] * 100 / p["w"])),
                     [_pil("im.resize((100, 100)).save('thumb.png')")],
                     terminal=[_pil("im.thumbnail((100, 100)); im.save('thumb.png')")]),
   sample=lambda r: (lambda wh: {**_pic(r), "w": wh[0], "h": wh[1]})(r.choice([(400, 240), (360, 180), (500, 200), (300, 240)])))

sk("image.resize.batch_width", "Resize every image of a folder to one width into another folder",
   lambda p: package("Resize every .png in shots/ to a width of 64 pixels (height in proportion, rounded) and save each "
                     "under the same name in thumbs/.",
                     [s for i, w in enumerate(p["names"]) for s in _png({**p, "w": p["w"] + 40 * i}, f"shots/{w}.png")],
                     {"type": "all", "checks": [_size(f"thumbs/{w}.png", 64, round(p["h"] * 64 / (p["w"] + 40 * i)))
                                                for i, w in enumerate(p["names"])]},
                     [py("import os\nfrom PIL import Image\nos.makedirs('thumbs', exist_ok=True)\n"
                         "for f in os.listdir('shots'): Image.open('shots/' + f).resize((64, 64)).save('thumbs/' + f)")],
                     terminal=[py("import os\nfrom PIL import Image\nos.makedirs('thumbs', exist_ok=True)\nfor f in os.listdir('shots'):\n"
                                  "  im = Image.open('shots/' + f)\n  im.resize((64, round(im.height * 64 / im.width))).save('thumbs/' + f)")]),
   sample=lambda r: {**_pic(r), "names": distinct(r, WORDS, 3)})

# ---- geometry ----------------------------------------------------------------------------------
sk("image.geometry.crop_box", "Crop a rectangle out of an image",
   lambda p: package(f"Crop pic.png to the box from (10, 10) to ({p['w'] // 2}, {p['h'] // 2}) (left, top, right, bottom; "
                     "right and bottom excluded) and save it as crop.png.", _png(p),
                     {"type": "all", "checks": [_size("crop.png", p["w"] // 2 - 10, p["h"] // 2 - 10),
                                                _px("crop.png", (15, 15, COLORS[p["fg"]]), (2, 2, COLORS[p["bg"]]))]},
                     [_pil(f"im.crop((0, 0, {p['w'] // 2 - 10}, {p['h'] // 2 - 10})).save('crop.png')")],
                     terminal=[_pil(f"im.crop((10, 10, {p['w'] // 2}, {p['h'] // 2})).save('crop.png')")]))

sk("image.geometry.rotate_quarter", "Rotate an image a quarter turn clockwise",
   lambda p: package("Rotate pic.png 90 degrees clockwise (the canvas turns with it) and save it as turned.png.", _png(p),
                     {"type": "all", "checks": [_size("turned.png", p["h"], p["w"]), _px("turned.png", (p["h"] - 30, 30, COLORS[p["fg"]]))]},
                     [_pil("im.rotate(90, expand=True).save('turned.png')")],
                     terminal=[_pil("im.rotate(-90, expand=True).save('turned.png')")]))

sk("image.geometry.mirror", "Mirror an image left to right",
   lambda p: package("Mirror pic.png left to right and save it as mirror.png.", _png(p),
                     _px("mirror.png", (p["w"] - 30, 30, COLORS[p["fg"]]), (30, 30, COLORS[p["bg"]])),
                     [_pil("im.transpose(Image.FLIP_TOP_BOTTOM).save('mirror.png')")],
                     terminal=[_pil("im.transpose(Image.FLIP_LEFT_RIGHT).save('mirror.png')")]))

# ---- convert -----------------------------------------------------------------------------------
sk("image.convert.grayscale", "Convert an image to 8-bit grayscale",
   lambda p: package("Convert pic.png to 8-bit grayscale (mode L) and save it as gray.png.", _png(p),
                     {"type": "image_format", "path": "gray.png", "format": "PNG", "mode": "L", "size": [p["w"], p["h"]]},
                     [_pil("im.convert('1').save('gray.png')")], terminal=[_pil("im.convert('L').save('gray.png')")]))

sk("image.convert.to_jpeg", "Save a PNG as a JPEG of the same size",
   lambda p: package("Save pic.png as a JPEG file named pic.jpg (same size).", _png(p),
                     {"type": "image_format", "path": "pic.jpg", "format": "JPEG", "size": [p["w"], p["h"]]},
                     [_pil("im.save('pic.jpg', 'PNG')")], terminal=[_pil("im.convert('RGB').save('pic.jpg', 'JPEG')")]))

# ---- draw --------------------------------------------------------------------------------------
sk("image.draw.fill_rectangle", "Fill a rectangle of an image with a colour, in place",
   lambda p: package(f"Paint the rectangle from ({p['w'] // 2}, 10) to ({p['w'] - 10}, {p['h'] - 10}) of pic.png solid "
                     f"{p['paint']} (RGB {tuple(COLORS[p['paint']])}) and save pic.png in place.", _png(p),
                     _px("pic.png", (p["w"] // 2 + 5, 15, COLORS[p["paint"]]), (p["w"] - 15, p["h"] - 15, COLORS[p["paint"]])),
                     [_pil(f"from PIL import ImageDraw\nImageDraw.Draw(im).rectangle([{p['w'] // 2}, 10, {p['w'] - 30}, "
                           f"{p['h'] - 30}], fill={tuple(COLORS[p['paint']])})\nim.save('pic.png')")],
                     terminal=[_pil(f"from PIL import ImageDraw\nImageDraw.Draw(im).rectangle([{p['w'] // 2}, 10, {p['w'] - 10}, "
                                    f"{p['h'] - 10}], fill={tuple(COLORS[p['paint']])})\nim.save('pic.png')")]),
   sample=lambda r: (lambda pic: {**pic, "paint": next(c for c in COLORS if c not in (pic["bg"], pic["fg"]))})(_pic(r)))

sk("image.draw.paste_logo", "Paste one image onto another at a position",
   lambda p: package(f"Paste logo.png onto pic.png with its top-left corner at ({p['x']}, {p['y']}) and save the result "
                     "as branded.png.", _png(p) + [{"type": "png", "path": "logo.png", "size": [30, 30], "fill": COLORS[p["logo"]]}],
                     _px("branded.png", (p["x"] + 2, p["y"] + 2, COLORS[p["logo"]]), (p["x"] + 27, p["y"] + 27, COLORS[p["logo"]])),
                     [_pil(f"im.paste(Image.open('logo.png'), ({p['y']}, {p['x']})); im.save('branded.png')")],
                     terminal=[_pil(f"im.paste(Image.open('logo.png'), ({p['x']}, {p['y']})); im.save('branded.png')")]),
   sample=lambda r: (lambda pic: {**pic, "x": r.randint(200, 270), "y": r.randint(110, 140),
                                  "logo": next(c for c in COLORS if c not in (pic["bg"], pic["fg"]))})(_pic(r)))

# ---- read --------------------------------------------------------------------------------------
sk("image.read.pixel_hex", "Print the colour of one pixel as a hex code",
   lambda p: package(f"Print the colour of the pixel at x={p['x']}, y={p['y']} of pic.png as a lowercase hex code like "
                     "#a1b2c3, as your last command's output.", _png(p),
                     {"type": "terminal_answer", "text": "#%02x%02x%02x" % tuple(COLORS[p["fg"]])},
                     [_pil(f"print(im.convert('RGB').getpixel(({p['x']}, {p['y']})))")],
                     terminal=[_pil(f"print('#%02x%02x%02x' % im.convert('RGB').getpixel(({p['x']}, {p['y']})))")]),
   sample=lambda r: (lambda pic: {**pic, "x": r.randint(25, pic["w"] // 3 - 5), "y": r.randint(25, pic["h"] // 2 - 5)})(_pic(r)))

sk("image.read.dimensions", "Print an image's width and height",
   lambda p: package("Print the size of pic.png as WIDTHxHEIGHT (like 640x480) as your last command's output.", _png(p),
                     {"type": "terminal_answer", "text": f"{p['w']}x{p['h']}"},
                     [_pil("print(f'{im.height}x{im.width}')")], terminal=[_pil("print(f'{im.width}x{im.height}')")]))

sk("image.read.count_colours", "Print how many distinct colours an image uses",
   lambda p: package("How many distinct colours does pic.png use? Print just the number as your last command's output.",
                     [{"type": "png", "path": "pic.png", "size": [p["w"], p["h"]], "fill": COLORS[p["bg"]],
                       "rects": [[10 + 40 * i, 10, 40 + 40 * i, 40, COLORS[c]] for i, c in enumerate(p["blocks"])]}],
                     {"type": "terminal_answer", "text": str(len({p["bg"], *p["blocks"]}))},
                     [_pil("print(len(im.getcolors()) - 1)")], terminal=[_pil("print(len(im.convert('RGB').getcolors()))")]),
   sample=lambda r: {**_pic(r), "blocks": r.choices(list(COLORS), k=4)})
