"""Serve a mage_jax checkpoint over vLLM's OpenAI-server protocol (mage_jax.engine.rollout_server).

  python -m launch.serve --config=configs/serve.py:tiny
  python -m launch.serve --config=configs/serve.py --config.model_path=/ckpt/export --config.port=8000

Prints one JSON line {"url", "model", "weights"} once it listens; SIGINT or SIGTERM
stops it (exit status 0). The RL loop and launch.eval (policy.kind=openai) talk to
it exactly as to `VLLM_SERVER_DEV_MODE=1 vllm serve`.
"""
from __future__ import annotations

import json
import signal
import tempfile
import threading

from absl import app
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/serve.py:tiny", "Serve config file[:arg].")


def random_init_dir(preset: str, seed: int, out_dir: str) -> str:
  """A random-init model of a configs/models.py preset, saved as an HF directory."""
  from flax import nnx
  from configs import models
  from mage_jax.weights import hf
  cfg = models.build_model_config(models.get_config(preset))
  hf.save_hf(hf.build_model(cfg, nnx.Rngs(seed)), cfg, out_dir)
  return out_dir


def main(argv):
  del argv
  c = _CONFIG.value
  from mage_jax.engine.rollout_server import RolloutServer
  with tempfile.TemporaryDirectory(prefix="mage_serve_") as tmp:
    path = c.model_path
    if not path:
      if not c.tiny_preset:
        raise app.UsageError("set --config.model_path=<HF dir> (or use configs/serve.py:tiny)")
      path = random_init_dir(c.tiny_preset, c.seed, tmp)
    server = RolloutServer(path, host=c.host, port=c.port, model_name=c.model_name,
                           load_kwargs=dict(param_dtype=c.param_dtype, compute_dtype=c.compute_dtype))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
      signal.signal(sig, lambda *_: stop.set())
    with server:
      print(json.dumps({"url": server.url, "model": c.model_name, "weights": server.served_path}), flush=True)
      stop.wait()


if __name__ == "__main__":
  app.run(main)
