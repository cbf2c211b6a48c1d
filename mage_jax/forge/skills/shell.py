"""Shell & files: create, organize, inspect, search and archive files from bash."""
from __future__ import annotations

from mage_jax.forge.skills.base import NAMES, WORDS, bash, capability, csv_text, define, distinct, domain, package, py

domain("shell", "Files and directories from the shell: create, organize, inspect, search, archive")
capability("shell.create", "Create files and directory trees with given content")
capability("shell.organize", "Rename, move, delete and copy files by rule")
capability("shell.inspect", "Answer questions about files (counts, sizes, times)")
capability("shell.search", "Find files by content, name or size")
capability("shell.archive", "Create and extract zip and tar archives")
A = ("shell",)


def _text(p):
  return {"type": "text", "path": p[0], "content": p[1]}


# ---- create ------------------------------------------------------------------------------------
define("shell.create.file_with_lines", "Create a file holding given words, one per line",
       lambda r: {"file": f"{r.choice(WORDS)}.txt", "words": distinct(r, WORDS, 4)},
       lambda p: package(f"Create {p['file']} in the home directory with these words, one per line, in this order: "
                         + ", ".join(p["words"]) + ".", [],
                         {"type": "file_text", "path": p["file"], "equals": "\n".join(p["words"])},
                         [bash(f"printf '%s\\n' {' '.join(p['words'][:-1])} > {p['file']}")],
                         terminal=[bash(f"printf '%s\\n' {' '.join(p['words'])} > {p['file']}")]), apps=A)

define("shell.create.nested_file", "Create a file at a nested path whose directories do not exist yet",
       lambda r: {"dirs": distinct(r, WORDS, 3), "name": "notes.md", "text": f"owner: {r.choice(NAMES)}"},
       lambda p: package(f"Create the file {'/'.join(p['dirs'])}/{p['name']} (make the directories) containing the "
                         f"line: {p['text']}", [],
                         {"type": "file_text", "path": f"{'/'.join(p['dirs'])}/{p['name']}", "equals": p["text"]},
                         [bash(f"mkdir -p {'/'.join(p['dirs'][:2])} && echo '{p['text']}' > "
                               f"{'/'.join(p['dirs'][:2])}/{p['name']}")],
                         terminal=[bash(f"mkdir -p {'/'.join(p['dirs'])} && echo '{p['text']}' > "
                                        f"{'/'.join(p['dirs'])}/{p['name']}")]), apps=A)

define("shell.create.numbered_series", "Create a numbered series of empty files in a directory",
       lambda r: {"dir": r.choice(WORDS), "stem": r.choice(["log", "part", "chunk"]), "n": r.randint(4, 8)},
       lambda p: package(f"In a new directory {p['dir']}/, create empty files {p['stem']}_1.txt, {p['stem']}_2.txt and "
                         f"so on up to {p['stem']}_{p['n']}.txt (nothing else in that directory).", [],
                         {"type": "dir_listing", "path": p["dir"],
                          "equals": [f"{p['stem']}_{i}.txt" for i in range(1, p["n"] + 1)]},
                         [bash(f"mkdir -p {p['dir']} && touch {p['dir']}/{p['stem']}_{{1..{p['n'] - 1}}}.txt")],
                         terminal=[bash(f"mkdir -p {p['dir']} && touch {p['dir']}/{p['stem']}_{{1..{p['n']}}}.txt")]),
       apps=A)

# ---- organize ----------------------------------------------------------------------------------
define("shell.organize.change_extension", "Change the extension of every file of one type in a directory",
       lambda r: {"dir": r.choice(WORDS), "names": distinct(r, WORDS, 4), "old": "txt", "new": r.choice(["md", "rst"])},
       lambda p: package(f"Rename every .{p['old']} file in {p['dir']}/ to have a .{p['new']} extension instead.",
                         [_text((f"{p['dir']}/{n}.{p['old']}", n)) for n in p["names"]],
                         {"type": "dir_listing", "path": p["dir"], "equals": [f"{n}.{p['new']}" for n in p["names"]]},
                         [bash(f"cd {p['dir']} && mv {p['names'][0]}.{p['old']} {p['names'][0]}.{p['new']}; cd ~")],
                         terminal=[bash(f"cd {p['dir']} && for f in *.{p['old']}; do mv \"$f\" \"${{f%.{p['old']}}}."
                                        f"{p['new']}\"; done; cd ~")]), apps=A)

