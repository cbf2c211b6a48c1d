"""PDF (pypdf reads and rearranges, fpdf2 writes text): pages, metadata, text extraction, creation."""
from __future__ import annotations

from mage_jax.forge.skills.base import NAMES, WORDS, capability, define, distinct, domain, package, py

domain("pdf", "PDF files: merge, split, reorder and rotate pages; metadata; text in and out")
capability("pdf.pages", "Merge, split, delete, reorder, rotate pages")
capability("pdf.meta", "Read and write document metadata")
capability("pdf.read", "Find text and facts in a PDF")
capability("pdf.create", "Write a PDF from text")
A = ("pdf",)


def _pages(r, n=4):
  return [f"Section {w.upper()}\nparagraph about {c}" for w, c in zip(distinct(r, WORDS, n), distinct(r, NAMES, n))]


def _marks(pages):
  return [p.split("\n")[0] for p in pages]


def _sample(r):
  return {"pages": _pages(r)}


def _pdf(path, pages, **meta):
  return [{"type": "pdf_text", "path": path, "pages": pages, **meta}]


def _has(path, pages):
  return {"type": "pdf_page_texts", "path": path, "pages": _marks(pages)}


def _rw(src, dst, order_expr):
  """pypdf: write pages `order_expr` (an expression over the list `pg`) of src to dst."""
  return py(f"from pypdf import PdfReader, PdfWriter\npg = PdfReader('{src}').pages\nw = PdfWriter()\n"
            f"for x in {order_expr}: w.add_page(x)\nw.write('{dst}')", "Rewrite the pages with pypdf")


def _read(code, src="doc.pdf"):
  return py(f"from pypdf import PdfReader\nr = PdfReader('{src}')\n{code}", "Read the PDF with pypdf")


def sk(id, desc, build, sample=_sample, apps=A, mention=True):
  define(id, desc, sample, build, apps=apps,
         mentions=(lambda p: {"doc.pdf": [_marks(p["pages"])[0]]}) if sample is _sample and mention else None)


# ---- pages -------------------------------------------------------------------------------------
sk("pdf.pages.merge_in_order", "Merge several PDFs into one in a given order",
   lambda p: package("Merge b.pdf, then a.pdf, into all.pdf (all pages of b.pdf first).",
                     _pdf("a.pdf", p["pages"][:2]) + _pdf("b.pdf", p["pages"][2:]), _has("all.pdf", p["pages"][2:] + p["pages"][:2]),
                     [py("from pypdf import PdfWriter\nw = PdfWriter()\nfor f in ('a.pdf', 'b.pdf'): w.append(f)\nw.write('all.pdf')")],
                     terminal=[py("from pypdf import PdfWriter\nw = PdfWriter()\nfor f in ('b.pdf', 'a.pdf'): w.append(f)\nw.write('all.pdf')")]), mention=False)

sk("pdf.pages.split_each", "Split a PDF into one file per page",
   lambda p: package("Split doc.pdf into one file per page named page1.pdf, page2.pdf, ... in a new directory pages/.",
                     _pdf("doc.pdf", p["pages"]),
                     {"type": "all", "checks": [_has(f"pages/page{i + 1}.pdf", [t]) for i, t in enumerate(p["pages"])]},
                     [py("import os\nfrom pypdf import PdfReader, PdfWriter\nos.makedirs('pages', exist_ok=True)\n"
                         "for i, x in enumerate(PdfReader('doc.pdf').pages[:-1]):\n  w = PdfWriter(); w.add_page(x); w.write(f'pages/page{i + 1}.pdf')")],
                     terminal=[py("import os\nfrom pypdf import PdfReader, PdfWriter\nos.makedirs('pages', exist_ok=True)\n"
                                  "for i, x in enumerate(PdfReader('doc.pdf').pages):\n  w = PdfWriter(); w.add_page(x); w.write(f'pages/page{i + 1}.pdf')")]),
   sample=lambda r: {"pages": _pages(r, 3)})

