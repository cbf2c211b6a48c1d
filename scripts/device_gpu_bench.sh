#!/usr/bin/env bash
# The GPU bench device command (BENCHMARKS.md "GPU"), run from the repository root:
#   bash scripts/device_gpu_bench.sh [launch.bench flags, e.g. --gpu_attention=xla]
# Prints the GPUs and the jax/flax/optax/numpy versions, checks flax.nnx.List, then runs
# the suite under timeout. Results: $OUT/results_gpu.json, rewritten after every section.
# Env: OUT (default bench), BENCH_TIMEOUT (s, default 450), PYLIB (unpacked pure-Python
# wheels put first on PYTHONPATH; default pylib/ when it exists).
set -u
OUT=${OUT:-bench}
export OUT
mkdir -p "$OUT"
PYLIB=${PYLIB:-pylib}
if [ -d "$PYLIB" ]; then
  export PYTHONPATH="$(cd "$PYLIB" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
nvidia-smi -L || echo "nvidia-smi -L failed (no NVIDIA driver?)"
python3 - <<'PY' || exit 2
import sys
import flax, jax, numpy, optax
print("python", sys.version.split()[0], "| jax", jax.__version__, "| flax", flax.__version__,
      "| optax", optax.__version__, "| numpy", numpy.__version__, flush=True)
from flax import nnx
if not hasattr(nnx, "List"):
  sys.exit(f"flax {flax.__version__} has no flax.nnx.List: carry a newer flax (BENCHMARKS.md)")
PY
limit=${BENCH_TIMEOUT:-450}
timeout -k 10 "$limit" python3 -m launch.bench --suite=gpu "$@"
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  echo "launch.bench stopped by timeout after ${limit}s; partial results in $OUT"
fi
exit "$rc"
