"""HF safetensors <-> nnx params (Qwen3, Mage-VL), and Orbax conversion.

    from mage_jax.weights import load_hf, save_hf
    cfg, model = load_hf("/ckpt/Mage-VL", mesh=mesh)      # streamed into the mesh's shardings
    save_hf(model, cfg, "/ckpt/export", dtype="bfloat16")  # sharded + index over 5 GB

Modules: `names` (path <-> HF name tables), `safetensors_io` (streaming
reader, sharding writer), `hf` (load/save), `hf_layout` (configs, tokenizer,
processor files of an export), `orbax_io` (HF dir <-> Orbax checkpoint).
"""
from mage_jax.weights.hf import CheckpointMismatchError, load_hf, read_config, save_hf

__all__ = ["CheckpointMismatchError", "load_hf", "read_config", "save_hf"]
