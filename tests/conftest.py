"""Test setup: 8 fake CPU devices before JAX starts; absl flags marked parsed."""
import atexit
import os
import shutil
import sys
import tempfile

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for the session, this process and every subprocess it starts:
# many tests build the same tiny models' steps afresh (new jit objects, new processes), and XLA
# compiles were half the proof smoke's wall time (py-spy, 2026-12-04: 383 s of 755 s under load).
# Fresh per session, so a test's timing never rests on an earlier run's leftovers.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _jit_cache = tempfile.mkdtemp(prefix="mage_jax_tests_jit_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _jit_cache
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
  atexit.register(shutil.rmtree, _jit_cache, ignore_errors=True)

from absl import flags  # noqa: E402

# Grain worker processes and absl-based code read FLAGS; pytest never parses them.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def forget_grown_skills():
  """Skills a Forge round grows (child skills from the student's failures, LLM-proposed siblings:
  forge/rounds.py registers both and lists them in SIBLINGS) stay in the process's registry; later
  tests must not see them. The full suite once failed test_taxonomy_file_matches_the_registry_exactly
  this way: which skills a round grows depends on its student's episodes, so it happened under load
  and never alone. Skills a test module registers itself (tests/_forge_skills.py) are kept."""
  skill = sys.modules.get("mage_jax.forge.skill")
  before = set(skill.REGISTRY) if skill is not None else set()
  yield
  skill, rounds = sys.modules.get("mage_jax.forge.skill"), sys.modules.get("mage_jax.forge.rounds")
  if skill is None or rounds is None:
    return
  for spec in rounds.SIBLINGS:
    if spec["id"] not in before:
      skill.REGISTRY.pop(spec["id"], None)
  rounds.SIBLINGS[:] = [s for s in rounds.SIBLINGS if s["id"] in before]