sk("pdf.pages.delete_page", "Remove one page from a PDF",
   lambda p: package(f"Write trimmed.pdf: doc.pdf without its page {p['pick'] + 1}.", _pdf("doc.pdf", p["pages"]),
                     _has("trimmed.pdf", [t for i, t in enumerate(p["pages"]) if i != p["pick"]]),
                     [_rw("doc.pdf", "trimmed.pdf", "pg[1:]" if p["pick"] else "pg[:-1]")],
                     terminal=[_rw("doc.pdf", "trimmed.pdf", f"[x for i, x in enumerate(pg) if i != {p['pick']}]")]),
   sample=lambda r: {"pages": _pages(r, 5), "pick": r.randint(1, 3)})

sk("pdf.pages.reverse_order", "Reverse the page order of a PDF",
   lambda p: package("Write reversed.pdf with the pages of doc.pdf in reverse order.", _pdf("doc.pdf", p["pages"]),
                     _has("reversed.pdf", p["pages"][::-1]), [_rw("doc.pdf", "reversed.pdf", "list(pg)[1:] + list(pg)[:1]")],
                     terminal=[_rw("doc.pdf", "reversed.pdf", "list(pg)[::-1]")]))

sk("pdf.pages.extract_range", "Extract a range of pages into a new PDF",
   lambda p: package(f"Write excerpt.pdf holding pages {p['a']} to {p['b']} (inclusive, from 1) of doc.pdf.",
                     _pdf("doc.pdf", p["pages"]), _has("excerpt.pdf", p["pages"][p["a"] - 1:p["b"]]),
                     [_rw("doc.pdf", "excerpt.pdf", f"pg[{p['a'] - 1}:{p['b'] - 1}]")],
                     terminal=[_rw("doc.pdf", "excerpt.pdf", f"pg[{p['a'] - 1}:{p['b']}]")]),
   sample=lambda r: {"pages": _pages(r, 6), "a": r.randint(2, 3), "b": r.randint(4, 5)})

sk("pdf.pages.rotate_some", "Rotate the even pages of a PDF by 90 degrees in place",
   lambda p: package("Rotate every even-numbered page (2, 4, ...) of doc.pdf clockwise by 90 degrees; save in place.",
                     _pdf("doc.pdf", p["pages"]),
                     {"type": "pdf_rotation", "path": "doc.pdf", "rotations": [90 * (i % 2) for i in range(len(p["pages"]))]},
                     [py("from pypdf import PdfReader, PdfWriter\nw = PdfWriter(clone_from=PdfReader('doc.pdf'))\n"
                         "for i, x in enumerate(w.pages):\n  if i % 2 == 0: x.rotate(90)\nw.write('doc.pdf')")],
                     terminal=[py("from pypdf import PdfReader, PdfWriter\nw = PdfWriter(clone_from=PdfReader('doc.pdf'))\n"
                                  "for i, x in enumerate(w.pages):\n  if i % 2 == 1: x.rotate(90)\nw.write('doc.pdf')")]))

# ---- meta --------------------------------------------------------------------------------------
sk("pdf.meta.set_title_author", "Set a PDF's title and author metadata",
   lambda p: package(f"Set the title of doc.pdf to {p['title']} and its author to {p['author']} (keep the pages; save in place).",
                     _pdf("doc.pdf", p["pages"]),
                     {"type": "pdf_meta", "path": "doc.pdf", "title": p["title"], "author": p["author"]},
                     [py(f"from pypdf import PdfReader, PdfWriter\nw = PdfWriter(clone_from=PdfReader('doc.pdf'))\n"
                         f"w.add_metadata({{'/Title': {p['title']!r}}})\nw.write('doc.pdf')")],
                     terminal=[py(f"from pypdf import PdfReader, PdfWriter\nw = PdfWriter(clone_from=PdfReader('doc.pdf'))\n"
                                  f"w.add_metadata({{'/Title': {p['title']!r}, '/Author': {p['author']!r}}})\nw.write('doc.pdf')")]),
   sample=lambda r: {"pages": _pages(r, 2), "title": f"{r.choice(WORDS).title()} Handbook", "author": r.choice(NAMES)})

