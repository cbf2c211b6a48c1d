"""Serving the policy: the embedded rollout server and its generate batcher, the vLLM process, the
OpenAI-compatible client, engine addresses and weight sync to a running engine."""