define("shell.organize.sort_into_folders", "Move files into sub-folders named after their extension",
       lambda r: {"dir": "inbox", "files": [f"{w}.{e}" for w, e in zip(distinct(r, WORDS, 5),
                                                                      ["csv", "log", "csv", "log", "log"])]},
       lambda p: package(f"In {p['dir']}/, move every file into a sub-folder named after its extension "
                         f"(a.csv goes to {p['dir']}/csv/a.csv).",
                         [_text((f"{p['dir']}/{f}", f)) for f in p["files"]],
                         {"type": "all", "checks": [{"type": "dir_listing", "path": f"{p['dir']}/{e}",
                                                     "equals": [f for f in p["files"] if f.endswith("." + e)]}
                                                    for e in ("csv", "log")]},
                         [bash(f"cd {p['dir']} && mkdir -p csv && mv *.csv csv/; cd ~")],
                         terminal=[bash(f"cd {p['dir']} && for f in *.*; do mkdir -p \"${{f##*.}}\" && mv \"$f\" "
                                        f"\"${{f##*.}}/\"; done; cd ~")]), apps=A)

define("shell.organize.delete_by_pattern", "Delete the files matching a pattern and keep the rest",
       lambda r: {"dir": "build", "keep": distinct(r, WORDS, 3), "junk": distinct(r, NAMES, 3),
                  "ext": r.choice(["tmp", "bak", "o"])},
       lambda p: package(f"Delete every *.{p['ext']} file in {p['dir']}/ and leave the other files alone.",
                         [_text((f"{p['dir']}/{n}.txt", n)) for n in p["keep"]]
                         + [_text((f"{p['dir']}/{n}.{p['ext']}", n)) for n in p["junk"]],
                         {"type": "dir_listing", "path": p["dir"], "equals": [f"{n}.txt" for n in p["keep"]]},
                         [bash(f"rm {p['dir']}/{p['junk'][0]}.{p['ext']}")],
                         terminal=[bash(f"rm -f {p['dir']}/*.{p['ext']}")]), apps=A)

define("shell.organize.flatten_tree", "Move every file out of nested sub-directories into one directory",
       lambda r: {"dir": "src", "files": {f"{a}/{b}.txt": b for a, b in zip(distinct(r, WORDS, 4), distinct(r, NAMES, 4))}},
       lambda p: package(f"Move every file found anywhere under {p['dir']}/ directly into flat/ (create it); "
                         f"file names stay the same.", [_text((f"{p['dir']}/{k}", v)) for k, v in p["files"].items()],
                         {"type": "dir_listing", "path": "flat", "equals": [k.split("/")[1] for k in p["files"]]},
                         [bash(f"mkdir -p flat && mv {p['dir']}/{next(iter(p['files']))} flat/")],
                         terminal=[bash(f"mkdir -p flat && find {p['dir']} -type f -exec mv {{}} flat/ \\;")]), apps=A)

define("shell.organize.prefix_dates", "Prefix every file name in a directory with a given tag",
       lambda r: {"dir": "photos", "names": distinct(r, WORDS, 3), "tag": f"2024-0{r.randint(1, 9)}"},
       lambda p: package(f"Rename each file in {p['dir']}/ to start with the prefix {p['tag']}_ "
                         f"(x.jpg becomes {p['tag']}_x.jpg).", [_text((f"{p['dir']}/{n}.jpg", n)) for n in p["names"]],
                         {"type": "dir_listing", "path": p["dir"], "equals": [f"{p['tag']}_{n}.jpg" for n in p["names"]]},
                         [bash(f"cd {p['dir']} && for f in *; do mv \"$f\" \"{p['tag']}-$f\"; done; cd ~")],
                         terminal=[bash(f"cd {p['dir']} && for f in *; do mv \"$f\" \"{p['tag']}_$f\"; done; cd ~")]),
       apps=A)

