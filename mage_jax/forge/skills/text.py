"""Text processing: filter, transform, count, extract and edit plain-text files."""
from __future__ import annotations

import collections

from mage_jax.forge.skills.base import CITIES, NAMES, WORDS, against_order, bash, capability, define, distinct, domain, package

domain("text", "Plain-text processing with the standard tools: filter, transform, count, extract, edit")
capability("text.filter", "Keep or drop lines by rule")
capability("text.transform", "Rewrite the lines of a file")
capability("text.count", "Count words, lines and characters and answer in the shell")
capability("text.extract", "Pull fields and patterns out of text")
capability("text.edit", "Edit a file in place")
A = ("text",)


def _lines(r, n=8):
  return [f"{r.choice(['INFO', 'WARN', 'ERROR'])} {w} {r.randint(10, 99)}" for w in (r.choice(WORDS) for _ in range(n))]


def _src(path, lines):
  return [{"type": "text", "path": path, "content": "\n".join(lines) + "\n"}]


def _out(path, lines):
  return {"type": "file_text", "path": path, "equals": "\n".join(lines)}


def _mention(path, key):
  return lambda p: {path: [str(p[key][0])]}


# ---- filter ------------------------------------------------------------------------------------
def _log(r):
  lines = _lines(r, 10)
  lines[r.randint(0, 9)] = f"ERROR {r.choice(WORDS)} 7"
  return {"lines": lines, "level": "ERROR"}


define("text.filter.keep_matching", "Keep only the lines that contain a word",
       _log, lambda p: package(f"Write the lines of app.log that contain {p['level']} to errors.txt, in order.",
                               _src("app.log", p["lines"]), _out("errors.txt", [l for l in p["lines"] if p["level"] in l]),
                               [bash("grep -i error app.log | head -n 1 > errors.txt")],
                               terminal=[bash(f"grep {p['level']} app.log > errors.txt")]),
       apps=A, mentions=_mention("app.log", "lines"))

define("text.filter.drop_comments", "Remove comment and blank lines from a config file",
       lambda r: {"lines": ["# settings", f"host={r.choice(CITIES).lower()}", "", f"port={r.randint(1000, 9999)}",
                            "  # old", f"user={r.choice(NAMES).lower()}"]},
       lambda p: package("Write settings.conf without its comment lines (starting with #, maybe after spaces) and blank "
                         "lines to clean.conf.", _src("settings.conf", p["lines"]),
                         _out("clean.conf", [l for l in p["lines"] if l.strip() and not l.strip().startswith("#")]),
                         [bash("grep -v '^#' settings.conf > clean.conf")],
                         terminal=[bash("grep -Ev '^\\s*(#|$)' settings.conf > clean.conf")]), apps=A)

define("text.filter.unique_in_order", "Drop repeated lines, keeping the first occurrence in order",
       lambda r: {"lines": [r.choice(WORDS[:6]) for _ in range(12)]},
       lambda p: package("Write the lines of visits.txt to unique.txt, keeping only the first occurrence of each line "
                         "(original order).", _src("visits.txt", p["lines"]), _out("unique.txt", list(dict.fromkeys(p["lines"]))),
                         [bash("sort -u visits.txt > unique.txt")], terminal=[bash("awk '!seen[$0]++' visits.txt > unique.txt")]),
       apps=A)

define("text.filter.line_range", "Extract a range of lines by number",
       lambda r: {"lines": [f"{w} {i}" for i, w in enumerate(r.choices(WORDS, k=15), 1)], "a": r.randint(3, 6),
                  "b": r.randint(8, 12)},
       lambda p: package(f"Write lines {p['a']} to {p['b']} (inclusive, counting from 1) of book.txt to part.txt.",
                         _src("book.txt", p["lines"]), _out("part.txt", p["lines"][p["a"] - 1:p["b"]]),
                         [bash(f"sed -n '{p['a']},{p['b'] - 1}p' book.txt > part.txt")],
                         terminal=[bash(f"sed -n '{p['a']},{p['b']}p' book.txt > part.txt")]), apps=A)

