"""RolloutClient <-> embedded RolloutServer on loopback, with tiny random-init HF checkpoints."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.parse
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from mage_jax.engine.rollout_client import RolloutClient, RolloutError

TINY = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            head_dim=8, intermediate_size=32)  # the real vocabulary, so the tokenizer's ids are valid
PROMPT = [9707, 11, 1879, 0, 374]  # "Hello, world!" and a few more ids


def tiny_cfg():
  from mage_jax.models.config import Qwen3Config
  return Qwen3Config(**TINY)


def tiny_model(seed: int):
  """A random-init tiny Qwen3 whose head is scaled up, so its next-token distributions are
  peaked (a plain random init is near uniform over 151,936 ids and all seeds look alike)."""
  from flax import nnx
  from mage_jax.weights import hf
  model = hf.build_model(tiny_cfg(), nnx.Rngs(seed))
  model.lm_head.kernel[...] = model.lm_head.kernel[...] * 20.0
  return model


def make_hf_dir(path: str, seed: int) -> str:
  from mage_jax.weights import hf
  hf.save_hf(tiny_model(seed), tiny_cfg(), path)
  return path


def log_softmax(x: np.ndarray) -> np.ndarray:
  x = x.astype(np.float64)
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
  root = tmp_path_factory.mktemp("rollout_ckpts")
  return make_hf_dir(str(root / "a"), 0), make_hf_dir(str(root / "b"), 1)


@pytest.fixture(scope="module")
def server(ckpts):
  from mage_jax.engine.rollout_server import RolloutServer
  with RolloutServer(ckpts[0]) as s:
    yield s


@pytest.fixture
def client(server, ckpts):
  c = RolloutClient(server.url, "mage", timeout=120.0)
  c.wait_ready(30)
  yield c
  if c.served_weights() != ckpts[0]:
    c.reload_weights(ckpts[0])
  c.resume()


@pytest.fixture(scope="module")
def policy_a(ckpts):
  from mage_jax import api
  return api.load(ckpts[0])


def test_greedy_completion_round_trip_and_logprob_parity(client, policy_a):
  c = client.complete(PROMPT, max_tokens=6, temperature=0.0)
  assert c.prompt_token_ids == PROMPT
  assert len(c.token_ids) == len(c.logprobs) == 6 and c.finish_reason == "length"
  assert c.text == policy_a._tokenizer().decode(c.token_ids)
  # Independent reference: one causal forward over prompt + completion, log-softmax in NumPy.
  logits = policy_a.logits(PROMPT + c.token_ids[:-1])
  logp = log_softmax(logits[len(PROMPT) - 1:])
  np.testing.assert_array_equal(c.token_ids, logp.argmax(-1))
  np.testing.assert_allclose(c.logprobs, logp[np.arange(6), c.token_ids], atol=1e-4)
  assert max(c.logprobs) > -9.0  # peaked, not the near-uniform -11.9 of a plain random init


def test_sampled_logprobs_are_the_processed_distribution(client, policy_a):
  temperature, top_p = 0.7, 0.9
  c = client.complete(PROMPT, max_tokens=5, temperature=temperature, top_p=top_p, seed=11)
  again = client.complete(PROMPT, max_tokens=5, temperature=temperature, top_p=top_p, seed=11)
  assert again.token_ids == c.token_ids and again.logprobs == c.logprobs  # seeded
  logits = policy_a.logits(PROMPT + c.token_ids[:-1])[len(PROMPT) - 1:].astype(np.float64) / temperature
  for i, tok in enumerate(c.token_ids):
    order = np.argsort(-logits[i])
    probs = np.exp(log_softmax(logits[i][order]))
    keep = order[(np.cumsum(probs) - probs) < top_p]   # the nucleus, most likely token first
    assert tok in keep
    ref = log_softmax(logits[i][keep])[list(keep).index(tok)]
    assert abs(c.logprobs[i] - ref) < 1e-4


def test_chat_renders_the_qwen3_template(client, policy_a):
  messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
  c = client.chat(messages, max_tokens=4, temperature=0.0)
  expected = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
              "<|im_start|>assistant\n")
  assert c.prompt_token_ids == list(policy_a.encode(expected))
  assert len(c.logprobs) == len(c.token_ids) == 4
  logp = log_softmax(policy_a.logits(c.prompt_token_ids + c.token_ids[:-1])[len(c.prompt_token_ids) - 1:])
  np.testing.assert_allclose(c.logprobs, logp[np.arange(4), c.token_ids], atol=1e-4)
  # The same messages as OpenAI content parts render identically.
  parts = [{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}]
  assert client.chat(parts, max_tokens=1, temperature=0.0).prompt_token_ids == \
      list(policy_a.encode("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"))


def test_chat_image_on_text_model_is_a_clear_400(client):
  from mage_jax.agent.policies import _png_data_url
  image = {"type": "image_url", "image_url": {"url": _png_data_url(np.zeros((32, 32, 3), np.uint8))}}
  with pytest.raises(RolloutError, match=r"HTTP 400.*Mage-VL"):
    client.chat([{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}], max_tokens=2)


def _raw(url: str, data: bytes | None = None, method: str = "POST") -> tuple[int, dict]:
  req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(req, timeout=30) as r:
      return r.status, json.loads(r.read() or b"{}")
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())


def test_bad_requests_get_400_404_with_messages(server):
  code, body = _raw(server.url + "/completions", b"{not json")
  assert code == 400 and "JSON" in body["error"]["message"]
  code, body = _raw(server.url + "/completions", json.dumps({"max_tokens": 2}).encode())
  assert code == 400 and "'prompt'" in body["error"]["message"]
  code, body = _raw(server.url + "/chat/completions", json.dumps({"max_tokens": 2}).encode())
  assert code == 400 and "'messages'" in body["error"]["message"]
  code, body = _raw(server.url + "/completions", json.dumps({"prompt": [1], "max_tokens": "x"}).encode())
  assert code == 400 and "max_tokens" in body["error"]["message"]
  code, body = _raw(server.url + "/completions", json.dumps({"prompt": [10**7]}).encode())
  assert code == 400 and "token ids" in body["error"]["message"]
  code, body = _raw(server.url + "/nope", b"{}")
  assert code == 404 and "/v1/nope" in body["error"]["message"]
  code, body = _raw(server.url + "/completions", json.dumps({"model": "other", "prompt": [1]}).encode())
  assert code == 404 and "other" in body["error"]["message"]
  root = server.url[:-3]
  code, body = _raw(root + "/collective_rpc", json.dumps({"args": []}).encode())
  assert code == 400 and "method" in body["error"]["message"]
  code, body = _raw(root + "/collective_rpc", json.dumps({"method": "reload_weights"}).encode())
  assert code == 400 and "weights_path" in body["error"]["message"]


def test_models_health_and_is_paused(client):
  assert client.health() and client.models() == ["mage"] and client.is_paused() is False


def test_pause_blocks_new_requests_until_resume(client):
  client.pause()
  assert client.is_paused()
  result = {}
  worker = threading.Thread(target=lambda: result.setdefault("c", client.complete(PROMPT, max_tokens=2)))
  worker.start()
  worker.join(1.0)
  assert worker.is_alive() and "c" not in result  # held while paused
  client.resume()
  worker.join(60)
  assert not worker.is_alive() and len(result["c"].token_ids) == 2


def test_pause_lets_in_flight_requests_finish(client, server):
  result = {}
  worker = threading.Thread(target=lambda: result.setdefault("c", client.complete(PROMPT, max_tokens=48)))
  worker.start()
  deadline = time.monotonic() + 30
  while server._inflight == 0 and time.monotonic() < deadline:
    time.sleep(0.005)
  assert server._inflight == 1
  client.pause()                      # returns only once the in-flight request is done
  assert server._inflight == 0
  worker.join(30)
  assert len(result["c"].token_ids) == 48
  client.resume()


def test_reload_weights_swaps_the_model_and_served_path(client, ckpts):
  before = client.complete(PROMPT, max_tokens=4, temperature=0.0)
  assert client.served_weights() == ckpts[0]
  client.pause()
  client.reload_weights(ckpts[1])
  client.reset_prefix_cache()
  client.resume()
  assert client.served_weights() == ckpts[1]
  after = client.complete(PROMPT, max_tokens=4, temperature=0.0)
  assert np.max(np.abs(np.asarray(after.logprobs) - before.logprobs)) > 0.1 or after.token_ids != before.token_ids
  with pytest.raises(RolloutError, match=r"HTTP 500.*/does/not/exist"):
    client.reload_weights("/does/not/exist")
  assert client.served_weights() == ckpts[1]  # a failed reload keeps the old weights


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_dead_server_raises_naming_the_url_within_the_timeout():
  url = f"http://127.0.0.1:{_free_port()}/v1"
  c = RolloutClient(url, "mage", timeout=5.0, retries=2, backoff_s=0.05)
  start = time.monotonic()
  with pytest.raises(RolloutError, match=rf"{url}/completions.*3 attempt"):
    c.complete([1, 2], max_tokens=2)
  assert time.monotonic() - start < 5.0
  assert not c.health()
  with pytest.raises(RolloutError, match="not ready"):
    c.wait_ready(0.3)


@contextlib.contextmanager
def canned_server(body: dict, paths: list | None = None, bodies: list | None = None):
  """A loopback server answering every POST with one canned JSON body; yields its /v1 URL.
  POSTed paths (with query) are appended to `paths`, decoded request bodies to `bodies`."""
  canned = json.dumps(body).encode()

  class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
      pass

    def do_POST(self):
      if paths is not None:
        paths.append(self.path)
      raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
      if bodies is not None:
        bodies.append(json.loads(raw or b"{}"))
      self.send_response(200)
      self.send_header("Content-Length", str(len(canned)))
      self.end_headers()
      self.wfile.write(canned)

  httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
  threading.Thread(target=httpd.serve_forever, daemon=True).start()
  try:
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
  finally:
    httpd.shutdown()
    httpd.server_close()


def test_pause_asks_old_and_new_vllm_to_let_running_requests_finish():
  # Old vLLM reads only wait_for_inflight_requests (default: abort them); new reads mode.
  paths = []
  with canned_server({"status": "ok"}, paths) as url:
    RolloutClient(url, "mage", timeout=10).pause()
  query = urllib.parse.parse_qs(urllib.parse.urlparse(paths[0]).query)
  assert paths[0].startswith("/pause?") and query == {"mode": ["wait"],
                                                      "wait_for_inflight_requests": ["true"]}


GOOD_CHOICE = {"text": "ab", "token_ids": [1, 2], "prompt_token_ids": [5],
               "logprobs": {"token_logprobs": [-0.1, -0.2]}, "finish_reason": "length"}


@pytest.mark.parametrize("choice, field", [
    ({**GOOD_CHOICE, "token_ids": None}, "token_ids"),
    ({**GOOD_CHOICE, "prompt_token_ids": None}, "prompt_token_ids"),
    ({**GOOD_CHOICE, "logprobs": None}, "logprobs"),
    ({**GOOD_CHOICE, "logprobs": {"token_logprobs": [-0.1]}}, "1 logprobs for 2 token_ids"),
    ({**GOOD_CHOICE, "token_ids": ["a", "b"]}, "token_ids"),
])
def test_malformed_responses_name_the_field(choice, field):
  with canned_server({"choices": [choice]}) as url:
    with pytest.raises(RolloutError, match=field):
      RolloutClient(url, "mage", timeout=10).complete([5], max_tokens=2)
  with canned_server({"choices": [GOOD_CHOICE]}) as url:
    out = RolloutClient(url, "mage", timeout=10).complete([5], max_tokens=2)
  assert out.token_ids == [1, 2] and out.logprobs == [-0.1, -0.2] and out.prompt_token_ids == [5]


@pytest.mark.slow
def test_chat_with_image_on_mage_vl(tmp_path):
  """base64 image_url parts reach a Mage-VL model; log-probs match its own forward with the image."""
  from launch.serve import random_init_dir
  from mage_jax import api
  from mage_jax.agent.policies import _png_data_url
  from mage_jax.data.images import num_image_tokens, resize_image
  from mage_jax.models.config import IMAGE_PAD_ID
  from mage_jax.engine.rollout_server import RolloutServer
  path = random_init_dir("mage_vl_tiny", 0, str(tmp_path / "vl"))
  image = np.random.default_rng(0).integers(0, 255, (40, 56, 3), dtype=np.uint8)
  with RolloutServer(path) as server:
    parts = [{"type": "image_url", "image_url": {"url": _png_data_url(image)}},
             {"type": "text", "text": "What is on the screen?"}]
    c = RolloutClient(server.url, "mage").chat([{"role": "user", "content": parts}], max_tokens=3,
                                              temperature=0.0)
  assert c.prompt_token_ids.count(IMAGE_PAD_ID) == num_image_tokens(*resize_image(image).shape[:2])
  policy = api.load(path)
  logits = policy.logits(c.prompt_token_ids + c.token_ids[:-1], images=[image])
  logp = log_softmax(logits[len(c.prompt_token_ids) - 1:])
  np.testing.assert_allclose(c.logprobs, logp[np.arange(3), c.token_ids], atol=1e-4)


def test_launch_serve_tiny_serves_and_stops_on_sigterm():
  import os
  import signal
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.Popen([sys.executable, "-m", "launch.serve", "--config=configs/serve.py:tiny",
                           "--config.port=0"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  try:
    ready = json.loads(proc.stdout.readline())
    client = RolloutClient(ready["url"], ready["model"], timeout=60)
    client.wait_ready(30)
    assert client.served_weights() == ready["weights"]
    c = client.complete([9707, 11], max_tokens=3, temperature=0.0)
    assert len(c.token_ids) == len(c.logprobs) == 3
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
  finally:
    if proc.poll() is None:
      proc.kill()


# ---- vLLM version differences: sampling defaults, 503 while paused, version labels -------------
def test_every_request_sends_top_k_and_min_p_so_generation_config_cannot_truncate():
  # vLLM fills fields a request leaves out from the model's generation_config.json (a stock
  # Qwen3 sets top_k=20), so the client must send the untruncated values itself.
  bodies = []
  with canned_server({"choices": [GOOD_CHOICE]}, bodies=bodies) as url:
    RolloutClient(url, "mage", timeout=10).complete([5], max_tokens=2)
  with canned_server({"choices": [{**GOOD_CHOICE, "message": {"content": "ab"},
                                   "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.2}]}}]},
                     bodies=bodies) as url:
    RolloutClient(url, "mage", timeout=10).chat([{"role": "user", "content": "hi"}], max_tokens=2)
  assert [(b["top_k"], b["min_p"], b["top_p"]) for b in bodies] == [(-1, 0.0, 1.0)] * 2


def test_per_choice_weight_versions_are_read_and_checked():
  spans = [{"version": "3", "start": 0, "end": 1}, {"version": "4", "start": 1, "end": 2}]
  with canned_server({"choices": [{**GOOD_CHOICE, "weight_versions": spans}]}) as url:
    out = RolloutClient(url, "mage", timeout=10).complete([5], max_tokens=2)
  assert out.weight_versions == [("3", 0, 1), ("4", 1, 2)]
  with canned_server({"choices": [{**GOOD_CHOICE, "weight_versions": spans[:1]}]}) as url:
    with pytest.raises(RolloutError, match="weight_versions .* do not tile the 2 completion tokens"):
      RolloutClient(url, "mage", timeout=10).complete([5], max_tokens=2)


@contextlib.contextmanager
def flaky_server(fail: int, code: int = 503, retry_after: str | None = None):
  """Answers the first `fail` POSTs with HTTP `code` ("Generation is paused"), then GOOD_CHOICE."""
  seen = []

  class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
      pass

    def do_POST(self):
      self.rfile.read(int(self.headers.get("Content-Length") or 0))
      seen.append(time.monotonic())
      status, body = (code, {"error": {"message": "Generation is paused", "code": code}}) \
          if len(seen) <= fail else (200, {"choices": [GOOD_CHOICE]})
      raw = json.dumps(body).encode()
      self.send_response(status)
      if retry_after is not None and status != 200:
        self.send_header("Retry-After", retry_after)
      self.send_header("Content-Length", str(len(raw)))
      self.end_headers()
      self.wfile.write(raw)

  httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
  threading.Thread(target=httpd.serve_forever, daemon=True).start()
  try:
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
  finally:
    httpd.shutdown()
    httpd.server_close()


class _RecordingClock:
  """The client module's `time`, recording the waits it asks for: the backoff schedule is read
  from the requested sleeps, not from wall-clock gaps (a loaded CI machine stretched a 0.05 s
  wait to 0.18 s and failed a gap-ratio check)."""

  def __init__(self):
    self.waits = []

  def sleep(self, seconds):
    self.waits.append(seconds)
    time.sleep(seconds)

  def __getattr__(self, name):
    return getattr(time, name)


def test_503_is_retried_with_backoff_until_paused_retry_s(monkeypatch):
  from mage_jax.engine import rollout_client
  clock = _RecordingClock()
  monkeypatch.setattr(rollout_client, "time", clock)
  with flaky_server(3) as (url, seen):
    c = RolloutClient(url, "mage", timeout=10, backoff_s=0.05)
    assert c.complete([5], max_tokens=2).token_ids == [1, 2]
  gaps = np.diff(seen)
  assert c.unavailable_retries == 3 and len(seen) == 4
  assert clock.waits == pytest.approx([0.05, 0.1, 0.2])   # doubling backoff
  assert min(gaps) >= 0.05                                 # and the client did wait between tries
  with flaky_server(10**6) as (url, seen):
    c = RolloutClient(url, "mage", timeout=10, backoff_s=0.05, paused_retry_s=0.4)
    with pytest.raises(RolloutError, match=r"/completions: HTTP 503 for \d+ s .*Generation is paused"):
      c.complete([5], max_tokens=2)
  with flaky_server(1, code=500) as (url, seen):   # other errors are not retried
    with pytest.raises(RolloutError, match="HTTP 500"):
      RolloutClient(url, "mage", timeout=10, backoff_s=0.05).complete([5], max_tokens=2)
  assert len(seen) == 1


def test_embedded_server_in_0_33_mode_answers_503_while_paused_and_the_client_waits_it_out(ckpts):
  """The 503 path as vLLM >= 0.33 has it, tested against our imitation (no real 0.33 here)."""
  from mage_jax.engine.rollout_server import RolloutServer
  with RolloutServer(ckpts[0], vllm_behaviour="0.33") as server:
    client = RolloutClient(server.url, "mage", timeout=120, backoff_s=0.05)
    client.pause()
    code, body = _raw(server.url + "/completions", json.dumps({"prompt": PROMPT, "max_tokens": 2}).encode())
    assert code == 503 and body["error"]["message"] == "Generation is paused"
    assert client.update_weight_version("7") and client.weight_version() == "7"
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("c", client.complete(PROMPT, max_tokens=3)))
    worker.start()
    time.sleep(1.0)
    assert worker.is_alive() and client.unavailable_retries >= 2
    client.resume()
    worker.join(120)
    c = result["c"]
    assert len(c.token_ids) == 3 and c.weight_versions == [("7", 0, 3)]


def test_embedded_server_routes_match_vllm_bodies(client, server):
  root = server.url[:-3]
  assert _raw(root + "/reset_prefix_cache", b"") == (200, {"success": True})
  code, body = _raw(root + "/pause?mode=sideways", b"")
  assert code == 422 and "sideways" in body["error"]["message"] and not client.is_paused()
  assert client.weight_version() == "0"   # vLLM's label before any update
  code, body = _raw(root + "/update_weight_version", json.dumps({"new_version": "5"}).encode())
  assert (code, body) == (200, {"success": True, "new_version": "5"}) and client.weight_version() == "5"
  assert _raw(root + "/update_weight_version", json.dumps({"version": 5}).encode())[0] == 422
  assert "weight_versions" not in json.dumps(_raw(server.url + "/completions", json.dumps(
      {"prompt": PROMPT, "max_tokens": 1}).encode())[1])    # 0.32 has no per-choice versions
