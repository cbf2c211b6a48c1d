"""The shared LLM client (mage_jax/llm) against a strict local stub (tests/strict_openai_stub.py:
protocol edges only, no model): auth from an env var, vLLM-only fields withheld from a non-vLLM
server, retries honouring Retry-After, a concurrency limit, one clear error when it gives up,
cost from `usage` (cached tokens priced apart; the character estimate only when usage is
missing, and labelled); the five LLM paths and a Forge run through it with a key set, then the
run's files and logs grepped for the key."""
from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _forge_skills  # noqa: E402,F401  registers the test skills
from _llm_paths import run_paths, stub_responder  # noqa: E402
from mage_jax.agent.policies import OpenAIChatPolicy  # noqa: E402
from mage_jax.forge import engine  # noqa: E402
from mage_jax.llm.client import ChatClient, EndpointError, from_config  # noqa: E402
from mage_jax.llm.pricing import PriceTable  # noqa: E402
from strict_openai_stub import StrictStub  # noqa: E402
from test_forge_engine import tiny_config  # noqa: E402

KEY = "sk-test-" + "7f3a9c1e5b2d4068a1c3e5f7b9d1f3a5"
ENV = "MAGE_TEST_LLM_KEY"
MSG = [{"role": "user", "content": "hi"}]
PRICES = {"default": {"prompt": 0.6, "completion": 2.4, "cached": 0.3}}


@pytest.fixture
def key(monkeypatch):
  monkeypatch.setenv(ENV, KEY)
  return KEY


@pytest.fixture
def stub():
  with StrictStub(KEY, stub_responder) as s:
    yield s


def test_auth_comes_from_the_named_env_var_and_never_shows(stub, key, monkeypatch):
  with pytest.raises(EndpointError) as e:
    ChatClient(stub.url, "m", http_retries=0).complete(MSG)
  assert e.value.status == 401 and stub.url in str(e.value) and "Incorrect API key" in str(e.value)
  client = ChatClient(stub.url, "m", api_key_env=ENV)
  assert client.complete(MSG).text and stub.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY}"
  assert KEY not in repr(client) and KEY not in repr(vars(client).get("prices"))
  monkeypatch.delenv(ENV)
  with pytest.raises(ValueError, match=f"\\${ENV} is not set"):
    ChatClient(stub.url, "m", api_key_env=ENV)


def test_vllm_only_fields_go_only_to_vllm(stub, key):
  # auto: the stub has no /version, so the teacher policy's return_token_ids stays home
  out = run_paths({"base_url": stub.url, "model": "m", "api_key_env": ENV})["teacher"][0]
  (body,) = [r["body"] for r in stub.requests if "tools" in r["body"]]   # the teacher's request
  assert "return_token_ids" not in body and "skip_special_tokens" not in body and body["logprobs"] is True
  assert body["tools"][0]["function"]["name"] == "computer_use"      # native tools ...
  assert out.text.endswith('<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", '
                           '"coordinate": [113, 158]}}\n</tool_call>')  # ... back as the text protocol
  # told it is vLLM, the client sends them, and a strict server's 400 names the field
  policy = OpenAIChatPolicy(stub.url, "m", server="vllm", api_key_env=ENV, http_retries=3)
  with pytest.raises(EndpointError) as e:
    policy.client.complete(MSG, vllm_fields=policy.VLLM_FIELDS)
  assert e.value.status == 400 and "return_token_ids" in str(e.value) and stub.statuses()[-1] == 400
  assert stub.statuses()[-2] == 200   # a 400 is not retried


def test_retries_honour_retry_after_then_give_up_with_one_clear_error(stub, key):
  client = ChatClient(stub.url, "m", api_key_env=ENV, http_retries=2)
  stub.fail_next.extend([(429, "0.6"), (503, "0.6")])
  t0 = time.monotonic()
  reply = client.complete(MSG)
  assert time.monotonic() - t0 >= 1.2 and reply.attempts == 3 and stub.statuses() == [429, 503, 200]
  stub.fail_next.extend([(500, "0")] * 3)
  with pytest.raises(EndpointError) as e:
    client.complete(MSG, where="LLM node 'x': ")
  msg = str(e.value)
  assert msg.startswith("LLM node 'x': endpoint " + stub.url) and "HTTP 500" in msg and "after 3 attempts" in msg


