"""Start and stop a real vLLM OpenAI server (a subprocess in the engine venv) for RL rollouts.

    with VLLMServer(VLLMOptions(model_dir="/ckpt/export")) as server:
      client = RolloutClient(server.url, "mage")

The command carries every flag RL depends on (docs/rl.md "Real vLLM"):
- `VLLM_SERVER_DEV_MODE=1`: mounts /pause, /resume, /is_paused, /collective_rpc,
  /reset_prefix_cache, /update_weight_version and /weight_info;
- `--logprobs-mode processed_logprobs`: log-probs of the distribution actually sampled from;
- `--generation-config vllm`: ignore the export's generation_config.json (a stock Qwen3
  directory sets top_k=20, which would truncate what is sampled; the client also sends
  top_k=-1 and min_p=0 in every request, so a server started without the flag samples the
  same distribution);
- `--dtype`, `--max-model-len`, and the KV-cache size (VLLM_CPU_KVCACHE_SPACE, GiB, on the
  CPU build; `--gpu-memory-utilization` on CUDA).
It runs `python -m vllm.entrypoints.openai.api_server` since the CPU build's `vllm`
console script looks up a distribution named "vllm" and fails.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import time

from mage_jax.engine.address import learner_url
from mage_jax.engine.rollout_client import RolloutClient, RolloutError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINE_PYTHON = os.path.join(ROOT, ".venv-engine", "bin", "python")
# The tests' and benchmarks' engine model: qwen3_tiny (configs/models.py) with head_dim 32,
# since vLLM's CPU attention has kernels for head_dim 32, 64, 80, ... but not 16.
CPU_TINY_QWEN3 = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, intermediate_size=128)


@dataclasses.dataclass
class VLLMOptions:
  model_dir: str
  model_name: str = "mage"
  host: str = "127.0.0.1"
  port: int = 0                       # 0: a free loopback port
  dtype: str = "float32"              # fp32 for log-prob parity; bfloat16 on GPUs
  max_model_len: int = 4096
  max_num_seqs: int = 32
  kv_cache_gib: int = 1               # CPU build: VLLM_CPU_KVCACHE_SPACE, whole GiB (vLLM int()s it)
  gpu_memory_utilization: float = 0.0  # CUDA build: > 0 passes --gpu-memory-utilization
  seed: int = 0
  enforce_eager: bool = True          # no torch.compile warm-up: minutes saved at start-up on CPU
  python: str = ENGINE_PYTHON
  log_path: str = ""                  # "" = <model_dir>/../vllm-<port>.log
  extra_args: tuple[str, ...] = ()

  def __post_init__(self):
    # vllm-cpu 0.32 parses VLLM_CPU_KVCACHE_SPACE with int(): "0.5" fails deep in start-up.
    if isinstance(self.kv_cache_gib, bool) or int(self.kv_cache_gib) != self.kv_cache_gib or self.kv_cache_gib < 1:
      raise ValueError(f"VLLMOptions.kv_cache_gib={self.kv_cache_gib!r}: the CPU build takes a whole "
                       "number of GiB >= 1 (VLLM_CPU_KVCACHE_SPACE)")
    self.kv_cache_gib = int(self.kv_cache_gib)


def free_port(host: str = "127.0.0.1") -> int:
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def server_command(opts: VLLMOptions, port: int) -> list[str]:
  cmd = [opts.python, "-m", "vllm.entrypoints.openai.api_server", "--model", opts.model_dir,
         "--served-model-name", opts.model_name, "--host", opts.host, "--port", str(port),
         "--dtype", opts.dtype, "--max-model-len", str(opts.max_model_len),
         "--max-num-seqs", str(opts.max_num_seqs), "--seed", str(opts.seed),
         "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
         "--disable-log-stats", "--uvicorn-log-level", "warning"]
  if opts.enforce_eager:
    cmd.append("--enforce-eager")
  if opts.gpu_memory_utilization > 0:
    cmd += ["--gpu-memory-utilization", str(opts.gpu_memory_utilization)]
  return cmd + list(opts.extra_args)


def server_env(opts: VLLMOptions, base: dict[str, str] | None = None) -> dict[str, str]:
  env = dict(os.environ if base is None else base)
  # Our JAX venv's variables must not leak into the engine's interpreter.
  for k in ("PYTHONPATH", "XLA_FLAGS", "JAX_PLATFORMS", "VIRTUAL_ENV"):
    env.pop(k, None)
  env.update(VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE=str(opts.kv_cache_gib),
             VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
             TRANSFORMERS_OFFLINE="1")
  return env


class VLLMServer:
  """One vLLM server process; `start` returns once /health answers (start-up is 1-2 min on 2 CPUs)."""

  def __init__(self, opts: VLLMOptions):
    if not os.path.exists(opts.python):
      raise FileNotFoundError(f"{opts.python}: no engine interpreter; run `make engine` "
                              "(builds .venv-engine with vllm-cpu)")
    if not os.path.isfile(os.path.join(opts.model_dir, "config.json")):
      raise FileNotFoundError(f"{opts.model_dir}/config.json: not an exported HF directory "
                              "(Policy.save / weight_sync.export output)")
    self.opts = opts
    self.port = opts.port or free_port(opts.host)
    self.url = learner_url(opts.host, self.port)   # other hosts: rl.engine_advertise_url
    self.log_path = opts.log_path or os.path.join(
        os.path.dirname(os.path.abspath(opts.model_dir)), f"vllm-{self.port}.log")
    self.proc: subprocess.Popen | None = None
    self.startup_s = 0.0

  def start(self, timeout_s: float = 600.0) -> "VLLMServer":
    t0 = time.monotonic()
    log = open(self.log_path, "ab")
    self.proc = subprocess.Popen(server_command(self.opts, self.port), env=server_env(self.opts),
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    log.close()
    client = RolloutClient(self.url, self.opts.model_name, timeout=30)
    while time.monotonic() - t0 < timeout_s:
      if self.proc.poll() is not None:
        raise RolloutError(f"vLLM exited with status {self.proc.returncode} during start-up; "
                           f"log {self.log_path}:\n{self.log_tail()}")
      if client.health():
        self.startup_s = time.monotonic() - t0
        return self
      time.sleep(1.0)
    self.stop()
    raise RolloutError(f"vLLM at {self.url} not healthy within {timeout_s:.0f} s; log {self.log_path}:\n"
                       f"{self.log_tail()}")

  def log_tail(self, chars: int = 3000) -> str:
    try:
      with open(self.log_path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - chars))
        return f.read().decode(errors="replace")
    except OSError:
      return ""

  def stop(self, timeout_s: float = 30.0) -> None:
    """SIGTERM to the server's own process group (its engine-core child included), then SIGKILL."""
    if self.proc is None or self.proc.poll() is not None:
      return
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
      try:
        os.killpg(self.proc.pid, sig)
      except ProcessLookupError:
        return
      try:
        self.proc.wait(wait)
        return
      except subprocess.TimeoutExpired:
        continue

  def __enter__(self) -> "VLLMServer":
    return self.start() if self.proc is None else self

  def __exit__(self, *exc) -> None:
    self.stop()

