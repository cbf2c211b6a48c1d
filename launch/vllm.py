"""Serve an exported checkpoint (Policy.save / weight_sync.export) with a real vLLM for RL.

  python -m launch.vllm --model_dir=workdirs/export --port=8000
  python -m launch.vllm --model_dir=/ckpt/export --dtype=bfloat16 --max_model_len=40960 \
      --gpu_memory_utilization=0.9 --python=/opt/vllm/bin/python --noenforce_eager

Starts `python -m vllm.entrypoints.openai.api_server` in the engine venv (`make engine`;
--python picks another interpreter, e.g. one with the CUDA `vllm` wheel) with the flags RL
needs: VLLM_SERVER_DEV_MODE=1, --logprobs-mode processed_logprobs, --generation-config vllm,
dtype, max model length and KV-cache size (mage_jax/engine/vllm_process.py). Prints one JSON
line {"url", "model", "weights", "startup_s", "log"} once /health answers; point
`python -m launch.rl --server_url=<url>` at it. SIGINT / SIGTERM stop the server (exit 0).

With env hosts on other machines (`env.backend=ray`), bind an address they can route to
(`--host=0.0.0.0` or the LAN address) and give launch.rl that address as
`--config.rl.engine_advertise_url`; VLLM_SERVER_DEV_MODE's routes (weight reload, pause,
collective_rpc) are unauthenticated, so keep such an engine on a private network.
"""
from __future__ import annotations

import json
import signal
import threading

from absl import app, flags

from mage_jax.engine import vllm_process

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Exported HF directory to serve.", required=True)
_MODEL_NAME = flags.DEFINE_string("model_name", "mage", "Served model name (config.rl.model_name).")
_HOST = flags.DEFINE_string(
    "host", "127.0.0.1", "Listen address; 0.0.0.0 / a LAN address for RL env hosts on other "
    "machines (then launch.rl --config.rl.engine_advertise_url=http://THIS_HOST:PORT/v1). The "
    "dev routes (reload, pause, collective_rpc) have no authentication: private network only.")
_PORT = flags.DEFINE_integer("port", 8000, "Port; 0 = a free one (printed).")
_DTYPE = flags.DEFINE_string("dtype", "float32", "Compute dtype (float32 for log-prob parity on CPU).")
_MAX_MODEL_LEN = flags.DEFINE_integer("max_model_len", 4096, "Context length (prompt + completion).")
_MAX_NUM_SEQS = flags.DEFINE_integer("max_num_seqs", 32, "Requests batched at once.")
_KV_GIB = flags.DEFINE_integer("kv_cache_gib", 1, "KV-cache size in whole GiB (CPU build: VLLM_CPU_KVCACHE_SPACE).")
_GPU_UTIL = flags.DEFINE_float("gpu_memory_utilization", 0.0, "CUDA build: > 0 passes it to vLLM.")
_EAGER = flags.DEFINE_bool("enforce_eager", True, "Skip torch.compile warm-up (faster start on CPU).")
_PYTHON = flags.DEFINE_string("python", vllm_process.ENGINE_PYTHON, "Interpreter with vLLM installed.")
_LOG = flags.DEFINE_string("log", "", "Server log file ('' = beside model_dir).")
_TIMEOUT = flags.DEFINE_float("startup_timeout_s", 900.0, "Give up if /health does not answer by then.")


def main(argv):
  del argv
  opts = vllm_process.VLLMOptions(
      model_dir=_MODEL_DIR.value, model_name=_MODEL_NAME.value, host=_HOST.value, port=_PORT.value,
      dtype=_DTYPE.value, max_model_len=_MAX_MODEL_LEN.value, max_num_seqs=_MAX_NUM_SEQS.value,
      kv_cache_gib=_KV_GIB.value, gpu_memory_utilization=_GPU_UTIL.value,
      enforce_eager=_EAGER.value, python=_PYTHON.value, log_path=_LOG.value)
  try:
    server = vllm_process.VLLMServer(opts)
  except FileNotFoundError as e:
    raise app.UsageError(str(e)) from None
  stop = threading.Event()
  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda *_: stop.set())
  with server.start(_TIMEOUT.value):
    print(json.dumps({"url": server.url, "model": opts.model_name, "weights": opts.model_dir,
                      "startup_s": round(server.startup_s, 1), "log": server.log_path}), flush=True)
    while not stop.wait(1.0):
      if server.proc.poll() is not None:
        raise SystemExit(f"vLLM exited with status {server.proc.returncode}; log {server.log_path}")


if __name__ == "__main__":
  app.run(main)
