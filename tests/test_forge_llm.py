"""forge/llm.py + forge/replay.py: schema validation, retries with the error fed back, fallback,
token/dollar accounting, and a clear error for a dead endpoint."""
import json
import socket

import pytest

from mage_jax.forge import llm, replay

SCHEMA = {"type": "object", "required": ["n", "word"], "additionalProperties": False,
          "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                         "word": {"type": "string", "pattern": "^[a-z]+$"}}}


def _node(**kw):
  return llm.LLMNode("propose", "Propose params for {skill_id}. Schema: {schema}", SCHEMA, **kw)


def test_small_validator_matches_jsonschema_on_cases():
  cases = [({"n": 3, "word": "abc"}, True), ({"n": 0, "word": "abc"}, False),
           ({"n": 3}, False), ({"n": 3, "word": "A1"}, False), ({"n": True, "word": "a"}, False),
           ({"n": 3, "word": "a", "x": 1}, False), ([1], False)]
  for value, ok in cases:
    for fn in (lambda v: llm._small_validate(v, SCHEMA, "$"), lambda v: llm.validate_schema(v, SCHEMA)):
      if ok:
        fn(value)
      else:
        with pytest.raises(llm.SchemaError):
          fn(value)


def test_extract_json_fence_and_prose():
  assert llm.extract_json('sure! ```json\n{"a": 1}\n``` done') == {"a": 1}
  assert llm.extract_json('x {bad} then {"b": [2]} tail') == {"b": [2]}
  with pytest.raises(llm.SchemaError):
    llm.extract_json("no json here")


def test_retry_feeds_error_back_then_succeeds(tmp_path):
  seen = []

  def responder(messages):
    seen.append(messages)
    # first answer invalid (n out of range), the retry sees the error and answers validly
    return '{"n": 42, "word": "abc"}' if len(messages) == 2 else '{"n": 4, "word": "abc"}'

  ledger = llm.Ledger()
  prices = llm.PriceTable({"default": {"prompt": 1.0, "completion": 10.0}})
  with replay.ReplayServer(str(tmp_path / "t.jsonl"), responder=responder) as srv:
    client = llm.ChatClient(srv.url, prices=prices)
    value, rec = _node().run(client, {"skill_id": "x.y.z"}, skill="x.y.z", ledger=ledger)
  assert value == {"n": 4, "word": "abc"}
  assert rec.retries == 1 and rec.requests == 2 and not rec.fallback
  assert "42" in seen[1][-1]["content"] and "maximum" in seen[1][-1]["content"]
  recorded = [json.loads(line) for line in open(tmp_path / "t.jsonl")]
  assert rec.prompt_tokens == sum(r["usage"]["prompt_tokens"] for r in recorded)
  assert rec.dollars == pytest.approx((rec.prompt_tokens * 1.0 + rec.completion_tokens * 10.0) / 1e6)
  assert ledger.totals()["requests"] == 2


def test_fallback_after_retries_and_replay_without_responder(tmp_path):
  path = str(tmp_path / "t.jsonl")
  with replay.ReplayServer(path, responder=lambda m: "not json at all") as srv:
    value, rec = _node(max_retries=2, fallback=lambda inp: {"n": 1, "word": "fallback"}).run(
        llm.ChatClient(srv.url), {"skill_id": "a.b.c"}, skill="a.b.c")
  assert value == {"n": 1, "word": "fallback"} and rec.fallback and rec.requests == 3
  # the recording replays with the same usage and no responder
  with replay.ReplayServer(path) as srv:
    _, rec2 = _node(max_retries=2, fallback=lambda inp: {}).run(
        llm.ChatClient(srv.url), {"skill_id": "a.b.c"}, skill="a.b.c")
    assert srv.hits == 3 and srv.misses == 0
    assert (rec2.prompt_tokens, rec2.completion_tokens) == (rec.prompt_tokens, rec.completion_tokens)
    with pytest.raises(llm.LLMNodeError, match="'propose' of skill 'a.b.c'"):
      _node(max_retries=0).run(llm.ChatClient(srv.url), {"skill_id": "a.b.c"}, skill="a.b.c")
    with pytest.raises(llm.EndpointError, match="HTTP 404"):  # an unrecorded request
      _node().run(llm.ChatClient(srv.url), {"skill_id": "other"}, skill="q.r.s")


def test_dead_endpoint_names_url_skill_node():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  url = f"http://127.0.0.1:{port}/v1"
  with pytest.raises(llm.EndpointError) as e:
    _node(fallback=lambda i: {}).run(llm.ChatClient(url, http_retries=0), {"skill_id": "s"},
                                     skill="sheet.edit.sum")
  msg = str(e.value)
  assert url in msg and "sheet.edit.sum" in msg and "propose" in msg
