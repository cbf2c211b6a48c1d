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


TINY_MAGE_VL = MageVLConfig(
    text=TINY_QWEN,
    vision=MageViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, out_hidden_size=16))


def test_mage_vl_table_names_follow_design():
  cfg = TINY_MAGE_VL
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


# ---------------------------------------------------------------------------
# HF import/export through load_hf / save_hf.

from mage_jax import sharding  # noqa: E402
from mage_jax.weights import hf  # noqa: E402


def write_random_hf(path, cfg, dtype=np.float32, seed=0, **write_kwargs):
  """An HF dir with config.json and random tensors named/shaped by the table."""
  os.makedirs(path, exist_ok=True)
  rng = np.random.default_rng(seed)
  arrays = {s.hf_name: _random(s.hf_shape, dtype, rng) for s in names_lib.tensor_specs(cfg)}
  st.write_arrays(str(path), arrays, **write_kwargs)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(cfg.to_hf(), f)
  return arrays


def _tensor_bytes(path):
  with st.SafetensorsReader(str(path)) as r:
    return {n: (r.entries[n].dtype, r.shape(n), r.read(n).tobytes()) for n in r.names()}


@pytest.mark.parametrize("dtype,export", [(np.float32, "float32"),
                                          (ml_dtypes.bfloat16, "bfloat16")])
def test_qwen3_round_trip_bit_exact(tmp_path, dtype, export):
  # Sharded source (index) -> fp32 params -> sharded export: every tensor bytewise equal.
  write_random_hf(tmp_path / "src", TINY_QWEN, dtype, max_shard_bytes=4000)
  assert os.path.exists(tmp_path / "src" / st.INDEX_FILE)
  cfg, model = hf.load_hf(str(tmp_path / "src"))
  assert model.model.layers[0].self_attn.q_proj.kernel[...].dtype == np.float32
  files = hf.save_hf(model, cfg, str(tmp_path / "dst"), dtype=export, max_shard_bytes=4000)
  assert len(files) > 1
  assert _tensor_bytes(tmp_path / "src") == _tensor_bytes(tmp_path / "dst")


def test_loaded_values_follow_the_transforms(tmp_path):
  arrays = write_random_hf(tmp_path, TINY_QWEN)
  _, model = hf.load_hf(str(tmp_path))
  np.testing.assert_array_equal(model.model.layers[1].mlp.down_proj.kernel[...],
                                arrays["model.layers.1.mlp.down_proj.weight"].T)
  np.testing.assert_array_equal(model.lm_head.kernel[...], arrays["lm_head.weight"].T)
  np.testing.assert_array_equal(model.model.embed_tokens.embedding[...],
                                arrays["model.embed_tokens.weight"])


SHARD_QWEN = Qwen3Config(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, intermediate_size=32)


@pytest.mark.parametrize("mesh_shape,cfg", [
    (dict(fsdp=8), SHARD_QWEN), (dict(data=2, fsdp=2, tensor=2), SHARD_QWEN),
    (dict(data=2, fsdp=2, tensor=2), "mage_vl")], ids=["fsdp8", "d2f2t2", "mage_vl_d2f2t2"])
def test_loaded_arrays_carry_the_rules_sharding(tmp_path, mesh_shape, cfg):
  cfg = TINY_MAGE_VL if cfg == "mage_vl" else cfg
  arrays = write_random_hf(tmp_path, cfg)
  mesh = sharding.make_mesh(mesh_shape)
  _, (graphdef, state) = hf.load_hf(str(tmp_path), mesh=mesh, return_state=True)
  want = sharding.param_shardings(nnx_abstract_state(cfg), mesh)
  got_flat = {names_lib.path_str(p): v.get_value() for p, v in nnx.to_flat_state(state)}
  want_flat = {names_lib.path_str(p): v.get_value() for p, v in nnx.to_flat_state(want)}
  assert set(got_flat) == set(want_flat)
  sharded = 0
  for path, arr in got_flat.items():
    assert arr.sharding == want_flat[path], path
    sharded += not arr.sharding.is_fully_replicated
  assert sharded >= 5  # the rules really split things on this mesh
  by_path = {s.path: s for s in names_lib.tensor_specs(cfg)}
  for path, arr in got_flat.items():
    spec = by_path[path]
    np.testing.assert_array_equal(np.asarray(arr), spec.to_ours(arrays[spec.hf_name]))


