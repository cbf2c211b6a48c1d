"""Would prefix reuse pay in the embedded engine, and does it keep the logits? A probe for issue 36's
"one seed <= 60 min": 76% of the tokens the proof's evaluation prefills are a prefix of an earlier
request's prompt + completion (docs/results.md, session 40), and prefill is about half of the engine's
time. This times, on the proof student's text tower, a request's full prefill against extending a
cached row that already holds its prefix (the earlier prompt and completion): the suffix alone through
`model.decode` at the cache's write index, its positions continuing the sequence. It reports the
seconds of each and the largest |log-prob| difference of the next-token distribution (the reuse is
exact up to float rounding when the cache's keys and values are the same numbers a full prefill makes).

  PYTHONPATH=$PWD .venv/bin/python experiments/prefix_reuse_probe.py --params=$W/base/hf
  PYTHONPATH=$PWD .venv/bin/python experiments/prefix_reuse_probe.py --params=$W/base/hf --prefix=700 --suffix=300

Session 40 (the base of /work/runs/s40, served on its 994 + 1 rows; the chain beside it paused):
  950 cached + 150 new: full prefill (1,280 slots) 157.3 ms, extend (256 slots) 28.4 ms, 5.5x, max |diff| 7.6e-6
  700 cached + 300 new: full 101.7 ms, extend (512 slots) 60.6 ms, 1.7x, 6.7e-6
  1,000 cached + 60 new: full 153.1 ms, extend (64 slots) 7.1 ms, 21.6x, 5.7e-6

Text only: a screenshot in the suffix would also need its patches sliced from the request's vision
inputs, and a cached screenshot must be matched by its pixels, not its pad ids.
"""
import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from mage_jax import api
from mage_jax.engine.generate_batcher import length_bucket
from mage_jax.models import slot_decode
from mage_jax.models import vocab_serving
from mage_jax.models.config import PAD_ID
from mage_jax.models.sampling import last_logits


@functools.partial(jax.jit, static_argnames=("model_def",))
def extend(model_def, leaves, table, cache, suffix, start, length):
  """The right-padded suffix [1, S] after a cached row whose first `start` sequence positions are
  valid (write index = its cache index); -> row logits at the suffix's last real token."""
  model = model_def.merge(leaves)
  s = suffix.shape[1]
  slot = jnp.arange(s, dtype=jnp.int32)[None]
  segment_ids = (slot < length).astype(jnp.int32)
  embeds = model.embed_inputs(vocab_serving.rows(table, suffix))
  hidden, _ = model.decode(embeds, start + slot, segment_ids, cache)
  last = jnp.take_along_axis(hidden, (length - 1)[:, None, None], axis=1)[:, 0]
  return vocab_serving.full_logits(table, last_logits(model, last))


@functools.partial(jax.jit, static_argnames=("model_def",))
def full_prefill(model_def, leaves, table, tokens, length):
  from mage_jax.models.sampling import prefill
  model = model_def.merge(leaves)
  cache = model.init_cache(1, tokens.shape[1])
  logits, cache = prefill(model, vocab_serving.rows(table, tokens), length, cache)
  return vocab_serving.full_logits(table, logits), cache


def padded(ids, n):
  out = np.full((1, n), PAD_ID, np.int32)
  out[0, :len(ids)] = ids
  return jnp.asarray(out)


def timed(fn, reps):
  jax.block_until_ready(fn())            # compile
  t = time.perf_counter()
  for _ in range(reps):
    out = jax.block_until_ready(fn())
  return out, (time.perf_counter() - t) / reps


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--params", required=True, help="an HF directory (e.g. <proof workdir>/base/hf)")
  ap.add_argument("--prefix", type=int, default=950, help="tokens of the earlier prompt + completion")
  ap.add_argument("--suffix", type=int, default=150, help="new tokens (the observation, the next turn)")
  ap.add_argument("--reps", type=int, default=5)
  args = ap.parse_args()
  if args.prefix < 1 or args.suffix < 1:
    ap.error("--prefix and --suffix must be >= 1")
  policy = api.load(args.params)
  model, table = vocab_serving.serving_model(policy.model)
  model_def, leaves = slot_decode.split(model)
  ids = np.arange(100, 50_000, dtype=np.int32) if table is None else np.flatnonzero(np.asarray(table) != np.asarray(table).max())
  rng = np.random.default_rng(0)
  seq = rng.choice(ids, args.prefix + args.suffix).astype(np.int32)
  n = len(seq)
  full_len = length_bucket(n, 16)
  (full_logits, _), full_s = timed(lambda: full_prefill(model_def, leaves, table, padded(seq, full_len),
                                                        jnp.asarray([n], jnp.int32)), args.reps)
  # the cached row: the prefix prefilled alone (as the engine would hold it), with room for the suffix
  pre_len = length_bucket(args.prefix, 16)
  suf_len = length_bucket(args.suffix, 16)
  _, cache = full_prefill(model_def, leaves, table, padded(seq[:args.prefix], pre_len),
                          jnp.asarray([args.prefix], jnp.int32))
  grow = lambda x: jnp.pad(x, [(0, 0), (0, suf_len)] + [(0, 0)] * (x.ndim - 2))
  cache = cache.replace(k=tuple(map(grow, cache.k)), v=tuple(map(grow, cache.v)),
                        segment_ids=grow(cache.segment_ids), positions=grow(cache.positions))
  ext_logits, ext_s = timed(lambda: extend(model_def, leaves, table, cache, padded(seq[args.prefix:], suf_len),
                                           jnp.int32(args.prefix), jnp.asarray([args.suffix], jnp.int32)),
                            args.reps)
  lp = lambda x: np.asarray(jax.nn.log_softmax(x.astype(jnp.float32), axis=-1))
  diff = float(np.max(np.abs(lp(full_logits) - lp(ext_logits))))
  print(f"served on {'its rows' if table is not None else 'the full vocabulary'}; sequence {n} tokens "
        f"({args.prefix} cached + {args.suffix} new)")
  print(f"full prefill ({full_len} slots): {1e3 * full_s:.1f} ms; extend ({suf_len} new slots after "
        f"{pre_len} cached): {1e3 * ext_s:.1f} ms; {full_s / ext_s:.1f}x; max |log-prob diff| {diff:.2e}")


if __name__ == "__main__":
  main()