# ---- transform ---------------------------------------------------------------------------------
define("text.transform.sort_numeric_desc", "Sort numeric lines from largest to smallest",
       lambda r: {"nums": against_order(r.sample(range(1, 500), 8), largest_first=True)},
       lambda p: package("Sort the numbers in scores.txt from largest to smallest (numerically) into ranked.txt.",
                         _src("scores.txt", map(str, p["nums"])), _out("ranked.txt", map(str, sorted(p["nums"], reverse=True))),
                         [bash("sort -r scores.txt > ranked.txt")], terminal=[bash("sort -nr scores.txt > ranked.txt")]),
       apps=A)

define("text.transform.upper_case", "Convert a file to upper case",
       lambda r: {"lines": [" ".join(r.sample(WORDS, 3)) for _ in range(4)]},
       lambda p: package("Write shout.txt: the text of quiet.txt in upper case.", _src("quiet.txt", p["lines"]),
                         _out("shout.txt", [l.upper() for l in p["lines"]]),
                         [bash("sed 's/^./\\U&/' quiet.txt > shout.txt")], terminal=[bash("tr a-z A-Z < quiet.txt > shout.txt")]),
       apps=A)

define("text.transform.replace_in_place", "Replace every occurrence of a word in a file, in place",
       lambda r: {"old": "colour", "new": "color", "lines": [f"the {r.choice(WORDS)} colour {i}" for i in range(5)]},
       lambda p: package(f"In essay.txt replace every '{p['old']}' with '{p['new']}' (edit the file in place).",
                         _src("essay.txt", p["lines"]), _out("essay.txt", [l.replace(p["old"], p["new"]) for l in p["lines"]]),
                         [bash(f"sed -i '1s/{p['old']}/{p['new']}/' essay.txt")],
                         terminal=[bash(f"sed -i 's/{p['old']}/{p['new']}/g' essay.txt")]), apps=A)

define("text.transform.reverse_lines", "Reverse the order of lines",
       lambda r: {"lines": [f"step {w}" for w in distinct(r, WORDS, 6)]},
       lambda p: package("Write the lines of steps.txt in reverse order (last line first) to undo.txt.",
                         _src("steps.txt", p["lines"]), _out("undo.txt", p["lines"][::-1]),
                         [bash("sort -r steps.txt > undo.txt")], terminal=[bash("tac steps.txt > undo.txt")]), apps=A)

define("text.transform.join_with_commas", "Join all lines into one comma-separated line",
       lambda r: {"lines": distinct(r, NAMES, 6)},
       lambda p: package("Write the names of guests.txt as one line, separated by commas (no spaces), to line.txt.",
                         _src("guests.txt", p["lines"]), _out("line.txt", [",".join(p["lines"])]),
                         [bash("paste -sd' ' guests.txt > line.txt")], terminal=[bash("paste -sd, guests.txt > line.txt")]),
       apps=A)

# ---- count -------------------------------------------------------------------------------------
define("text.count.words", "Count the words of a file and print the number",
       lambda r: {"lines": [" ".join(r.choices(WORDS, k=r.randint(2, 9))) for _ in range(6)]},
       lambda p: package("How many words does poem.txt have? Print just the number as your last command's output.",
                         _src("poem.txt", p["lines"]), {"type": "terminal_answer", "text": str(sum(len(l.split()) for l in p["lines"]))},
                         [bash("wc -l < poem.txt")], terminal=[bash("wc -w < poem.txt")]), apps=A)

define("text.count.most_frequent_word", "Print the most frequent word of a file",
       lambda r: {"words": r.choices(WORDS[:5], weights=[9, 4, 3, 2, 1], k=30)},
       lambda p: package("Which word occurs most often in words.txt? Print just that word as your last command's output.",
                         _src("words.txt", [" ".join(p["words"][i:i + 6]) for i in range(0, 30, 6)]),
                         {"type": "terminal_answer", "text": collections.Counter(p["words"]).most_common(1)[0][0]},
                         [bash("tr ' ' '\\n' < words.txt | sort | uniq -c | sort -n | tail -n 1 | awk '{print $1}'")],
                         terminal=[bash("tr ' ' '\\n' < words.txt | sort | uniq -c | sort -n | tail -n 1 | awk '{print $2}'")]),
       apps=A)