def nnx_abstract_state(cfg):
  return nnx.split(hf.abstract_model(cfg))[1]


from flax import nnx  # noqa: E402


def test_unknown_architecture_names_it_and_the_file(tmp_path):
  write_random_hf(tmp_path, TINY_QWEN)
  config = json.load(open(tmp_path / "config.json"))
  config.update(architectures=["LlamaForCausalLM"], model_type="llama")
  json.dump(config, open(tmp_path / "config.json", "w"))
  with pytest.raises(ValueError, match=r"config\.json: unknown architecture.*LlamaForCausalLM"):
    hf.load_hf(str(tmp_path))


def test_mismatched_checkpoint_lists_every_offender_in_one_error(tmp_path):
  arrays = write_random_hf(tmp_path, TINY_QWEN)
  del arrays["model.layers.1.mlp.up_proj.weight"]
  del arrays["model.norm.weight"]
  arrays["model.layers.0.self_attn.q_proj.weight"] = np.zeros((31, 16), np.float32)
  arrays["model.layers.0.self_attn.k_norm.weight"] = np.zeros((9,), np.float32)
  arrays["model.layers.7.mlp.up_proj.weight"] = np.zeros((2, 2), np.float32)
  st.write_arrays(str(tmp_path), arrays)
  with pytest.raises(hf.CheckpointMismatchError) as err:
    hf.load_hf(str(tmp_path))
  msg = str(err.value)
  assert "5 tensor(s)" in msg
  assert "missing:     model.layers.1.mlp.up_proj.weight expected [24, 16]" in msg
  assert "missing:     model.norm.weight expected [16]" in msg
  assert ("wrong shape: model.layers.0.self_attn.q_proj.weight expected [32, 16], "
          "found [31, 16]") in msg
  assert "wrong shape: model.layers.0.self_attn.k_norm.weight expected [8], found [9]" in msg
  assert "unexpected:  model.layers.7.mlp.up_proj.weight found [2, 2]" in msg


def test_tied_checkpoint_may_still_carry_lm_head(tmp_path):
  cfg = Qwen3Config(**{**TINY_QWEN.__dict__, "tie_word_embeddings": True})
  arrays = write_random_hf(tmp_path, cfg)
  arrays["lm_head.weight"] = arrays["model.embed_tokens.weight"]
  st.write_arrays(str(tmp_path), arrays)
  loaded_cfg, model = hf.load_hf(str(tmp_path))
  assert loaded_cfg.tie_word_embeddings and model.lm_head is None


@pytest.mark.parametrize("arch", ["qwen3", "mage_vl"])
def test_tied_export_writes_the_head_as_a_copy_of_the_embedding(tmp_path, arch):
  """vLLM's in-place reload needs a tied head as its own tensor (docs/rl.md "Tied embeddings"):
  the export adds `lm_head.weight` equal to the embedding, and nothing else changes."""
  import jax
  text = Qwen3Config(**{**TINY_QWEN.__dict__, "tie_word_embeddings": True})
  cfg = text if arch == "qwen3" else MageVLConfig(text=text, vision=TINY_MAGE_VL.vision)
  model = hf.build_model(cfg, nnx.Rngs(0))
  hf.save_hf(model, cfg, str(tmp_path / "copy"), dtype="bfloat16")
  hf.save_hf(model, cfg, str(tmp_path / "bare"), dtype="bfloat16", tied_head_copy=False)
  copy, bare = _tensor_bytes(tmp_path / "copy"), _tensor_bytes(tmp_path / "bare")
  embed = "model.embed_tokens.weight" if arch == "qwen3" else "model.language_model.embed_tokens.weight"
  assert set(copy) - set(bare) == {"lm_head.weight"} and "lm_head.weight" not in bare
  assert copy["lm_head.weight"] == copy[embed] and {n: copy[n] for n in bare} == bare
  _, again = hf.load_hf(str(tmp_path / "copy"))   # a loader that ties ignores the copy
  for a, b in zip(jax.tree_util.tree_leaves(nnx.state(again)), jax.tree_util.tree_leaves(nnx.state(model))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b).astype(ml_dtypes.bfloat16).astype(np.float32))
  untied = hf.build_model(TINY_QWEN, nnx.Rngs(0))
  hf.save_hf(untied, TINY_QWEN, str(tmp_path / "untied"), dtype="bfloat16")
  assert _tensor_bytes(tmp_path / "untied").keys() == {s.hf_name for s in names_lib.tensor_specs(TINY_QWEN)}


