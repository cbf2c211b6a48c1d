"""MFU bookkeeping: the executed-FLOPs count leaves out the embedding lookup and norms, and the
logger's three MFU figures are the interval's FLOPs over time × peak."""
import json

import numpy as np

from configs import models
from mage_jax.train import flops, metrics


def test_executed_flops_exclude_the_embedding_lookup():
  text = models.build_model_config(models.get_config("mage_vl_tiny")).text
  segs = np.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
  f = flops.batch_flops(text, {"segment_ids": segs})
  d, v, layers = text.hidden_size, text.vocab_size, text.num_hidden_layers
  # Hand count of the matmul weights: q,k,v,o + gate,up,down per layer, and the untied head.
  qkvo = d * text.num_attention_heads * text.head_dim * 2 + d * text.num_key_value_heads * text.head_dim * 2
  matmul = layers * (qkvo + 3 * d * text.intermediate_size) + v * d
  norms = layers * (2 * d + 2 * text.head_dim) + d
  want = 6.0 * matmul * 9 + flops.attention_flops(text, [3, 2, 4])
  np.testing.assert_allclose(f["flops_model"], want)
  # The paper's 6N counts the lookup and the norms; neither is a matmul.
  np.testing.assert_allclose(f["flops_total"] - f["flops_model"], 6.0 * (v * d + norms) * 9)


def test_logger_mfu_figures(tmp_path):
  log = metrics.Logger(str(tmp_path), total_steps=2, every_steps=2, peak_tflops=1.0,
                       num_devices=2, tensorboard=False)
  f = {"flops_6nd": 6e12, "flops_total": 9e12, "flops_model": 3e12, "tokens": 100.0}
  assert log.step(1, {"loss": np.float32(2.0)}, f) is None
  s = log.step(2, {"loss": np.float32(1.0)}, f)
  log.close()
  assert s["loss"] == 1.5
  np.testing.assert_allclose([s["mfu_total"] / s["mfu_6n"], s["mfu_model"] / s["mfu_6n"]], [1.5, 0.5])
  # the interval's seconds implied by MFU(6N) (the peak: 1 TFLOP/s set, raised to the executed rate)
  assert s["peak_tflops"] >= 1.0 and s["mfu_model"] <= 1.0
  elapsed = 12e12 / (s["mfu_6n"] * s["peak_tflops"] * 2e12)
  np.testing.assert_allclose(s["tokens_per_s"], 200 / elapsed, rtol=1e-6)
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in rows if "loss" in r and "train/loss" not in r] == [1, 2]
  assert any("train/mfu_model" in r for r in rows)


def test_mfu_never_over_100_percent_for_a_tiny_step(tmp_path, monkeypatch, capsys):
  """The measured peak (large matmul, best of runs, cached per machine) with a tiny jitted step
  whose FLOPs are counted exactly: MFU <= 100%, also when the cached peak is far too low."""
  import re

  import jax
  import jax.numpy as jnp
  monkeypatch.setenv("MAGE_JAX_CACHE", str(tmp_path / "cache"))
  peak, src = metrics.device_peak_tflops(0.0)
  assert peak > 0 and "measured" in src and "cached" not in src
  # the second call reads the cache, without measuring again
  monkeypatch.setattr(metrics, "measure_matmul_tflops", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
  assert metrics.device_peak_tflops(0.0) == (peak, src.replace(")", ", cached)"))
  n = 256
  step = jax.jit(lambda a: jnp.tanh(a @ a) @ a)
  a = jnp.ones((n, n), jnp.float32) / n
  step(a).block_until_ready()
  f = {"flops_model": 4.0 * n ** 3, "flops_total": 40.0 * n ** 3, "flops_6nd": 400.0 * n ** 3, "tokens": n}
  for p in (peak, 1e-6):  # the measured peak, and one far below what the step reaches
    (tmp_path / str(p)).mkdir()
    log = metrics.Logger(str(tmp_path / str(p)), total_steps=20, every_steps=20, peak_tflops=p,
                         num_devices=1, tensorboard=False)
    for i in range(1, 21):
      step(a).block_until_ready()
      s = log.step(i, {"loss": np.float32(1.0)}, f)
    log.close()
    assert 0 < s["mfu_model"] <= 1.0, s
    printed = [float(x) for x in re.findall(r"([0-9.]+)%", capsys.readouterr().out)]
    assert printed and max(printed) <= 100.0, printed
  assert log.peak_raised and s["peak_tflops"] > 1e-6
