"""Benchmark suite: timing harness, CPU and GPU suites (FLOPs: `mage_jax.train.flops`).

`cpu_suite` may import torch (through `torch_baseline`); `gpu_suite`, `preflight`
and `timing` import only jax, flax, optax, numpy and the standard library so the
GPU benchmark runs on a bare JAX+CUDA image.
"""
