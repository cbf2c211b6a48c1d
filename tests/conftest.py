"""Test setup: 8 fake CPU devices before JAX starts; absl flags marked parsed."""
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import flags  # noqa: E402

# Grain worker processes and absl-based code read FLAGS; pytest never parses them.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
