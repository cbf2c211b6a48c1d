"""The embedded rollout server's device decode alone: `slot_decode.decode_slots` (4 tokens
for every live row per call) timed at 1, 8 and 32 rows, with no HTTP, host bookkeeping or
prefill. 8 rows over 1 row bounds what 8 concurrent requests can gain end to end
(`launch.bench --suite=rl_engine` prints it beside the end-to-end figures; `--suite=gpu`
runs it on the GPU). Needs only jax, flax and numpy (the device script's environment)."""
from __future__ import annotations

import time
from typing import Any

import numpy as np


def device_decode_ms(model, rows: int, *, reps: int = 20, steps: int = 4, table=None, race=None,
                     max_len: int = 128) -> float:
  """Median wall ms of one decode_slots call on a pool of `rows` live slots of `max_len` (2 warm-up
  calls, the first compiles); `table` and `race` as in slot_decode (a model served on its distinct
  rows, sampled over all ids or on the rows)."""
  import jax.numpy as jnp   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models import slot_decode   # the bare GPU image runs this module: each path imports only what it needs
  model_def, leaves = slot_decode.split(model)
  pool = slot_decode.init_pool(model, rows, max_len)
  state = slot_decode.Rows(token=jnp.zeros(rows, jnp.int32), position=jnp.full(rows, max_len // 2, jnp.int32),
                           count=jnp.zeros(rows, jnp.int32), seed=jnp.arange(rows, dtype=jnp.uint32),
                           temperature=jnp.ones(rows), top_p=jnp.ones(rows), greedy=jnp.zeros(rows, bool))
  times = []
  for i in range(reps + 2):
    t0 = time.perf_counter()
    tokens, _, pool = slot_decode.decode_slots(model_def, leaves, table, pool, state, steps=steps, race=race)
    np.asarray(tokens)
    if i >= 2:
      times.append(time.perf_counter() - t0)
  return 1e3 * float(np.median(times))


def engine_decode(gpu: bool) -> dict[str, Any]:
  """device_decode_ms at 1, 8 and 32 rows (CPU fallback: 1 and 8, 3 reps; it only shows
  that the section runs). GPU: Qwen3-4B's widths with 4 layers in bf16, where
  decode should stay weight-bandwidth-bound; CPU: the rl_engine suite's tiny model (hidden 64)
  in fp32, where the 151,936-wide LM head turns compute-bound past a few rows."""
  from flax import nnx   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models.config import Qwen3Config   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models.qwen3 import Qwen3ForCausalLM   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.engine.vllm_process import CPU_TINY_QWEN3   # the bare GPU image runs this module: each path imports only what it needs
  dims = dict(num_hidden_layers=4, compute_dtype="bfloat16", param_dtype="bfloat16") if gpu else (
      dict(CPU_TINY_QWEN3, compute_dtype="float32", param_dtype="float32"))
  model = Qwen3ForCausalLM(Qwen3Config(**dims), rngs=nnx.Rngs(0))
  ms = {str(rows): device_decode_ms(model, rows, reps=10 if gpu else 3)
        for rows in ((1, 8, 32) if gpu else (1, 8))}
  return {"ms_per_call": ms,   # str keys: the results JSON is written with sorted keys
          "model": "Qwen3-4B widths, 4 layers, bf16" if gpu else "qwen3 tiny (hidden 64), fp32"}


def student_decode(vocab_ids: np.ndarray, *, rows: int = 8, max_len: int = 1280,
                   reps: int = 10) -> tuple[list, dict[str, Any]]:
  """The learning proof's student as the rollout engine gets it after a compact stage (its params
  expanded to all 151,936 ids, every left-out id on one shared row), decoded as it is against
  decoded on its distinct rows (models/vocab_serving.py), sampled over all ids and on the rows,
  interleaved in one run: 8 rows (the eval's 6 slots share the 8-row pool) in a pool of the
  proof's prompt length."""
  from flax import nnx   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.bench.results import Row   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.bench.student_bench import PROOF_TEXT   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models import vocab_serving   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models.compact_vocab import CompactVocab   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models.config import Qwen3Config   # the bare GPU image runs this module: each path imports only what it needs
  from mage_jax.models.qwen3 import Qwen3ForCausalLM   # the bare GPU image runs this module: each path imports only what it needs
  full_cfg = Qwen3Config(**PROOF_TEXT)
  vocab = CompactVocab.from_token_ids(vocab_ids, full_cfg.vocab_size)
  compact = Qwen3ForCausalLM(vocab.compact_model_config(full_cfg), rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Qwen3ForCausalLM(full_cfg, rngs=nnx.Rngs(0))))
  nnx.replace_by_pure_dict(state, vocab.expand_params(nnx.to_pure_dict(nnx.state(compact, nnx.Param))))
  expanded = nnx.merge(graphdef, state)
  served, table = vocab_serving.serving_model(expanded)
  race = vocab_serving.row_race(table)
  ms = {"full": [], "rows_full_sampler": [], "rows": []}
  for _ in range(3):   # interleaved: a load change hits all alike
    ms["full"].append(device_decode_ms(expanded, rows, reps=reps, max_len=max_len))
    ms["rows_full_sampler"].append(device_decode_ms(served, rows, reps=reps, max_len=max_len, table=table))
    ms["rows"].append(device_decode_ms(served, rows, reps=reps, max_len=max_len, table=table, race=race))
  full, on_rows = float(np.median(ms["full"])), float(np.median(ms["rows"]))
  spread = float(np.median(ms["rows_full_sampler"]))
  cmd = "python -m launch.bench --suite=cpu"
  note = f"{rows} rows x 4 tokens, pool {max_len}; {len(vocab.ids)} kept ids of {full_cfg.vocab_size}"
  out = [Row("proof student engine decode, expanded params as they are", full, "ms", command=cmd, note=note),
         Row("proof student engine decode, on its distinct rows, sampled over all ids", spread, "ms", command=cmd,
             note=note + " (the engine of session 40)"),
         Row("proof student engine decode, on its distinct rows, sampled on the rows", on_rows, "ms", command=cmd,
             note=note),
         Row("proof student engine decode speed-up, rows vs full", full / on_rows, "x", command=cmd,
             note="same logits and tokens (tests/test_vocab_serving.py)")]
  return out, {"ms_per_call": ms, "kept_ids": int(len(vocab.ids)), "rows": rows, "max_len": max_len}