def test_rate_limit_is_absorbed_and_concurrency_is_capped(key):
  with StrictStub(KEY, rate=3, window_s=1.0, hold_s=0.05) as stub:
    client = ChatClient(stub.url, "m", api_key_env=ENV, max_concurrency=2, http_retries=6)
    threads = [threading.Thread(target=client.complete, args=(MSG,)) for _ in range(8)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(30)
    ok = stub.statuses().count(200)
    assert ok == 8 and 429 in stub.statuses() and stub.peak_in_flight == 2


def test_cost_is_from_usage_with_cached_tokens_and_the_estimate_is_labelled(stub, key):
  client = ChatClient(stub.url, "m", api_key_env=ENV, prices=PRICES)
  r = client.complete(MSG)
  assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cached_tokens, r.usage.estimated) == (100, 10, 40, False)
  assert r.dollars == pytest.approx((60 * 0.6 + 40 * 0.3 + 10 * 2.4) / 1e6)
  stub.usage = {}   # a server that sends no usage
  r = client.complete([{"role": "user", "content": "x" * 40}])
  assert r.usage.estimated and r.usage.prompt_tokens == 10
  with pytest.raises(ValueError, match="prices\\['m'\\]: .*missing \\['completion'\\]"):
    PriceTable({"m": {"prompt": 1.0}})


def test_five_paths_complete_a_call_against_the_strict_endpoint(stub, key):
  out = run_paths({"base_url": stub.url, "model": "m", "api_key_env": ENV, "prices": PRICES})
  assert set(stub.statuses()) == {200}
  (forge_call,) = out["forge"]
  assert forge_call["prompt_tokens"] == 100 and forge_call["cached_tokens"] == 40 and not forge_call["fallback"]
  proposal, totals, rejected = out["author"]
  assert proposal is not None and proposal.variant.max_output == 2000 and totals["prompt_tokens"] == 100
  assert "<tool_call>" in out["teacher"][0].text and out["teacher"][0].output_tokens == 10
  (step, reason), recs = out["synthesis"]
  assert reason is None and step.think == "The Red button is on screen." and recs[0].prompt_tokens == 100
  verdict, judge_recs = out["judge"]
  assert verdict == {"contradicts": False, "reason": "consistent"} and judge_recs[0].completion_tokens == 10


def test_forge_cost_report_per_node_and_task_from_usage_and_no_key_in_any_file(stub, key, tmp_path, capfd):
  llm_cfg = {"params": True, "reword": True, "siblings": 0, "base_url": stub.url, "model": "m",
             "api_key_env": ENV, "max_tokens": 256, "temperature": 0.0, "max_retries": 0, "prices": PRICES}
  m = engine.run_forge(tiny_config(tmp_path / "w", skills=["test.text.upper"], rounds=1, attempts_per_skill=2,
                                   workers=1, gate=False, student={"enabled": False}, llm=llm_cfg))
  cost = m["cost"]
  accepted = m["counts"]["tasks"]
  assert accepted == 2 and cost["calls"] == 4 and cost["token_source"] == "usage"
  per_call = (60 * 0.6 + 40 * 0.3 + 10 * 2.4) / 1e6
  assert cost["dollars"] == pytest.approx(4 * per_call) and cost["cached_tokens"] == 160
  assert set(cost["by_node"]) == {"params", "reword"}
  for node in cost["by_node"].values():
    assert node["calls"] == 2 and node["dollars_per_accepted_task"] == pytest.approx(per_call)
    assert node["tokens_per_accepted_task"] == 110
  assert all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in stub.requests)
  # the secret: nowhere in the workdir (manifest, results, logs) or the process output
  found = []
  for root, _, files in os.walk(tmp_path):
    for name in files:
      with open(os.path.join(root, name), "rb") as f:
        if KEY.encode() in f.read():
          found.append(name)
  out, err = capfd.readouterr()
  assert found == [] and KEY not in out + err
  assert KEY not in json.dumps(m)


def test_from_config_reads_an_endpoint_block(key):
  from configs import evolve as evolve_config
  c = evolve_config.get_config("openai")
  c.synthesis.base_url, c.synthesis.api_key_env, c.synthesis.server = "http://127.0.0.1:9/v1", ENV, "openai"
  client = from_config(c.synthesis)
  assert client.model == "teacher" and client.headers()["Authorization"] == f"Bearer {KEY}"
  assert not client.is_vllm and client.prices.row("any")["completion"] == 2.4
  with pytest.raises(ValueError, match="base_url"):
    from_config(evolve_config.get_config("openai").author)
