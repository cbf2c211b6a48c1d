"""launch.serve's server (engine/rollout_server.py) driven by the official `openai` SDK, as outside
users drive it: models, chat with an image, usage, `stream=True` on chat and completions (the
streamed text equals the plain answer), `top_logprobs` (checked against the model's own
log-softmax, computed here from Policy.logits), and OpenAI-shaped errors the SDK raises as
its typed exceptions. One tiny random Mage-VL (configs/serve.py tiny_vl's preset) for the module."""
from __future__ import annotations

import base64
import io

import numpy as np
import pytest

openai = pytest.importorskip("openai")

from tests.test_rl_rollouts_vl import log_softmax  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  from flax import nnx
  from configs import models
  from mage_jax import api
  from mage_jax.engine.rollout_server import RolloutServer
  from mage_jax.weights import hf
  cfg = models.build_model_config(models.get_config("mage_vl_tiny"))
  model = hf.build_model(cfg, nnx.Rngs(0))
  model.lm_head.kernel[...] = model.lm_head.kernel[...] * 20.0   # peaked: distinct alternatives
  path = str(tmp_path_factory.mktemp("sdk") / "hf")
  hf.save_hf(model, cfg, path)
  with RolloutServer(path) as server:
    sdk = openai.OpenAI(base_url=server.url, api_key="unused-by-this-server", max_retries=0, timeout=300)
    yield sdk, server, api.load(path)


def _png(rng) -> str:
  from PIL import Image
  buf = io.BytesIO()
  Image.fromarray(rng.integers(0, 256, (56, 84, 3), dtype=np.uint8)).save(buf, format="PNG")
  return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


MESSAGES = [{"role": "user", "content": "Say something."}]


def test_models_and_image_chat_with_usage(served):
  sdk, _, _ = served
  assert [m.id for m in sdk.models.list().data] == ["mage"]
  r = sdk.chat.completions.create(model="mage", max_tokens=5, temperature=0, messages=[{"role": "user", "content": [
      {"type": "text", "text": "What is on screen?"},
      {"type": "image_url", "image_url": {"url": _png(np.random.default_rng(0))}}]}])
  assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
  # the image's tokens count in the prompt: a 56x84 image is 6 merged tokens, not 1 placeholder
  text_only = sdk.chat.completions.create(model="mage", max_tokens=1, temperature=0,
                                          messages=[{"role": "user", "content": "What is on screen?"}])
  assert r.usage.prompt_tokens - text_only.usage.prompt_tokens >= 6
  assert 1 <= r.usage.completion_tokens <= 5
  assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_yields_the_plain_answer_in_chunks(served):
  sdk, _, _ = served
  plain = sdk.chat.completions.create(model="mage", messages=MESSAGES, max_tokens=12, temperature=0)
  chunks = list(sdk.chat.completions.create(model="mage", messages=MESSAGES, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
  content = [c for c in chunks if c.choices]
  assert content[0].choices[0].delta.role == "assistant"
  assert len(content) >= 3 and all(c.object == "chat.completion.chunk" for c in chunks)
  assert "".join(c.choices[0].delta.content or "" for c in content) == plain.choices[0].message.content
  assert content[-1].choices[0].finish_reason == plain.choices[0].finish_reason
  assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_completion_stream(served):
  sdk, _, _ = served
  plain = sdk.completions.create(model="mage", prompt="Hello", max_tokens=8, temperature=0)
  chunks = list(sdk.completions.create(model="mage", prompt="Hello", max_tokens=8, temperature=0, stream=True))
  assert len(chunks) >= 2 and "".join(c.choices[0].text for c in chunks) == plain.choices[0].text
  assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason


def test_top_logprobs_are_the_models_alternatives(served):
  sdk, server, policy = served
  r = sdk.chat.completions.create(model="mage", messages=MESSAGES, max_tokens=4, temperature=0,
                                  logprobs=True, top_logprobs=2, extra_body={"return_token_ids": True})
  got = r.choices[0].logprobs.content
  ids, prompt = r.choices[0].token_ids, r.prompt_token_ids  # vLLM's extra fields ride along
  ref = log_softmax(policy.logits(prompt + ids[:-1])[len(prompt) - 1:])   # [T, V], independent
  tok = policy._tokenizer()
  assert len(got) == len(ids) == 4
  for row, entry, sampled in zip(ref, got, ids):
    best = np.argsort(-row)[:2]
    assert [a.token for a in entry.top_logprobs] == [tok.decode([int(t)], skip_special_tokens=False) for t in best]
    assert np.allclose([a.logprob for a in entry.top_logprobs], row[best], atol=2e-3)
    assert best[0] == sampled and abs(entry.logprob - row[sampled]) < 2e-3   # greedy = the top one
  streamed = list(sdk.chat.completions.create(model="mage", messages=MESSAGES, max_tokens=4, temperature=0,
                                              logprobs=True, top_logprobs=2, stream=True))
  per_token = [c.choices[0].logprobs.content[0] for c in streamed if c.choices and c.choices[0].logprobs]
  assert [[a.token for a in e.top_logprobs] for e in per_token] == [[a.token for a in e.top_logprobs] for e in got]
  # completions: `logprobs: k` gives k alternatives (plus the sampled token) per position
  c = sdk.completions.create(model="mage", prompt="Hello", max_tokens=3, temperature=0, logprobs=2)
  assert all(len(d) == 2 for d in c.choices[0].logprobs.top_logprobs)


def test_errors_come_back_as_the_sdks_typed_exceptions(served):
  sdk, _, _ = served
  with pytest.raises(openai.NotFoundError) as e:
    sdk.chat.completions.create(model="gpt-x", messages=MESSAGES, max_tokens=2)
  assert "gpt-x" in e.value.message and e.value.body["type"] == "NotFoundError"
  with pytest.raises(openai.BadRequestError) as e:
    sdk.chat.completions.create(model="mage", messages=MESSAGES, max_tokens=2, logprobs=True, top_logprobs=50)
  assert e.value.param == "top_logprobs" and "[0, 20]" in e.value.message
  with pytest.raises(openai.BadRequestError) as e:
    sdk.chat.completions.create(model="mage", messages=MESSAGES, max_tokens=2, n=2)
  assert e.value.param == "n"
  with pytest.raises(openai.BadRequestError) as e:   # a bad streamed request fails before any event
    sdk.chat.completions.create(model="mage", messages=[], max_tokens=2, stream=True)
  assert "messages" in e.value.message
