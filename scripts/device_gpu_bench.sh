#!/usr/bin/env bash
# The GPU bench device command (BENCHMARKS.md "GPU"), run from the repository root:
#   bash scripts/device_gpu_bench.sh [--dry_run] [launch.bench flags, e.g. --gpu_attention=xla]
# Built to return numbers from one 10-minute lease whatever fails:
#   1. the preflight (own process, PREFLIGHT_TIMEOUT s): versions and devices, then a small
#      packed fwd+bwd through the flash kernel against the XLA reference -> $OUT/preflight.json
#      (written twice: versions at once, then the verdict);
#   2. the suite under what is left of BENCH_TOTAL_S: engine decode, matmul ceiling, the
#      mid-size then the full Mage-VL step, attention checks; each section written to
#      $OUT/results_gpu.json before the next starts, and one that cannot fit the time left
#      is skipped. A kernel the preflight failed (or that did not report in time) is never
#      tried again: the steps use the segment-respecting xla fallback.
# --dry_run: the same sections, order, timeouts and files on CPU at stand-in sizes.
# Env: OUT (default bench), BENCH_TOTAL_S (s for everything, default 570), PREFLIGHT_TIMEOUT
# (default 45), JAX_COMPILATION_CACHE_DIR (default $OUT/jax_cache: JAX's persistent compile
# cache, for reruns), PYLIB (unpacked pure-Python wheels put first on PYTHONPATH; default
# pylib/ when it exists).
set -u
start=$(date +%s)
dry_run=0
args=()
for a in "$@"; do
  if [ "$a" = "--dry_run" ]; then dry_run=1; else args+=("$a"); fi
done
OUT=${OUT:-bench}
export OUT
mkdir -p "$OUT"
PYLIB=${PYLIB:-pylib}
if [ -d "$PYLIB" ]; then
  export PYTHONPATH="$(cd "$PYLIB" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$OUT/jax_cache}
total=${BENCH_TOTAL_S:-570}
deadline=$((start + total))
if [ "$dry_run" = 1 ]; then
  export JAX_PLATFORMS=cpu
  args+=("--allow_cpu")
  echo "dry run: CPU, stand-in sizes; the GPU figures are not measured"
else
  nvidia-smi -L || echo "nvidia-smi -L failed (no NVIDIA driver?)"
fi

timeout -k 5 "${PREFLIGHT_TIMEOUT:-45}" python3 -m launch.bench --suite=preflight \
  --out="$OUT/preflight.json" ${args[@]+"${args[@]}"}
rc=$?
if [ "$rc" = 2 ]; then
  exit 2  # the image cannot run the models (e.g. flax without nnx.List): said above
elif [ "$rc" != 0 ]; then
  echo "preflight exited $rc after $(( $(date +%s) - start ))s (124/137: timed out); the suite" \
       "reads that as a failed kernel and uses the xla fallback"
fi

left=$((deadline - $(date +%s)))
timeout -k 10 "$left" python3 -m launch.bench --suite=gpu --preflight="$OUT/preflight.json" \
  --deadline="$((deadline - 10))" ${args[@]+"${args[@]}"}
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  echo "launch.bench stopped by timeout after ${left}s; partial results in $OUT"
fi
echo "device_gpu_bench: $(( $(date +%s) - start ))s in all"
exit "$rc"