RSS_SCRIPT = r"""
import json, os, resource, sys
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, sys.argv[2])
import jax, numpy as np
from mage_jax.weights import hf
jax.numpy.zeros(1).block_until_ready()        # runtime up before the baseline
def hwm_kb():
  for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
      return int(line.split()[1])
before = hwm_kb()
cfg, (g, state) = hf.load_hf(sys.argv[1], return_state=True)
leaves = jax.tree_util.tree_leaves(state)
jax.block_until_ready(leaves)
loaded = sum(x.nbytes for x in leaves)
print(json.dumps({"before_kb": before, "after_kb": hwm_kb(), "loaded_bytes": loaded}))
"""


@pytest.mark.slow
def test_streaming_import_peak_rss(tmp_path):
  """~300 MB fp32 checkpoint: peak RSS growth during import < 1.5x its size."""
  import subprocess
  import sys
  cfg = Qwen3Config(vocab_size=16384, hidden_size=1024, num_hidden_layers=4,
                    num_attention_heads=8, num_key_value_heads=4, head_dim=128,
                    intermediate_size=4096, tie_word_embeddings=False)
  specs = names_lib.tensor_specs(cfg)
  size = sum(int(np.prod(s.hf_shape)) * 4 for s in specs)
  assert size > 250e6
  # Write tensor by tensor so this test process stays small too.
  rng = np.random.default_rng(0)
  plan = [st.TensorToWrite(s.hf_name, s.hf_shape, np.dtype(np.float32)) for s in specs]
  st.write_checkpoint(str(tmp_path), plan,
                      lambda n: rng.standard_normal(
                          next(s.hf_shape for s in specs if s.hf_name == n), np.float32),
                      max_shard_bytes=150_000_000)
  json.dump(cfg.to_hf(), open(tmp_path / "config.json", "w"))
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device
  out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(tmp_path), root], env=env,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-3000:]
  r = json.loads(out.stdout.strip().splitlines()[-1])
  growth = (r["after_kb"] - r["before_kb"]) * 1024
  print(f"[rss] checkpoint {size / 1e6:.1f} MB, peak RSS growth {growth / 1e6:.1f} MB "
        f"= {growth / size:.2f}x")
  assert r["loaded_bytes"] == size
  assert growth < 1.5 * size