sk("pdf.meta.read_author", "Print the author recorded in a PDF's metadata",
   lambda p: package("Print the author stored in the metadata of doc.pdf as your last command's output.",
                     _pdf("doc.pdf", p["pages"], title=p["title"], author=p["author"]),
                     {"type": "terminal_answer", "text": p["author"]},
                     [_read("print(r.metadata.title)")], terminal=[_read("print(r.metadata.author)")]),
   sample=lambda r: {"pages": _pages(r, 2), "title": f"{r.choice(WORDS).title()} notes", "author": f"{r.choice(NAMES)} {r.choice(NAMES)}son"})

# ---- read --------------------------------------------------------------------------------------
sk("pdf.read.page_count", "Print the number of pages of a PDF",
   lambda p: package("How many pages does doc.pdf have? Print just the number as your last command's output.",
                     _pdf("doc.pdf", p["pages"]), {"type": "terminal_answer", "text": str(len(p["pages"]))},
                     [_read("print(len(r.pages) - 1)")], terminal=[_read("print(len(r.pages))")]),
   sample=lambda r: {"pages": _pages(r, r.randint(3, 8))})

sk("pdf.read.find_page", "Print the number of the page that holds a phrase",
   lambda p: package(f"On which page (counting from 1) of doc.pdf does the name {p['name']} appear? Print just the number "
                     "as your last command's output.", _pdf("doc.pdf", p["pages"]),
                     {"type": "terminal_answer", "text": str(next(i + 1 for i, t in enumerate(p["pages"]) if p["name"] in t))},
                     [_read(f"print(next(i for i, x in enumerate(r.pages) if {p['name']!r} in x.extract_text()))")],
                     terminal=[_read(f"print(next(i + 1 for i, x in enumerate(r.pages) if {p['name']!r} in x.extract_text()))")]),
   sample=lambda r: (lambda pages: {"pages": pages, "name": pages[r.randint(1, 4)].split()[-1]})(_pages(r, 5)))

sk("pdf.read.invoice_total", "Copy a labelled value from a PDF into a text file",
   lambda p: package("doc.pdf is an invoice. Write its total amount (the number after 'Total due:') to total.txt.",
                     _pdf("doc.pdf", [f"Invoice {p['no']}\nSubtotal: {p['sub']}\nTotal due: {p['total']}"]),
                     {"type": "file_text", "path": "total.txt", "equals": str(p["total"])},
                     [_read("import re\nopen('total.txt', 'w').write(re.search(r'Subtotal: (\\S+)', r.pages[0].extract_text())[1])")],
                     terminal=[_read("import re\nopen('total.txt', 'w').write(re.search(r'Total due: (\\S+)', r.pages[0].extract_text())[1])")]),
   sample=lambda r: (lambda sub: {"no": r.randint(1000, 9999), "sub": sub, "total": round(sub * 1.2, 2)})(r.randint(100, 900)),
   apps=("pdf", "text"))

# ---- create ------------------------------------------------------------------------------------
sk("pdf.create.from_text_pages", "Write a PDF with one page per paragraph of a text file",
   lambda p: package("Create notes.pdf from notes.txt: one page per paragraph (paragraphs are separated by blank lines).",
                     [{"type": "text", "path": "notes.txt", "content": "\n\n".join(p["pages"]) + "\n"}], _has("notes.pdf", p["pages"]),
                     [py("from fpdf import FPDF\nf = FPDF(); f.set_font('Helvetica', size=12); f.add_page()\n"
                         "f.multi_cell(0, 8, open('notes.txt').read())\nf.output('notes.pdf')")],
                     terminal=[py("from fpdf import FPDF\nf = FPDF(); f.set_font('Helvetica', size=12)\n"
                                  "for para in open('notes.txt').read().strip().split('\\n\\n'):\n  f.add_page(); f.multi_cell(0, 8, para)\n"
                                  "f.output('notes.pdf')")]),
   sample=lambda r: {"pages": _pages(r, 3)}, apps=("text", "pdf"))
