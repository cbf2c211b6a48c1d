"""Stage 1 `init.from_dir` = an HF Qwen3 directory written by transformers
(tied embeddings): the Mage-VL language model equals the HF tensors, its
untied head is the embedding transposed, and the ViT stays freshly initialised."""
import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from configs import models, stage1_midtrain
from mage_jax.train import loop, run_setup
from mage_jax.train import state as state_lib


def _ours(hf_name: str) -> tuple[str, bool]:
  """HF Qwen3 tensor name -> (our Mage-VL param path, transpose?), from the ARCHITECTURE.md table."""
  name = hf_name[len("model."):]
  if name == "embed_tokens.weight":
    return "language_model/embed_tokens/embedding", False
  base = name[:-len(".weight")].replace(".", "/")
  if name.endswith("_proj.weight"):
    return f"language_model/{base}/kernel", True
  return f"language_model/{base}/scale", False  # norms


def test_params_from_tied_qwen3_hf_dir(tmp_path):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  text = models.get_config("mage_vl_tiny").text
  hf_cfg = transformers.Qwen3Config(
      vocab_size=text.vocab_size, hidden_size=text.hidden_size,
      intermediate_size=text.intermediate_size, num_hidden_layers=text.num_hidden_layers,
      num_attention_heads=text.num_attention_heads, num_key_value_heads=text.num_key_value_heads,
      head_dim=text.head_dim, rms_norm_eps=text.rms_norm_eps, tie_word_embeddings=True,
      max_position_embeddings=4096)
  torch.manual_seed(0)
  hf_model = transformers.Qwen3ForCausalLM(hf_cfg)
  with torch.no_grad():  # non-trivial norm scales, so a dropped or swapped norm shows
    for n, p in hf_model.named_parameters():
      if "norm" in n:
        p.copy_(torch.rand_like(p) + 0.5)
  hf_dir = tmp_path / "qwen3"
  hf_model.save_pretrained(str(hf_dir))
  hf = {}
  for f in hf_dir.glob("*.safetensors"):
    hf.update(load_file(str(f)))
  assert "lm_head.weight" not in hf  # tied: the head is not stored

  c = stage1_midtrain.get_config("tiny")
  c.data.batch_size = 8
  c.init.from_dir = str(hf_dir)
  t = loop.build(c, str(tmp_path / "w"), prepare_data=False)
  state = loop.initial_state(t)
  got = {k: np.asarray(v) for k, v in jax.device_get(state_lib.flat_paths(state.params)).items()}

  for name, w in hf.items():
    path, transpose = _ours(name)
    np.testing.assert_array_equal(got[path], w.T if transpose else w, err_msg=name)
  assert len([k for k in got if k.startswith("language_model/")]) == len(hf)
  np.testing.assert_array_equal(got["lm_head/kernel"], hf["model.embed_tokens.weight"].T)

  fresh, _ = state_lib.init_state(run_setup.model_factory(t.model_cfg), t.tx, c.seed, t.shardings)
  fresh_flat = jax.device_get(state_lib.flat_paths(fresh.params))
  visual = [k for k in got if k.startswith("visual/")]
  assert visual
  for k in visual:
    np.testing.assert_array_equal(got[k], fresh_flat[k], err_msg=k)
  assert int(state.step) == 0