# ---- inspect -----------------------------------------------------------------------------------
define("shell.inspect.count_files_recursive", "Count the files under a directory tree and print the number",
       lambda r: {"files": [f"{r.choice(['a', 'b', 'c'])}/{w}.dat" for w in distinct(r, WORDS, r.randint(5, 11))]},
       lambda p: package("How many regular files are there under data/ (all sub-directories included)? Print just the "
                         "number as your last command's output.", [_text((f"data/{f}", f)) for f in p["files"]],
                         {"type": "terminal_answer", "text": str(len(p["files"]))},
                         [bash("ls data | wc -l")], terminal=[bash("find data -type f | wc -l")]), apps=A)

define("shell.inspect.largest_file", "Write the name of the largest file in a directory to a file",
       lambda r: {"sizes": dict(zip(distinct(r, WORDS, 4), r.sample(range(50, 900, 37), 4)))},
       lambda p: package("Which file in blobs/ is the largest? Write just its file name to answer.txt.",
                         [_text((f"blobs/{n}.bin", "x" * s)) for n, s in p["sizes"].items()],
                         {"type": "file_text", "path": "answer.txt",
                          "equals": max(p["sizes"], key=p["sizes"].get) + ".bin"},
                         [bash(f"echo {min(p['sizes'], key=p['sizes'].get)}.bin > answer.txt")],
                         terminal=[bash("ls -S blobs | head -n 1 > answer.txt")]), apps=A)

define("shell.inspect.total_bytes", "Print the total size in bytes of the files of one type",
       lambda r: {"sizes": dict(zip(distinct(r, WORDS, 5), r.sample(range(20, 400, 13), 5)))},
       lambda p: package("Print the total size in bytes of all .log files in logs/ (just the number, as your last "
                         "command's output).",
                         [_text((f"logs/{n}.log", "y" * s)) for n, s in p["sizes"].items()]
                         + [_text(("logs/readme.txt", "not a log"))],
                         {"type": "terminal_answer", "text": str(sum(p["sizes"].values()))},
                         [bash("cat logs/* | wc -c")], terminal=[bash("cat logs/*.log | wc -c")]), apps=A)

define("shell.inspect.newest_file", "Name the most recently modified file of a directory",
       lambda r: {"order": distinct(r, WORDS, 4)},
       lambda p: package("Print the name of the most recently modified file in reports/ as your last command's output.",
                         [{"type": "script", "script": "mkdir -p reports && " + " && ".join(
                             f"echo {n} > reports/{n}.txt && touch -d '2024-01-0{i + 1} 10:00' reports/{n}.txt"
                             for i, n in enumerate(p["order"]))}],
                         {"type": "terminal_answer", "text": p["order"][-1] + ".txt"},
                         [bash("ls -tr reports | head -n 1")], terminal=[bash("ls -t reports | head -n 1")]), apps=A)

# ---- search ------------------------------------------------------------------------------------
define("shell.search.files_containing", "List, sorted, the files whose content contains a word",
       lambda r: {"word": r.choice(["TODO", "FIXME", "XXX"]), "hits": distinct(r, WORDS, 6)[:3], "misses": distinct(r, NAMES, 3)},
       lambda p: package(f"Write the names of the files in code/ that contain {p['word']}, sorted, one per line, to "
                         "hits.txt.", [_text((f"code/{n}.py", f"# {p['word']}: fix\nx = 1\n")) for n in p["hits"]]
                         + [_text((f"code/{n}.py", "x = 2\n")) for n in p["misses"]],
                         {"type": "file_text", "path": "hits.txt", "equals": "\n".join(sorted(f"{n}.py" for n in p["hits"]))},
                         [bash(f"grep -l {p['word']} code/* | sort > hits.txt")],
                         terminal=[bash(f"grep -l {p['word']} code/* | xargs -n1 basename | sort > hits.txt")]), apps=A)

define("shell.search.find_by_size", "List the files bigger than a size threshold",
       lambda r: {"sizes": dict(zip(distinct(r, WORDS, 6), r.sample(range(100, 3000, 97), 6))), "limit": 1000},
       lambda p: package(f"Write the names of the files in store/ larger than {p['limit']} bytes, sorted, one per line, "
                         "to big.txt.", [_text((f"store/{n}.dat", "z" * s)) for n, s in p["sizes"].items()],
                         {"type": "file_text", "path": "big.txt",
                          "equals": "\n".join(sorted(f"{n}.dat" for n, s in p["sizes"].items() if s > p["limit"]))},
                         [bash("ls store | sort > big.txt")],
                         terminal=[bash(f"find store -type f -size +{p['limit']}c -printf '%f\\n' | sort > big.txt")]),
       apps=A)

