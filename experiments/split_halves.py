"""Split a trajectory JSONL into two halves (alternate lines), for the proof's SFT config, whose two
sources (teacher, grounding) must not share an episode id: one file given twice would fail.

  python experiments/split_halves.py IN.jsonl OUT_A.jsonl OUT_B.jsonl
"""
import sys


def main(src: str, out_a: str, out_b: str) -> None:
  with open(src, encoding="utf-8") as f:
    lines = [line for line in f if line.strip()]
  if not lines:
    sys.exit(f"{src}: no episodes to split")
  for path, part in ((out_a, lines[0::2]), (out_b, lines[1::2])):
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(part)
  print(f"{src}: {len(lines)} episodes -> {out_a} ({len(lines[0::2])}), {out_b} ({len(lines[1::2])})")


if __name__ == "__main__":
  if len(sys.argv) != 4:
    sys.exit(__doc__)
  main(*sys.argv[1:])
