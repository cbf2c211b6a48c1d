"""The one OpenAI-compatible chat client every LLM path uses (Forge's nodes, the harness-evolution
author, the teacher policy, reasoning synthesis, judges), and token pricing from `usage`.

Floor: imports only the standard library, so `agent/`, `forge/`, `harness/` and `evolve/` can
all use it without importing each other.
"""