define("shell.search.find_by_name", "Find where a named file lives in a tree and print its path",
       lambda r: {"dirs": distinct(r, WORDS, 4), "target": r.choice(NAMES).lower() + ".cfg"},
       lambda p: package(f"Somewhere under etc/ there is a file called {p['target']}. Print its path relative to the "
                         "home directory (like etc/a/b/x.cfg) as your last command's output.",
                         [_text((f"etc/{p['dirs'][0]}/{p['dirs'][1]}/{p['target']}", "k=v"))]
                         + [_text((f"etc/{d}/other.cfg", "k=w")) for d in p["dirs"][2:]],
                         {"type": "terminal_answer", "text": f"etc/{p['dirs'][0]}/{p['dirs'][1]}/{p['target']}"},
                         [bash("find etc -name other.cfg | head -n 1")], terminal=[bash(f"find etc -name {p['target']}")]),
       apps=A)

# ---- archive -----------------------------------------------------------------------------------
define("shell.archive.create_tar_gz", "Pack a directory into a gzipped tarball",
       lambda r: {"dir": r.choice(WORDS), "files": distinct(r, NAMES, 3)},
       lambda p: package(f"Pack the files of {p['dir']}/ into {p['dir']}.tar.gz so that the archive holds them as "
                         f"{p['dir']}/<name>.", [_text((f"{p['dir']}/{n}.txt", n)) for n in p["files"]],
                         {"type": "archive_members", "path": f"{p['dir']}.tar.gz",
                          "names": [f"{p['dir']}/{n}.txt" for n in p["files"]]},
                         [bash(f"tar czf {p['dir']}.tar.gz {p['dir']}/{p['files'][0]}.txt")],
                         terminal=[bash(f"tar czf {p['dir']}.tar.gz {p['dir']}")]), apps=A)

define("shell.archive.zip_selected", "Zip only the files of one type, without directories",
       lambda r: {"csv": distinct(r, WORDS, 3), "other": distinct(r, NAMES, 2)},
       lambda p: package("Create bundle.zip holding only the .csv files of exports/ at the top level of the archive "
                         "(no directory prefix).", [_text((f"exports/{n}.csv", csv_text([["k"], [n]]))) for n in p["csv"]]
                         + [_text((f"exports/{n}.log", n)) for n in p["other"]],
                         {"type": "archive_members", "path": "bundle.zip", "names": [f"{n}.csv" for n in p["csv"]]},
                         [bash("cd exports && zip -q ../bundle.zip *; cd ~")],
                         terminal=[py("import zipfile, glob, os\nwith zipfile.ZipFile('bundle.zip', 'w') as z:\n"
                                      "  for f in glob.glob('exports/*.csv'):\n    z.write(f, os.path.basename(f))")]),
       apps=A)

define("shell.archive.extract_member", "Extract one member of a tar archive and write its content",
       lambda r: {"names": distinct(r, WORDS, 4), "pick": r.randint(0, 3), "code": f"{r.randint(1000, 9999)}"},
       lambda p: package(f"backup.tar.gz holds several notes. Extract {p['names'][p['pick']]}.txt from it into restored/ "
                         f"(as restored/{p['names'][p['pick']]}.txt).",
                         [{"type": "archive", "path": "backup.tar.gz", "format": "tar.gz",
                           "files": {f"{n}.txt": f"{n} code {p['code']}{i}" for i, n in enumerate(p["names"])}}],
                         {"type": "file_text", "path": f"restored/{p['names'][p['pick']]}.txt",
                          "equals": f"{p['names'][p['pick']]} code {p['code']}{p['pick']}"},
                         [bash(f"mkdir -p restored && tar xzf backup.tar.gz -C restored {p['names'][(p['pick'] + 1) % 4]}.txt"
                               f" && mv restored/{p['names'][(p['pick'] + 1) % 4]}.txt restored/{p['names'][p['pick']]}.txt")],
                         terminal=[bash(f"mkdir -p restored && tar xzf backup.tar.gz -C restored {p['names'][p['pick']]}.txt")]),
       apps=A)
