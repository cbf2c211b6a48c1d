"""The peer baseline: one SFT step of HF transformers Qwen3ForCausalLM in torch on CPU.

Imported only by the CPU suite (the GPU suite must run on a bare JAX image).
Same architecture, batch, loss (mean next-token CE over masked tokens) and
optimizer (AdamW) as ours, so the ratio compares implementations, not work.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
import transformers

from mage_jax.models.config import Qwen3Config


def hf_config(cfg: Qwen3Config) -> transformers.Qwen3Config:
  d = cfg.to_hf()
  d.pop("architectures")
  d.pop("torch_dtype")
  d["max_position_embeddings"] = 4096
  # Special ids of the real tokenizer fall outside a shrunk vocab; they play no part in a step.
  for key in ("bos_token_id", "eos_token_id"):
    if d[key] >= cfg.vocab_size:
      d[key] = None
  return transformers.Qwen3Config(**d)


def make_step(cfg: Qwen3Config, batch: dict[str, np.ndarray], *, compile_mode: str,
              attn_implementation: str = "sdpa", threads: int, lr: float = 1e-4,
              ) -> Callable[[], float]:
  """Returns a thunk running one train step (fwd + bwd + AdamW) and the loss as float.

  `compile_mode`: "eager" or "compile" (torch.compile of the model's forward).
  """
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  model = transformers.Qwen3ForCausalLM._from_config(
      hf_config(cfg), attn_implementation=attn_implementation, dtype=torch.float32)
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
  tokens = torch.from_numpy(batch["tokens"]).long()
  positions = torch.from_numpy(batch["positions"]).long()
  targets = torch.from_numpy(batch["targets"]).long()
  mask = torch.from_numpy(batch["loss_mask"]).float()
  vocab = cfg.vocab_size

  def loss_fn(tokens, positions, targets, mask):
    logits = model(input_ids=tokens, position_ids=positions, use_cache=False).logits
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, vocab).float(), targets.reshape(-1), reduction="none")
    return (ce * mask.reshape(-1)).sum() / mask.sum().clamp(min=1.0)

  if compile_mode == "compile":
    loss_fn = torch.compile(loss_fn)
  elif compile_mode != "eager":
    raise ValueError(f"compile_mode={compile_mode!r} is not 'eager' or 'compile'")

  def step() -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(tokens, positions, targets, mask)
    loss.backward()
    optimizer.step()
    return float(loss.detach())

  return step


def first_call_seconds(step: Callable[[], float]) -> float:
  """Runs the step once; for torch.compile this is the compile time."""
  start = time.perf_counter()
  step()
  return time.perf_counter() - start
