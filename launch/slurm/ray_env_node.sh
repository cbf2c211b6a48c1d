#!/bin/bash
# Start this host's Ray node for the environment fleet (mage_jax/agent/ray_slots.py).
#
#   launch/slurm/ray_env_node.sh head                 # the head: schedules, holds no env slots
#   launch/slurm/ray_env_node.sh env HEAD_HOST [K]    # an env host: K slots (default 16)
#
# The learner then joins with --config.env.backend=ray --config.env.ray_address=HEAD_HOST:$RAY_PORT.
# Env actors ask for one `env_slot` each, so only env hosts run episodes; K is the per-host slot
# count (BENCHMARKS.md "Environment fleet": 16 = the paper's 1,120 slots on 70 hosts).
# --block keeps the node in the foreground so srun/SLURM owns its lifetime.
set -euo pipefail
REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$REPO"
source .venv/bin/activate
RAY_PORT=${RAY_PORT:-6379}
# Bytes of the object store per host: an RL episode's samples come back in one object at its end
# with their screenshots (up to 50 calls x 3 x 1280x800x3 bytes = 460 MB), so 16 slots finishing
# together need ~7.4 GB (BENCHMARKS.md "Environment fleet"); Ray spills to disk beyond it.
OBJECT_STORE=${RAY_OBJECT_STORE_BYTES:-8000000000}
role=${1:?usage: ray_env_node.sh head | env HEAD_HOST [SLOTS]}
case "$role" in
  head) exec ray start --head --port="$RAY_PORT" --num-cpus=0 --include-dashboard=false \
          --object-store-memory="$OBJECT_STORE" --block ;;
  env)  head=${2:?env needs HEAD_HOST}; slots=${3:-16}
        exec ray start --address="$head:$RAY_PORT" --num-cpus="$slots" \
          --resources="{\"env_slot\": $slots}" --object-store-memory="$OBJECT_STORE" --block ;;
  *) echo "ray_env_node.sh: unknown role '$role' (head | env)" >&2; exit 2 ;;
esac
