"""Mage-ViT vs a NumPy reference written here from DESIGN.md, plus literal 3D RoPE values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from mage_jax.models import vision_rope

# ---------------------------------------------------------------------------
# Literal values: head_dim 32 -> half 16, u 1, t/h/w get 4/6/6 frequencies.
# A 2x2-patch frame at real frame index t = 3 (patches in 2x2 block order).
# Worked by hand (math.cos/sin on paper-sized numbers), not by the model code.
# inv_t = 10000^(-k/4), k<4;  inv_h = inv_w = 10000^(-k/6), k<6.
INV_FREQ_32 = [
    1.0, 0.1, 0.01, 0.001,
    1.0, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
    1.0, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
]
HAND_POSITIONS = [(3, 0, 0), (3, 0, 1), (3, 1, 0), (3, 1, 1)]
# f = concat(t*inv_t, h*inv_h, w*inv_w) per patch (length 16).
HAND_F = [
    [3, 0.3, 0.03, 0.003, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [3, 0.3, 0.03, 0.003, 0, 0, 0, 0, 0, 0,
     1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883],
    [3, 0.3, 0.03, 0.003, 1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
     0, 0, 0, 0, 0, 0],
    [3, 0.3, 0.03, 0.003, 1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883,
     1, 0.215443469, 0.0464158883, 0.01, 0.00215443469, 0.000464158883],
]
# x[j] = (j + 1) / 10; out = x*cos(e) + r*sin(e), e = concat(f, f), r[2i] = -x[2i+1], r[2i+1] = x[2i].
# e.g. out[0] = 0.1*cos(3) - 0.2*sin(3) = -0.12722325; out[16] = 1.7*cos(3) - 1.8*sin(3) = -1.93700326.
HAND_OUT = [
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
     1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6,
     2.7, 2.8, 2.9, 3.0, 3.1, 3.2],
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
     -0.41543265, 1.40741675, 1.23364096, 1.41292978, 1.49654943, 1.60069607,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6,
     -0.89730253, 3.31247652, 2.75767896, 3.02884952, 3.09309862, 3.20143855],
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820,
     -0.23473144, 0.69301934, 0.66212670, 0.80695988, 0.89784348, 1.00041764,
     1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099,
     -0.71660132, 2.59807911, 2.18616471, 2.42287962, 2.49439267, 2.60116012,
     2.7, 2.8, 2.9, 3.0, 3.1, 3.2],
    [-0.12722325, 0.22061932, 0.28786681, 0.40089820,
     -0.23473144, 0.69301934, 0.66212670, 0.80695988, 0.89784348, 1.00041764,
     -0.41543265, 1.40741675, 1.23364096, 1.41292978, 1.49654943, 1.60069607,
     -1.93700326, 2.22199003, 1.83915406, 2.00569099,
     -0.71660132, 2.59807911, 2.18616471, 2.42287962, 2.49439267, 2.60116012,
     -0.89730253, 3.31247652, 2.75767896, 3.02884952, 3.09309862, 3.20143855],
]


def test_rope_axis_split_and_inverse_frequencies_literal():
  assert vision_rope.axis_sizes(32) == (4, 6, 6)
  assert vision_rope.axis_sizes(64) == (8, 12, 12)
  np.testing.assert_allclose(vision_rope.inverse_frequencies(32), INV_FREQ_32, rtol=1e-6)
  with pytest.raises(ValueError, match="multiple of 32"):
    vision_rope.axis_sizes(48)


def test_rope_angles_literal_2x2():
  e = np.asarray(vision_rope.rope_angles(np.array(HAND_POSITIONS, np.int32), 32))
  assert e.shape == (4, 32) and e.dtype == np.float32
  f = np.array(HAND_F, np.float32)
  np.testing.assert_allclose(e, np.concatenate([f, f], axis=1), rtol=1e-6, atol=1e-7)


def test_rope_rotated_vector_literal_2x2():
  x = (np.arange(32, dtype=np.float32) + 1) / 10
  x = np.broadcast_to(x, (1, 4, 1, 32))  # [B, P, H, D]
  pos = np.array([HAND_POSITIONS], np.int32)
  out = np.asarray(vision_rope.apply_vision_rope(x, pos))[0, :, 0]
  np.testing.assert_allclose(out, np.array(HAND_OUT), atol=2e-6)
  # Not a true rotation: the norm changes for patches with nonzero angles.
  assert abs(np.linalg.norm(out[3]) - np.linalg.norm(x[0, 0, 0])) > 1e-3


# ---------------------------------------------------------------------------
# Full tiny ViT vs a NumPy reference written from DESIGN.md.

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from mage_jax.models.config import MageViTConfig  # noqa: E402
from mage_jax.models import mage_vit  # noqa: E402

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96,
            out_hidden_size=48)
MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
STD = np.array([0.26862954, 0.26130258, 0.27577711])


def randomize(model: nnx.Module, seed: int = 0, std: float = 0.1) -> None:
  """Give every param (incl. LN scales and biases) distinct random values."""
  state = nnx.state(model, nnx.Param)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  new = [l + std * jax.random.normal(k, l.shape, l.dtype) for l, k in zip(leaves, keys)]
  nnx.update(model, jax.tree.unflatten(treedef, new))


def np_params(model: nnx.Module) -> dict[str, np.ndarray]:
  return {"/".join(map(str, p)): np.asarray(v[...], np.float64)
          for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def ref_layernorm(x, scale, bias, eps=1e-6):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * scale + bias


_erf = np.vectorize(math.erf)


def ref_gelu(x):
  return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def ref_rope(x, pos, theta=10_000.0):
  """x [P, H, D]; DESIGN.md: 4u/6u/6u split, e = concat(f, f), interleaved r."""
  d = x.shape[-1]
  half, u = d // 2, d // 32
  sizes = (4 * u, 6 * u, 6 * u)
  out = np.empty_like(x)
  for p in range(x.shape[0]):
    f = []
    for axis, size in enumerate(sizes):
      f += [pos[p][axis] * theta ** (-k / size) for k in range(size)]
    assert len(f) == half
    e = np.array(f + f)
    for hd in range(x.shape[1]):
      v = x[p, hd]
      r = np.empty(d)
      r[0::2], r[1::2] = -v[1::2], v[0::2]
      out[p, hd] = v * np.cos(e) + r * np.sin(e)
  return out


def ref_vit(prm, rows_u8, ids, pos, cfg: MageViTConfig):
  """One packed row: rows [P, 768] uint8, ids [P], pos [P, 3] -> merged [P//4, out]."""
  chan = np.arange(rows_u8.shape[1]) // (cfg.patch_size ** 2)
  x = (rows_u8.astype(np.float64) - 255 * MEAN[chan]) / (255 * STD[chan])
  h = x @ prm["embeddings/patch_embedding/kernel"]
  h = ref_layernorm(h, prm["layernorm_pre/scale"], prm["layernorm_pre/bias"])
  n_p, d, nh, hd = h.shape[0], cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
  for i in range(cfg.num_hidden_layers):
    g = lambda name: prm[f"encoder/layers/{i}/{name}"]
    y = ref_layernorm(h, g("layer_norm1/scale"), g("layer_norm1/bias"))
    qkv = y @ g("self_attn/qkv/kernel") + g("self_attn/qkv/bias")
    q = ref_rope(qkv[:, :d].reshape(n_p, nh, hd), pos)
    k = ref_rope(qkv[:, d:2 * d].reshape(n_p, nh, hd), pos)
    v = qkv[:, 2 * d:].reshape(n_p, nh, hd)
    o = np.zeros((n_p, nh, hd))
    for a in range(n_p):
      if ids[a] == 0:
        continue  # padding patches attend to nothing -> zeros
      keys = np.nonzero(ids == ids[a])[0]
      for head in range(nh):
        s = k[keys, head] @ q[a, head] / math.sqrt(hd)
        w = np.exp(s - s.max())
        o[a, head] = (w / w.sum()) @ v[keys, head]
    h = h + o.reshape(n_p, d) @ g("self_attn/proj/kernel") + g("self_attn/proj/bias")
    y = ref_layernorm(h, g("layer_norm2/scale"), g("layer_norm2/bias"))
    y = ref_gelu(y @ g("mlp/fc1/kernel") + g("mlp/fc1/bias"))
    h = h + y @ g("mlp/fc2/kernel") + g("mlp/fc2/bias")
  y = ref_layernorm(h, prm["merger/ln_q/scale"], prm["merger/ln_q/bias"]).reshape(n_p // 4, 4 * d)
  y = ref_gelu(y @ prm["merger/fc1/kernel"] + prm["merger/fc1/bias"])
  return y @ prm["merger/fc2/kernel"] + prm["merger/fc2/bias"]


@nnx.jit
def run_vit(model, rows, ids, pos):
  return model(rows, ids, pos)


def block_order_positions(gh, gw, t=0):
  """Written here independently: 2x2 blocks row-major, row-major inside a block."""
  out = []
  for bh in range(gh // 2):
    for bw in range(gw // 2):
      for dh in range(2):
        for dw in range(2):
          out.append((t, 2 * bh + dh, 2 * bw + dw))
  return np.array(out, np.int32)


@pytest.fixture(scope="module")
def tiny_vit():
  cfg = MageViTConfig(**TINY)
  model = mage_vit.MageViT(cfg, rngs=nnx.Rngs(0))
  randomize(model, seed=1)
  return cfg, model


def packed_two_images(rng):
  """Row 0: image A (2x2 patches, id 1) + image B (4x2 patches, id 2) + 4 padding patches.
  Row 1: image B alone + 8 padding patches."""
  a = rng.integers(0, 256, (4, 768), dtype=np.uint8)
  b = rng.integers(0, 256, (8, 768), dtype=np.uint8)
  pad = rng.integers(0, 256, (4, 768), dtype=np.uint8)  # garbage: must not leak
  pa, pb = block_order_positions(2, 2), block_order_positions(4, 2)
  rows = np.stack([np.concatenate([a, b, pad]), np.concatenate([b, pad, pad])])
  ids = np.array([[1] * 4 + [2] * 8 + [0] * 4, [1] * 8 + [0] * 8], np.int32)
  zeros = np.zeros((4, 3), np.int32)
  pos = np.stack([np.concatenate([pa, pb, zeros]), np.concatenate([pb, zeros, zeros])])
  return rows, ids, pos


def test_vit_forward_matches_numpy_reference(tiny_vit):
  cfg, model = tiny_vit
  rows, ids, pos = packed_two_images(np.random.default_rng(0))
  out = np.asarray(run_vit(model, rows, ids, pos))
  assert out.shape == (2, 4, cfg.out_hidden_size) and out.dtype == np.float32
  assert np.isfinite(out).all()
  prm = np_params(model)
  ref0 = ref_vit(prm, rows[0, :12], ids[0, :12], pos[0, :12], cfg)  # both real images
  np.testing.assert_allclose(out[0, :3], ref0, atol=1e-4, rtol=0)
  ref_b = ref_vit(prm, rows[1, :8], ids[1, :8], pos[1, :8], cfg)
  np.testing.assert_allclose(out[1, :2], ref_b, atol=1e-4, rtol=0)
  # Block-diagonal: image B's merged tokens are the same packed after A or alone.
  np.testing.assert_allclose(out[0, 1:3], out[1, :2], atol=1e-5, rtol=0)
  # Sanity for the test itself: full (non-block-diagonal) attention would differ.
  ref_joint = ref_vit(prm, rows[0, :12], np.ones(12, np.int32), pos[0, :12], cfg)
  assert np.abs(ref_joint - ref0).max() > 1e-3


def test_vit_unbatched_and_float_input(tiny_vit):
  cfg, model = tiny_vit
  rows, ids, pos = packed_two_images(np.random.default_rng(1))
  batched = np.asarray(run_vit(model, rows, ids, pos))
  single = np.asarray(run_vit(model, rows[0], ids[0], pos[0]))
  assert single.shape == (4, cfg.out_hidden_size)
  np.testing.assert_allclose(single, batched[0], atol=1e-5)
  normed = mage_vit.normalize_patch_rows(rows)
  assert normed.dtype == np.float32 and isinstance(normed, np.ndarray)
  np.testing.assert_allclose(np.asarray(run_vit(model, normed, ids, pos)), batched, atol=1e-5)


def test_normalize_patch_rows_channel_layout():
  row = np.zeros((1, 768), np.uint8)
  row[0, 256:512] = 255  # channel 1 (green) is columns 256..511 of a [C, 16, 16] row
  out = mage_vit.normalize_patch_rows(row)[0]
  np.testing.assert_allclose(out[0], -0.48145466 / 0.26862954, rtol=1e-6)
  np.testing.assert_allclose(out[300], (1 - 0.4578275) / 0.26130258, rtol=1e-6)
  np.testing.assert_allclose(out[700], -0.40821073 / 0.27577711, rtol=1e-6)


def test_grid_positions_and_video_windows(tiny_vit):
  np.testing.assert_array_equal(mage_vit.grid_patch_positions(1, 4, 2),
                                block_order_positions(4, 2))
  ids = mage_vit.video_window_ids(6, 2, 2, max_window_frames=4, first_id=3)
  np.testing.assert_array_equal(ids, [3] * 16 + [4] * 8)
  # A 6-frame [6, 2, 2] video: frames 4-5 attend only within their window.
  cfg, model = tiny_vit
  rng = np.random.default_rng(2)
  rows = rng.integers(0, 256, (24, 768), dtype=np.uint8)
  pos = mage_vit.grid_patch_positions(6, 2, 2)
  whole = np.asarray(run_vit(model, rows, ids, pos))
  window2 = np.asarray(run_vit(model, rows[16:], ids[16:], pos[16:]))
  np.testing.assert_allclose(whole[4:], window2, atol=1e-5)
  window1 = np.asarray(run_vit(model, rows[:16], ids[:16], pos[:16]))
  np.testing.assert_allclose(whole[:4], window1, atol=1e-5)


def test_remat_policies_same_grads(tiny_vit):
  cfg, model = tiny_vit
  rows, ids, pos = packed_two_images(np.random.default_rng(3))
  loss = lambda m: jnp.sum(m(rows, ids, pos)[0, :3] ** 2)
  grad = nnx.jit(nnx.grad(loss))
  g_ref = jax.tree.leaves(grad(model))
  for policy in ("full", "save_attn_out"):
    remat_model = mage_vit.MageViT(MageViTConfig(**TINY, remat_policy=policy), rngs=nnx.Rngs(0))
    nnx.update(remat_model, nnx.state(model, nnx.Param))
    for a, b in zip(g_ref, jax.tree.leaves(grad(remat_model))):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_patch_count_must_be_multiple_of_four(tiny_vit):
  _, model = tiny_vit
  with pytest.raises(ValueError, match="multiple of 4"):
    model(np.zeros((6, 768), np.uint8), np.ones(6, np.int32), np.zeros((6, 3), np.int32))


def test_full_size_vision_axes_shard_on_paper_mesh():
  """Every ViT param has axes in the rules table and divides on data=3 x fsdp=8 and tensor=4."""
  from mage_jax import sharding
  abstract = nnx.eval_shape(lambda: mage_vit.MageViT(MageViTConfig(), rngs=nnx.Rngs(0)))
  state = nnx.state(abstract, nnx.Param)
  n = sum(int(np.prod(v.shape)) for v in jax.tree.leaves(state))
  assert abs(n / 1e9 - 0.33) < 0.01, n  # DESIGN.md: vision 0.33B
  for mesh in (sharding.abstract_mesh(data=3, fsdp=8), sharding.abstract_mesh(fsdp=2, tensor=4)):
    sharding.param_specs(state, mesh)
  specs = sharding.param_specs(state, sharding.abstract_mesh(fsdp=2, tensor=4))
  qkv = specs["encoder"]["layers"][0]["self_attn"]["qkv"]["kernel"]
  assert tuple(qkv.get_value()) == ("fsdp", "tensor")


def test_sharded_forward_matches_single_device(tiny_vit):
  from jax.sharding import NamedSharding, PartitionSpec
  from mage_jax import sharding
  cfg, model = tiny_vit
  rows, ids, pos = packed_two_images(np.random.default_rng(5))
  graphdef, state = nnx.split(model)
  fwd = lambda s, *a: nnx.merge(graphdef, s)(*a)
  single = np.asarray(jax.jit(fwd)(state, rows, ids, pos))
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  shardings = sharding.param_shardings(state, mesh)
  batch_sh = NamedSharding(mesh, PartitionSpec("data"))  # batch of 2
  with jax.set_mesh(mesh):
    out = jax.jit(fwd, in_shardings=(shardings, batch_sh, batch_sh, batch_sh))(
        jax.device_put(state, shardings), rows, ids, pos)
  np.testing.assert_allclose(np.asarray(out), single, atol=1e-5)


def test_pallas_interpret_backend_matches_xla(tiny_vit):
  """The segment-aware flash kernel (interpret mode on CPU) keeps images apart like XLA."""
  cfg, model = tiny_vit
  flash = mage_vit.MageViT(MageViTConfig(**TINY, attention_backend="pallas_interpret"),
                           rngs=nnx.Rngs(0))
  nnx.update(flash, nnx.state(model, nnx.Param))
  rows, ids, pos = packed_two_images(np.random.default_rng(6))
  a = np.asarray(run_vit(model, rows, ids, pos))
  b = np.asarray(run_vit(flash, rows, ids, pos))
  np.testing.assert_allclose(b[0, :3], a[0, :3], atol=1e-5)
  np.testing.assert_allclose(b[1, :2], a[1, :2], atol=1e-5)