PUBLISHED_MAGE_VL_FILES = {  # the published checkpoint's non-code, non-asset files
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "preprocessor_config.json", "model.safetensors.index.json",
    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def test_mage_vl_export_layout_and_reload(tmp_path):
  arrays = write_random_hf(tmp_path / "src", TINY_MAGE_VL, ml_dtypes.bfloat16)
  cfg, model = hf.load_hf(str(tmp_path / "src"))
  assert isinstance(cfg, MageVLConfig)
  total = sum(a.nbytes for a in arrays.values())
  hf.save_hf(model, cfg, str(tmp_path / "out"), max_shard_bytes=int(total * 0.75))
  assert set(os.listdir(tmp_path / "out")) == PUBLISHED_MAGE_VL_FILES
  config = json.load(open(tmp_path / "out" / "config.json"))
  assert config["architectures"] == ["MageVLForConditionalGeneration"]
  assert config["model_type"] == "mage_vl" and config["image_token_id"] == 151655
  assert config["text_config"]["hidden_size"] == 16 and config["text_config"]["head_dim"] == 8
  assert config["vision_config"]["hidden_size"] == 64
  assert config["vision_config"]["out_hidden_size"] == 16
  assert config["torch_dtype"] == "bfloat16"
  pre = json.load(open(tmp_path / "out" / "preprocessor_config.json"))
  assert (pre["patch_size"], pre["merge_size"], pre["temporal_patch_size"]) == (16, 2, 1)
  assert (pre["min_pixels"], pre["max_pixels"]) == (3136, 4_000_000)
  assert pre["image_mean"] == [0.48145466, 0.4578275, 0.40821073]
  assert pre["image_std"] == [0.26862954, 0.26130258, 0.27577711]
  assert pre["do_resize"] and pre["do_normalize"] and pre["do_rescale"]
  template = open(tmp_path / "out" / "chat_template.jinja").read()
  assert "<|im_start|>" in template and "<|vision_start|><|image_pad|><|vision_end|>" in template
  tok_cfg = json.load(open(tmp_path / "out" / "tokenizer_config.json"))
  assert "chat_template" not in tok_cfg and tok_cfg["eos_token"] == "<|im_end|>"
  added = json.load(open(tmp_path / "out" / "added_tokens.json"))
  assert added["<|image_pad|>"] == 151655 and added["<|vision_start|>"] == 151652
  index = json.load(open(tmp_path / "out" / st.INDEX_FILE))
  assert set(index["weight_map"]) == set(arrays)
  assert any(n.startswith("model.visual.") for n in index["weight_map"])
  # bf16 in, fp32 params, bf16 out: bit-exact; reload gives identical params.
  assert _tensor_bytes(tmp_path / "src") == _tensor_bytes(tmp_path / "out")
  _, again = hf.load_hf(str(tmp_path / "out"))
  a = hf.flat_params(nnx.state(model, nnx.Param))
  b = hf.flat_params(nnx.state(again, nnx.Param))
  assert set(a) == set(b)
  for p in a:
    assert np.asarray(a[p][1]).tobytes() == np.asarray(b[p][1]).tobytes(), p


def test_python_api_mage_vl_with_an_image(tmp_path):
  """api smoke on Mage-VL: one <|image_pad|> expands; the image changes the logits."""
  from mage_jax import api
  write_random_hf(tmp_path / "src", TINY_MAGE_VL, seed=4)
  policy = api.load(str(tmp_path / "src"))
  pad = TINY_MAGE_VL.image_token_id
  # Tiny vocab (64): the image pad id is out of range for text embeddings, but every
  # pad slot is replaced by an image feature before the LM sees it.
  prompt = np.array([3, 9, pad, 7, 11], np.int32)
  rng = np.random.default_rng(0)
  img_a = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)  # 4x6 patches -> 6 tokens
  img_b = 255 - img_a
  la, lb = policy.logits(prompt, images=[img_a]), policy.logits(prompt, images=[img_b])
  assert la.shape == (len(prompt) - 1 + 6, 64) and np.isfinite(la).all()
  assert np.abs(la[:2] - lb[:2]).max() == 0          # causal: text before the image unchanged
  assert np.abs(la[-1] - lb[-1]).max() > 1e-4         # after the image it depends on it
  with pytest.raises(ValueError, match="image_pad"):
    policy.logits(np.array([3, pad, pad, 4], np.int32), images=[img_a])
  out = policy.generate(prompt, images=[img_a], max_new_tokens=3)
  assert out.tokens.shape == (3,)
  assert out.tokens[0] == int(np.argmax(la[-1]))      # greedy first token = forward's argmax
  policy.save(str(tmp_path / "out"), dtype="float32")
  assert _tensor_bytes(tmp_path / "src") == _tensor_bytes(tmp_path / "out")


def test_sharded_import_reads_only_each_devices_rows(tmp_path, monkeypatch):
  """Where the sharding splits the HF tensor's dim 0 (e.g. o_proj/down_proj outputs on
  fsdp=8), each device's callback reads only its rows; other tensors are read whole."""
  write_random_hf(tmp_path, SHARD_QWEN)
  reads = []
  real_read = st.SafetensorsReader.read

  def spy(self, name, rows=None):
    out = real_read(self, name, rows)
    reads.append((name, out.shape[0] if out.ndim else 0, self.shape(name)[0] if out.ndim else 0))
    return out

  monkeypatch.setattr(st.SafetensorsReader, "read", spy)
  mesh = sharding.make_mesh(dict(fsdp=8))
  _, (_, state) = hf.load_hf(str(tmp_path), mesh=mesh, return_state=True)
  flat = {names_lib.path_str(p): v.get_value() for p, v in nnx.to_flat_state(state)}
  by_name = {s.hf_name: s for s in names_lib.tensor_specs(SHARD_QWEN)}
  partial = set()
  for name, got_rows, total_rows in reads:
    arr = flat[by_name[name].path]
    rows_dim = 0 if by_name[name].transform == "none" else arr.ndim - 1
    split = arr.sharding.shard_shape(arr.shape)[rows_dim] < arr.shape[rows_dim]
    if split:
      assert got_rows < total_rows, (name, got_rows, total_rows)
      partial.add(name)
    else:
      assert got_rows == total_rows, name
  assert len(partial) >= 2, partial  # the rules do split some HF dim-0 axes on this mesh
