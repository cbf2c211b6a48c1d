"""What a finished GUI episode's RL samples weigh on their way back from an env host (Ray's
object store), pickled as the samples hold them vs packed (rl/screenshot_pack.py).

    python -m mage_jax.bench.screenshot_payload --shots='<episode dir>/o*.png' --visual_turns=3

Builds one episode from the given screenshots in order (call t's prompt shows the last
`visual_turns` of them, fresh arrays each, as `render_prompt` gives them) and prints sizes,
encode/decode times and a 50-call estimate. Any episode's saved observations serve
(`<out_dir>/<episode id>/o*.png`).
"""
from __future__ import annotations

import argparse
import glob
import json
import pickle
import time

import numpy as np

from mage_jax.rl import screenshot_pack
from mage_jax.rl.batch import RLSample


def measure(files: list[str], visual_turns: int = 3, estimate_calls: int = 50) -> dict[str, float]:
  from PIL import Image   # the bare GPU image runs this module: each path imports only what it needs
  if not files:
    raise SystemExit("screenshot_payload: --shots matched no file")
  shots = [np.array(Image.open(f).convert("RGB")) for f in files]
  t0 = time.perf_counter()
  pngs = [screenshot_pack.encode_screenshot(s) for s in shots]
  encode = (time.perf_counter() - t0) / len(shots)
  t0 = time.perf_counter()
  for p in pngs:
    screenshot_pack.decode_screenshot(p)
  decode = (time.perf_counter() - t0) / len(shots)
  samples = [RLSample([1], [2], [-0.1], 0.0, t, images=[shots[k].copy() for k in
                                                         range(max(0, t - visual_turns + 1), t + 1)])
             for t in range(len(shots))]
  unpacked = len(pickle.dumps(samples, protocol=5))
  packed = len(pickle.dumps(screenshot_pack.pack(samples), protocol=5))
  png = float(np.mean([len(p) for p in pngs]))
  images = sum(min(t + 1, visual_turns) for t in range(estimate_calls))
  return {"screenshots": len(shots), "height": shots[0].shape[0], "width": shots[0].shape[1],
          "raw_kb": shots[0].nbytes / 1024, "png_kb": png / 1024,
          "encode_ms": 1e3 * encode, "decode_ms": 1e3 * decode,
          "episode_unpacked_mb": unpacked / 2 ** 20, "episode_packed_mb": packed / 2 ** 20,
          "ratio": unpacked / packed,
          f"estimate_{estimate_calls}_calls_unpacked_mb": images * shots[0].nbytes / 2 ** 20,
          f"estimate_{estimate_calls}_calls_packed_mb": (estimate_calls + 1) * png / 2 ** 20}


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--shots", required=True, help="glob of one episode's screenshots (PNG), taken in order")
  ap.add_argument("--visual_turns", type=int, default=3)
  a = ap.parse_args()
  print(json.dumps(measure(sorted(glob.glob(a.shots)), a.visual_turns), indent=1))


if __name__ == "__main__":
  main()
