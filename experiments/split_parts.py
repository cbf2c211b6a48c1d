"""Split a trajectory JSONL into N parts (round-robin over its lines), for the proof's SFT config,
whose sources (gui, terminal, grounding) each need a file and must not share an episode id: one file
given to two sources would fail. The terminal-only experiments fill all three with one file's parts.

  python experiments/split_parts.py IN.jsonl OUT_1.jsonl OUT_2.jsonl [OUT_3.jsonl ...]
"""
import sys


def main(src: str, outs: list[str]) -> None:
  with open(src, encoding="utf-8") as f:
    lines = [line for line in f if line.strip()]
  if len(lines) < len(outs):
    sys.exit(f"{src}: {len(lines)} episodes, fewer than the {len(outs)} parts asked for")
  parts = [lines[i::len(outs)] for i in range(len(outs))]
  for path, part in zip(outs, parts):
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(part)
  print(f"{src}: {len(lines)} episodes -> " + ", ".join(f"{p} ({len(x)})" for p, x in zip(outs, parts)))


if __name__ == "__main__":
  if len(sys.argv) < 4:
    sys.exit(__doc__)
  main(sys.argv[1], sys.argv[2:])
