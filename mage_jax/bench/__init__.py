"""Benchmark suite: timing harness, FLOP accounting, CPU and GPU suites.

`cpu_suite` may import torch (through `torch_baseline`); `gpu_suite`, `timing`
and `flops` import only jax, flax, optax, numpy and the standard library so the
GPU benchmark runs on a bare JAX+CUDA image.
"""
