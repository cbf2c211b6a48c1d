"""Slides (python-pptx): add, delete, reorder and retitle slides; bodies, notes, text boxes, read-backs."""
from __future__ import annotations

from mage_jax.forge.skills.base import CITIES, WORDS, capability, define, distinct, domain, package, py

domain("pptx", "PowerPoint decks through python-pptx: slides, titles, bodies, notes, shapes")
capability("pptx.slides", "Add, delete, reorder and retitle slides")
capability("pptx.text", "Edit body text, bullets and text boxes")
capability("pptx.notes", "Write speaker notes")
capability("pptx.read", "Answer questions about a deck in the shell or a text file")
capability("pptx.create", "Build a deck from another file")
A = ("pptx",)
DECK = "deck.pptx"


def _slides(r, n=4):
  return [{"title": f"{w.title()} plan", "body": f"Owner {c}"} for w, c in zip(distinct(r, WORDS, n), distinct(r, CITIES, n))]


def _sample(r):
  return {"slides": _slides(r)}


def _deck(slides):
  return [{"type": "pptx", "path": DECK, "slides": slides}]


def _edit(code):
  return py(f"from pptx import Presentation\np = Presentation('{DECK}')\n{code}\np.save('{DECK}')", "Edit the deck")


def _read(code):
  return py(f"from pptx import Presentation\np = Presentation('{DECK}')\n{code}", "Read the deck")


def _titles(titles):
  return {"type": "pptx_titles", "path": DECK, "titles": titles}


def _t(p):
  return [s["title"] for s in p["slides"]]


_DELETE = "s = p.slides._sldIdLst[{i}]; p.part.drop_rel(s.rId); p.slides._sldIdLst.remove(s)"


def sk(id, desc, build, sample=_sample, apps=A, mention=True):
  define(id, desc, sample, build, apps=apps,
         mentions=(lambda p: {DECK: [p["slides"][0]["title"]]}) if sample is _sample and mention else None)


# ---- slides ------------------------------------------------------------------------------------
sk("pptx.slides.append_titled", "Append a slide with a given title and body",
   lambda p: package(f"Add a slide at the end of {DECK} titled Next steps with the body text Ship it.", _deck(p["slides"]),
                     {"type": "all", "checks": [_titles(_t(p) + ["Next steps"]),
                                                {"type": "pptx_bodies", "path": DECK, "bodies": [s["body"] for s in p["slides"]] + ["Ship it"]}]},
                     [_edit("s = p.slides.add_slide(p.slide_layouts[1]); s.shapes.title.text = 'Next steps'")],
                     terminal=[_edit("s = p.slides.add_slide(p.slide_layouts[1]); s.shapes.title.text = 'Next steps'\n"
                                     "s.placeholders[1].text = 'Ship it'")]))

sk("pptx.slides.delete_titled", "Delete the slide with a given title",
   lambda p: package(f"Delete the slide titled {p['slides'][p['pick']]['title']} from {DECK}.", _deck(p["slides"]),
                     _titles([t for i, t in enumerate(_t(p)) if i != p["pick"]]),
                     [_edit(_DELETE.format(i=(p["pick"] + 1) % 4))], terminal=[_edit(_DELETE.format(i=p["pick"]))]),
   sample=lambda r: {"slides": _slides(r), "pick": r.randint(0, 3)})

sk("pptx.slides.move_to_front", "Move the last slide to the front",
   lambda p: package(f"Move the last slide of {DECK} so that it becomes the first (the others keep their order).",
                     _deck(p["slides"]), _titles(_t(p)[-1:] + _t(p)[:-1]),
                     [_edit("l = p.slides._sldIdLst; s = l[-1]; l.remove(s); l.insert(1, s)")],
                     terminal=[_edit("l = p.slides._sldIdLst; s = l[-1]; l.remove(s); l.insert(0, s)")]))

sk("pptx.slides.retitle", "Change the title of one slide",
   lambda p: package(f"In {DECK} change the title of slide {p['pick'] + 1} to Budget review.", _deck(p["slides"]),
                     _titles([t if i != p["pick"] else "Budget review" for i, t in enumerate(_t(p))]),
                     [_edit(f"p.slides[{p['pick']}].shapes.title.text = 'Budget Review'")],
                     terminal=[_edit(f"p.slides[{p['pick']}].shapes.title.text = 'Budget review'")]),
   sample=lambda r: {"slides": _slides(r), "pick": r.randint(1, 3)})

# ---- text --------------------------------------------------------------------------------------
sk("pptx.text.set_body", "Replace the body text of a slide found by its title",
   lambda p: package(f"In {DECK} set the body text of the slide titled {p['slides'][p['pick']]['title']} to "
                     f"Owner {p['owner']}.", _deck(p["slides"]),
                     {"type": "pptx_bodies", "path": DECK, "bodies": [s["body"] if i != p["pick"] else f"Owner {p['owner']}"
                                                                      for i, s in enumerate(p["slides"])]},
                     [_edit(f"p.slides[0].placeholders[1].text = 'Owner {p['owner']}'")],
                     terminal=[_edit(f"for s in p.slides:\n  if s.shapes.title.text == {p['slides'][p['pick']]['title']!r}: "
                                     f"s.placeholders[1].text = 'Owner {p['owner']}'")]),
   sample=lambda r: {"slides": _slides(r), "pick": r.randint(1, 3), "owner": "Team Nova"})