define("text.count.longest_line_length", "Print the length of the longest line",
       lambda r: {"lines": [r.choice(WORDS)] + [" ".join(r.choices(WORDS, k=r.randint(2, 7))) for _ in range(6)]},
       lambda p: package("How many characters long is the longest line of notes.txt? Print just the number as your last "
                         "command's output.", _src("notes.txt", p["lines"]),
                         {"type": "terminal_answer", "text": str(max(map(len, p["lines"])))},
                         [bash("head -n 1 notes.txt | awk '{print length}'")], terminal=[bash("wc -L < notes.txt")]), apps=A)

# ---- extract -----------------------------------------------------------------------------------
define("text.extract.emails", "Extract the distinct e-mail addresses of a text, sorted",
       lambda r: {"people": distinct(r, NAMES, 4), "host": r.choice(["ex.org", "mail.io"])},
       lambda p: package("Write every distinct e-mail address found in thread.txt, sorted, one per line, to emails.txt.",
                         _src("thread.txt", [f"From {n} <{n.lower()}@{p['host']}> re: {n.lower()}@{p['host']} cc "
                                             f"{p['people'][0].lower()}@{p['host']}" for n in p["people"]]),
                         _out("emails.txt", sorted({f"{n.lower()}@{p['host']}" for n in p["people"]})),
                         [bash("grep -oE '[a-z]+@[a-z.]+' thread.txt > emails.txt")],
                         terminal=[bash("grep -oE '[a-z]+@[a-z.]+[a-z]' thread.txt | sort -u > emails.txt")]), apps=A)

define("text.extract.field_of_records", "Cut one field out of colon-separated records",
       lambda r: {"rows": [[n.lower(), str(1000 + i), r.choice(CITIES)] for i, n in enumerate(distinct(r, NAMES, 5))]},
       lambda p: package("users.db.txt has colon-separated records name:id:city. Write the third field of each record "
                         "(in order) to cities.txt.", _src("users.db.txt", [":".join(x) for x in p["rows"]]),
                         _out("cities.txt", [x[2] for x in p["rows"]]),
                         [bash("cut -d: -f2 users.db.txt > cities.txt")], terminal=[bash("cut -d: -f3 users.db.txt > cities.txt")]),
       apps=A)

define("text.extract.config_value", "Look up one key in an INI-style file and print its value",
       lambda r: {"pairs": {k: f"{r.choice(WORDS)}{r.randint(1, 99)}" for k in ("name", "mode", "region", "tier")},
                  "key": r.choice(["mode", "region", "tier"])},
       lambda p: package(f"Print the value of the key {p['key']} in the [main] section of app.ini as your last command's "
                         "output (just the value).",
                         _src("app.ini", ["[main]"] + [f"{k} = {v}" for k, v in p["pairs"].items()]
                              + ["[backup]"] + [f"{k} = old{v}" for k, v in p["pairs"].items()]),
                         {"type": "terminal_answer", "text": p["pairs"][p["key"]]},
                         [bash(f"grep '^{p['key']}' app.ini | tail -n 1 | cut -d= -f2 | tr -d ' '")],
                         terminal=[bash(f"grep -m1 '^{p['key']} ' app.ini | cut -d= -f2 | tr -d ' '")]), apps=A)

# ---- edit --------------------------------------------------------------------------------------
define("text.edit.append_count", "Append a line stating how many lines a file has",
       lambda r: {"lines": [f"- {w}" for w in distinct(r, WORDS, r.randint(3, 9))]},
       lambda p: package("Append a last line 'total: N' to list.txt, where N is how many lines it has now.",
                         _src("list.txt", p["lines"]), _out("list.txt", p["lines"] + [f"total: {len(p['lines'])}"]),
                         [bash(f"echo 'total: {len(p['lines']) + 1}' >> list.txt")],
                         terminal=[bash("echo \"total: $(wc -l < list.txt)\" >> list.txt")]), apps=A)

define("text.edit.insert_header", "Insert a header line at the top of a file",
       lambda r: {"lines": [f"{r.randint(1, 9)},{r.choice(WORDS)}" for _ in range(4)], "header": "qty,item"},
       lambda p: package(f"Insert the line {p['header']} as the new first line of stock.txt (in place).",
                         _src("stock.txt", p["lines"]), _out("stock.txt", [p["header"]] + p["lines"]),
                         [bash(f"echo {p['header']} >> stock.txt")], terminal=[bash(f"sed -i '1i {p['header']}' stock.txt")]),
       apps=A)
