"""Qwen3 decoder (DESIGN.md facts) in flax.nnx, and the decoder protocol.

Qwen3Model(cfg, rngs)(embeds [B,T,D], positions [B,T], segment_ids [B,T], cache=None)
    -> hidden [B,T,D]            (cache None)
    -> (hidden, new_cache)       (cache a `KVCache`)
Qwen3ForCausalLM(cfg, rngs)(tokens, positions, segment_ids) -> hidden
    .logits(hidden) -> fp32 [..., V];  .lm_head_kernel() -> [D, V]

Per layer: h = x + o(attn(rope(q_norm(q(n1(x)))), rope(k_norm(k(n1(x)))), v(n1(x))))
           out = h + down(silu(gate(n2(h))) * up(n2(h)))
GQA with explicit head_dim; q/k per-head RMSNorm over head_dim before RoPE;
scaling head_dim^-0.5; no biases. Parameters in cfg.param_dtype, matmuls in
cfg.compute_dtype, norms/RoPE/softmax in fp32.

Decoder protocol (what `mage_jax.models.sampling.generate` calls; `MageVL`
implements it too):
  embed_inputs(tokens [B,T], **vision_inputs) -> embeds [B,T,D]
  decode(embeds, positions [B,T], segment_ids [B,T], cache: KVCache)
      -> (hidden [B,T,D], KVCache)      # attends over the cache + new slots
  init_cache(batch_size, max_len) -> KVCache   # empty cache for this model
  lm_head_kernel() -> [D, V]            # logits = hidden @ kernel, done by the caller
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from mage_jax import sharding
from mage_jax.models import remat as remat_lib
from mage_jax.models.attention import attention
from mage_jax.models.config import Qwen3Config
from mage_jax.models.layers import Embed, Linear, RMSNorm, as_dtype, matmul_2d
from mage_jax.models.rope import apply_rope, rope_cos_sin
from mage_jax.models.sampling import KVCache, init_kv_cache

HIDDEN_AXES = ("act_batch", "act_seq", "act_embed")


class Qwen3Attention(nnx.Module):

  def __init__(self, cfg: Qwen3Config, *, rngs: nnx.Rngs):
    self.cfg = cfg
    d, hd = cfg.hidden_size, cfg.head_dim
    hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    kw = dict(param_dtype=cfg.param_dtype, dtype=cfg.compute_dtype, rngs=rngs)
    self.q_proj = Linear(d, hq * hd, axes=("embed", "q_heads"), **kw)
    self.k_proj = Linear(d, hkv * hd, axes=("embed", "kv_heads"), **kw)
    self.v_proj = Linear(d, hkv * hd, axes=("embed", "kv_heads"), **kw)
    self.o_proj = Linear(hq * hd, d, axes=("q_heads", "embed"), **kw)
    self.q_norm = RMSNorm(hd, cfg.rms_norm_eps, axes=("norm",), param_dtype=cfg.param_dtype)
    self.k_norm = RMSNorm(hd, cfg.rms_norm_eps, axes=("norm",), param_dtype=cfg.param_dtype)

  def __call__(self, x, cos, sin, positions, segment_ids, kv_cache=None):
    """kv_cache: None, or (k_cache, v_cache, kv_segment_ids, kv_positions, index)."""
    cfg = self.cfg
    b, t, _ = x.shape
    hq, hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q = self.q_norm(self.q_proj(x).reshape(b, t, hq, hd))
    k = self.k_norm(self.k_proj(x).reshape(b, t, hkv, hd))
    v = self.v_proj(x).reshape(b, t, hkv, hd)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    new_kv = None
    if kv_cache is None:
      out = attention(q, k, v, q_segment_ids=segment_ids, kv_segment_ids=segment_ids,
                      causal=True, backend=cfg.attention_backend, q_positions=positions,
                      kv_positions=positions, max_segment_len=cfg.max_segment_len)
    else:
      k_cache, v_cache, kv_seg, kv_pos, index = kv_cache
      zero = jnp.zeros((), index.dtype)
      start = (zero, index, zero, zero)
      k_all = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), start)
      v_all = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), start)
      # T != S here, so always the XLA kernel (chunked over queries for long prompts).
      out = attention(q, k_all.astype(q.dtype), v_all.astype(q.dtype), q_segment_ids=segment_ids,
                      kv_segment_ids=kv_seg, causal=True, backend="xla",
                      q_positions=positions, kv_positions=kv_pos)
      new_kv = (k_all, v_all)
    out = remat_lib.tag_attn_out(out.reshape(b, t, hq * hd))
    return self.o_proj(out), new_kv


class Qwen3MLP(nnx.Module):

  def __init__(self, cfg: Qwen3Config, *, rngs: nnx.Rngs):
    d, f = cfg.hidden_size, cfg.intermediate_size
    kw = dict(param_dtype=cfg.param_dtype, dtype=cfg.compute_dtype, rngs=rngs)
    self.gate_proj = Linear(d, f, axes=("embed", "mlp"), **kw)
    self.up_proj = Linear(d, f, axes=("embed", "mlp"), **kw)
    self.down_proj = Linear(f, d, axes=("mlp", "embed"), **kw)

  def __call__(self, x):
    return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3DecoderLayer(nnx.Module):

  def __init__(self, cfg: Qwen3Config, *, rngs: nnx.Rngs):
    self.self_attn = Qwen3Attention(cfg, rngs=rngs)
    self.mlp = Qwen3MLP(cfg, rngs=rngs)
    self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=cfg.param_dtype)
    self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps,
                                            param_dtype=cfg.param_dtype)

  def __call__(self, x, cos, sin, positions, segment_ids, kv_cache=None):
    attn, new_kv = self.self_attn(self.input_layernorm(x), cos, sin, positions, segment_ids,
                                  kv_cache)
    h = x + attn
    out = h + self.mlp(self.post_attention_layernorm(h))
    return sharding.shard_activation(out, HIDDEN_AXES), new_kv


def _layer_forward(layer, x, cos, sin, positions, segment_ids):
  return layer(x, cos, sin, positions, segment_ids)[0]


class Qwen3Model(nnx.Module):

  def __init__(self, cfg: Qwen3Config, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, axes=("vocab", "embed"),
                              param_dtype=cfg.param_dtype, dtype=cfg.compute_dtype, rngs=rngs)
    self.layers = nnx.List([Qwen3DecoderLayer(cfg, rngs=rngs)
                            for _ in range(cfg.num_hidden_layers)])
    self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=cfg.param_dtype)

  def __call__(self, embeds, positions, segment_ids, cache: KVCache | None = None):
    cfg = self.cfg
    x = sharding.shard_activation(embeds.astype(as_dtype(cfg.compute_dtype)), HIDDEN_AXES)
    positions = positions.astype(jnp.int32)
    segment_ids = segment_ids.astype(jnp.int32)
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
    if cache is None:
      if cfg.remat_policy == "none":
        step = _layer_forward
      else:
        step = nnx.remat(_layer_forward, prevent_cse=True,
                         policy=remat_lib.checkpoint_policy(cfg.remat_policy))
      for layer in self.layers:
        x = step(layer, x, cos, sin, positions, segment_ids)
      return self.norm(x)
    t = embeds.shape[1]
    start = (jnp.zeros((), cache.index.dtype), cache.index)
    kv_seg = jax.lax.dynamic_update_slice(cache.segment_ids, segment_ids, start)
    kv_pos = jax.lax.dynamic_update_slice(cache.positions, positions, start)
    ks, vs = [], []
    for i, layer in enumerate(self.layers):
      x, (k, v) = layer(x, cos, sin, positions, segment_ids,
                        (cache.k[i], cache.v[i], kv_seg, kv_pos, cache.index))
      ks.append(k)
      vs.append(v)
    new_cache = KVCache(k=tuple(ks), v=tuple(vs), segment_ids=kv_seg, positions=kv_pos,
                        index=cache.index + t)
    return self.norm(x), new_cache

  def init_cache(self, batch_size: int, max_len: int) -> KVCache:
    return init_kv_cache(self.cfg, batch_size, max_len)


class Qwen3ForCausalLM(nnx.Module):

  def __init__(self, cfg: Qwen3Config, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.model = Qwen3Model(cfg, rngs=rngs)
    self.lm_head = None if cfg.tie_word_embeddings else Linear(
        cfg.hidden_size, cfg.vocab_size, axes=("embed", "vocab"), param_dtype=cfg.param_dtype,
        dtype=cfg.compute_dtype, rngs=rngs)

  def __call__(self, tokens, positions, segment_ids):
    return self.model(self.embed_inputs(tokens), positions, segment_ids)

  # --- decoder protocol ---
  def embed_inputs(self, tokens):
    return self.model.embed_tokens(tokens)

  def decode(self, embeds, positions, segment_ids, cache: KVCache):
    return self.model(embeds, positions, segment_ids, cache)

  def init_cache(self, batch_size: int, max_len: int) -> KVCache:
    return self.model.init_cache(batch_size, max_len)

  def lm_head_kernel(self) -> jax.Array:
    if self.lm_head is None:
      return self.model.embed_tokens.embedding[...].T
    return self.lm_head.kernel[...]

  def lm_head_bias(self) -> jax.Array | None:
    return rest_logit_bias(self.cfg)

  def logits(self, hidden):
    return compute_logits(hidden, self.lm_head_kernel(), self.cfg.compute_dtype, self.lm_head_bias())


def rest_logit_bias(cfg: Qwen3Config) -> jax.Array | None:
  """fp32 [V]: log(rest_ids) on the compact vocabulary's last row, 0 elsewhere; None for a plain
  vocabulary (Qwen3 has no head bias)."""
  if not cfg.rest_ids:
    return None
  return jnp.zeros((cfg.vocab_size,), jnp.float32).at[-1].set(math.log(cfg.rest_ids))


def compute_logits(hidden: jax.Array, kernel: jax.Array, compute_dtype,
                   bias: jax.Array | None = None) -> jax.Array:
  """hidden [..., D] @ kernel [D, V] (+ bias [V]) in the compute dtype, accumulated and returned in fp32."""
  dtype = as_dtype(compute_dtype)
  logits = matmul_2d(hidden.astype(dtype), kernel.astype(dtype), preferred_element_type=jnp.float32)
  return logits if bias is None else logits + bias