sk("pptx.text.add_bullet", "Add a bullet line under a slide's existing body text",
   lambda p: package(f"On the first slide of {DECK} add a second body line (a new paragraph) reading Due {p['when']}.",
                     _deck(p["slides"]),
                     {"type": "pptx_bodies", "path": DECK, "bodies": [p["slides"][0]["body"] + f"\nDue {p['when']}"]
                      + [s["body"] for s in p["slides"][1:]]},
                     [_edit(f"tf = p.slides[0].placeholders[1].text_frame; tf.text = 'Due {p['when']}'")],
                     terminal=[_edit(f"tf = p.slides[0].placeholders[1].text_frame; tf.add_paragraph().text = 'Due {p['when']}'")]),
   sample=lambda r: {"slides": _slides(r), "when": r.choice(["Monday", "Friday", "June"])})

sk("pptx.text.add_textbox", "Add a free text box to a slide",
   lambda p: package(f"Add a text box to slide {p['pick'] + 1} of {DECK} containing the text Draft {p['code']}.",
                     _deck(p["slides"]), {"type": "pptx_text", "path": DECK, "slide": p["pick"], "contains": f"Draft {p['code']}"},
                     [_edit(f"from pptx.util import Inches\nb = p.slides[0].shapes.add_textbox(Inches(1), Inches(5), Inches(3), Inches(1))\n"
                            f"b.text_frame.text = 'Draft {p['code']}'")],
                     terminal=[_edit(f"from pptx.util import Inches\nb = p.slides[{p['pick']}].shapes.add_textbox(Inches(1), "
                                     f"Inches(5), Inches(3), Inches(1))\nb.text_frame.text = 'Draft {p['code']}'")]),
   sample=lambda r: {"slides": _slides(r), "pick": r.randint(1, 3), "code": f"v{r.randint(2, 9)}"})

# ---- notes -------------------------------------------------------------------------------------
sk("pptx.notes.add_notes", "Write speaker notes on every slide",
   lambda p: package(f"Give every slide of {DECK} the speaker notes Speak for {p['minutes']} minutes.", _deck(p["slides"]),
                     {"type": "pptx_notes", "path": DECK, "notes": [f"Speak for {p['minutes']} minutes"] * len(p["slides"])},
                     [_edit(f"p.slides[0].notes_slide.notes_text_frame.text = 'Speak for {p['minutes']} minutes'")],
                     terminal=[_edit(f"for s in p.slides: s.notes_slide.notes_text_frame.text = 'Speak for {p['minutes']} minutes'")]),
   sample=lambda r: {"slides": _slides(r, 3), "minutes": r.randint(2, 9)})

# ---- read --------------------------------------------------------------------------------------
sk("pptx.read.count_slides_mentioning", "Print how many slides mention a word in their body",
   lambda p: package(f"How many slides of {DECK} mention {p['city']} in their body text? Print just the number as your "
                     "last command's output.", _deck(p["slides"]),
                     {"type": "terminal_answer", "text": str(sum(p["city"] in s["body"] for s in p["slides"]))},
                     [_read("print(len(p.slides))")],
                     terminal=[_read(f"print(sum({p['city']!r} in s.placeholders[1].text for s in p.slides))")]),
   sample=lambda r: {"slides": [{"title": f"Slide {w}", "body": f"Visit {r.choice(CITIES[:3])}"} for w in distinct(r, WORDS, 7)],
                     "city": CITIES[0]})

sk("pptx.read.titles_to_text", "Write a deck's slide titles to a text file",
   lambda p: package(f"Write the titles of the slides of {DECK}, in order, one per line, to titles.txt.", _deck(p["slides"]),
                     {"type": "file_text", "path": "titles.txt", "equals": "\n".join(_t(p))},
                     [_read("open('titles.txt', 'w').write('\\n'.join(sorted(s.shapes.title.text for s in p.slides)))")],
                     terminal=[_read("open('titles.txt', 'w').write('\\n'.join(s.shapes.title.text for s in p.slides))")]),
   apps=("pptx", "text"))

sk("pptx.read.body_of_titled", "Print the body text of the slide with a given title",
   lambda p: package(f"Print the body text of the slide titled {p['slides'][p['pick']]['title']} in {DECK} as your last "
                     "command's output.", _deck(p["slides"]), {"type": "terminal_answer", "text": p["slides"][p["pick"]]["body"]},
                     [_read("print(p.slides[0].placeholders[1].text)")],
                     terminal=[_read(f"print(next(s.placeholders[1].text for s in p.slides if s.shapes.title.text == "
                                     f"{p['slides'][p['pick']]['title']!r}))")]),
   sample=lambda r: {"slides": _slides(r), "pick": r.randint(1, 3)})

# ---- create ------------------------------------------------------------------------------------
sk("pptx.create.from_outline", "Build a deck from a text outline (title: body per line)",
   lambda p: package("Create talk.pptx from outline.txt: one slide per line, in order, each line being 'title: body' "
                     "(title into the slide title, body into its body text).",
                     [{"type": "text", "path": "outline.txt", "content": "".join(f"{s['title']}: {s['body']}\n" for s in p["slides"])}],
                     {"type": "all", "checks": [{"type": "pptx_titles", "path": "talk.pptx", "titles": _t(p)},
                                                {"type": "pptx_bodies", "path": "talk.pptx", "bodies": [s["body"] for s in p["slides"]]}]},
                     [py("from pptx import Presentation\np = Presentation()\nfor l in open('outline.txt'):\n"
                         "  s = p.slides.add_slide(p.slide_layouts[1]); s.shapes.title.text = l.split(':')[0]\np.save('talk.pptx')")],
                     terminal=[py("from pptx import Presentation\np = Presentation()\nfor l in open('outline.txt'):\n"
                                  "  t, b = l.rstrip('\\n').split(': ', 1)\n  s = p.slides.add_slide(p.slide_layouts[1])\n"
                                  "  s.shapes.title.text = t; s.placeholders[1].text = b\np.save('talk.pptx')")]),
   apps=("text", "pptx"), mention=False)
