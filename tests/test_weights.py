"""safetensors reader/writer, name tables, and the HF import/export paths.

The reader/writer are checked against the independent `safetensors` package
(torch framework), both directions, including bf16.
"""
import json
import os

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file as torch_save_file

from mage_jax.models.config import MageViTConfig, MageVLConfig, Qwen3Config
from mage_jax.weights import names as names_lib
from mage_jax.weights import safetensors_io as st


def _random(shape, dtype, rng):
  return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def test_reader_matches_safetensors_package(tmp_path):
  rng = np.random.default_rng(0)
  tensors = {
      "a": torch.from_numpy(_random((5, 3), np.float32, rng)),
      "b": torch.randn(4, 2, 3).to(torch.bfloat16),
      "c": torch.arange(7, dtype=torch.int32),
      "s": torch.tensor(3.5),
  }
  path = str(tmp_path / "x.safetensors")
  torch_save_file(tensors, path)
  with st.SafetensorsReader(path) as r:
    assert sorted(r.names()) == ["a", "b", "c", "s"]
    for k, v in tensors.items():
      got = r.read(k)
      want = v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()
      assert got.shape == tuple(v.shape)
      np.testing.assert_array_equal(got.astype(want.dtype), want)
    assert r.read("b").dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(r.read("a", slice(1, 4)), tensors["a"].numpy()[1:4])
    np.testing.assert_array_equal(r.read("b", slice(2, 4)).astype(np.float32),
                                  tensors["b"].float().numpy()[2:4])


def test_writer_shards_and_index_readable_by_safetensors(tmp_path):
  rng = np.random.default_rng(1)
  arrays = {f"t{i}": _random((16, 8), ml_dtypes.bfloat16 if i % 2 else np.float32, rng)
            for i in range(6)}
  files = st.write_arrays(str(tmp_path), arrays, max_shard_bytes=1200)
  assert len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
  index = json.load(open(tmp_path / st.INDEX_FILE))
  assert set(index["weight_map"]) == set(arrays)
  assert index["metadata"]["total_size"] == sum(a.nbytes for a in arrays.values())
  for name, file in index["weight_map"].items():
    with safe_open(str(tmp_path / file), framework="pt") as f:
      t = f.get_tensor(name)
      assert f.metadata()["format"] == "pt"
    want = arrays[name]
    got = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
    np.testing.assert_array_equal(got, want.astype(np.float32))
  # Each shard respects the limit unless it holds a single oversized tensor.
  for file in files:
    with st.SafetensorsReader(str(tmp_path / file)) as r:
      assert sum(e.nbytes for e in r.entries.values()) <= 1200 or len(r.names()) == 1
  # Reading the directory goes through the index.
  with st.SafetensorsReader(str(tmp_path)) as r:
    for k, v in arrays.items():
      assert r.read(k).tobytes() == v.tobytes()
  # Re-export as one file removes the stale shards and index.
  st.write_arrays(str(tmp_path), arrays)
  assert sorted(os.listdir(tmp_path)) == [st.SINGLE_FILE]


def test_reader_errors_name_the_file(tmp_path):
  bad = tmp_path / "bad.safetensors"
  bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
  with pytest.raises(ValueError, match="bad.safetensors.*JSON"):
    st.SafetensorsReader(str(bad))
  (tmp_path / "d").mkdir()
  (tmp_path / "d" / st.INDEX_FILE).write_text(json.dumps({"weight_map": {"x": "gone.safetensors"}}))
  with pytest.raises(FileNotFoundError, match="gone.safetensors"):
    st.SafetensorsReader(str(tmp_path / "d"))
  with pytest.raises(FileNotFoundError, match="no model.safetensors"):
    (tmp_path / "empty").mkdir()
    st.SafetensorsReader(str(tmp_path / "empty"))


def test_writer_rejects_shape_mismatch(tmp_path):
  plan = [st.TensorToWrite("x", (2, 2), np.dtype(np.float32))]
  with pytest.raises(ValueError, match="'x'.*planned"):
    st.write_checkpoint(str(tmp_path), plan, lambda n: np.zeros((2, 3), np.float32))


TINY_QWEN = Qwen3Config(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=8, intermediate_size=24)


def test_qwen3_table_matches_transformers_names_and_shapes():
  """Names/shapes against a transformers Qwen3ForCausalLM state_dict (independent)."""
  from transformers import Qwen3Config as HFConfig, Qwen3ForCausalLM
  hf_cfg = HFConfig(**{k: v for k, v in TINY_QWEN.to_hf().items()
                       if k not in ("architectures", "torch_dtype")})
  sd = Qwen3ForCausalLM(hf_cfg).state_dict()
  specs = names_lib.tensor_specs(TINY_QWEN)
  assert {s.hf_name: s.hf_shape for s in specs} == {k: tuple(v.shape) for k, v in sd.items()}
  assert len({s.path for s in specs}) == len(specs)


def test_mage_vl_table_names_follow_design():
  cfg = MageVLConfig(
      text=TINY_QWEN,
      vision=MageViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, out_hidden_size=16))
  by_name = {s.hf_name: s for s in names_lib.tensor_specs(cfg)}
  assert by_name["model.visual.embeddings.patch_embedding.weight"].hf_shape == (64, 3, 16, 16)
  assert by_name["model.visual.merger.mlp.0.weight"].hf_shape == (256, 256)
  assert by_name["model.visual.merger.mlp.2.weight"].hf_shape == (16, 256)
  assert by_name["model.visual.encoder.layers.0.self_attn.qkv.bias"].hf_shape == (192,)
  assert by_name["model.language_model.layers.1.self_attn.k_norm.weight"].path == \
      "language_model/layers/1/self_attn/k_norm/scale"
  assert by_name["lm_head.weight"].path == "lm_head/kernel"
  assert not any(n.startswith("model.layers") for n in by_name)


def test_patch_embed_transform_is_conv_as_linear():
  """Our [C*P*P, D] kernel applied to a flattened [C,P,P] patch == the HF Conv2d."""
  spec = names_lib.TensorSpec("k", "w", "patch_embed", (3 * 4 * 4, 5))
  rng = np.random.default_rng(0)
  w = _random((5, 3, 4, 4), np.float32, rng)
  patch = _random((1, 3, 4, 4), np.float32, rng)
  conv = torch.nn.functional.conv2d(torch.from_numpy(patch), torch.from_numpy(w), stride=4)
  ours = patch.reshape(1, -1) @ spec.to_ours(w)
  np.testing.assert_allclose(ours[0], conv.numpy().reshape(-1), rtol=1e-5, atol=1e-5)
  assert spec.to_hf(spec.to_ours(w)).tobytes() == np.ascontiguousarray(w).tobytes()
  # A slice of our array read via HF rows equals slicing the full conversion.
  rows, rest = spec.hf_rows_for((slice(8, 40), slice(1, 3)))
  np.testing.assert_array_equal(spec.to_ours(w[rows])[rest], spec.to_ours(w)[8:40, 1:3])
