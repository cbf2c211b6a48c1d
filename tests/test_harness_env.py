"""A variant's terminal environment: its library tree is importable in the sandbox's shell (and
stays so after the shell restarts), read-only, and absent without the variant; the output cap and
the id come from the variant."""
from __future__ import annotations

from _agent_helpers import SMALL, needs_sandbox
from mage_jax.agent.episode import EpisodeConfig
from mage_jax.tasks.package import TaskPackage
from mage_jax.harness import load_variant
from mage_jax.harness.env import env_factory
from mage_jax.harness.variant import HarnessVariant

TASK = TaskPackage(id="lib_probe", instruction="probe", kind="terminal", checker={"type": "file_exists", "path": "x"})
PROBE = "python -c 'import harness_probe_lib as m; print(m.VALUE)'"


@needs_sandbox
def test_library_tree_is_bound_read_only_and_importable(tmp_path):
  lib = tmp_path / "site"
  lib.mkdir()
  lib.chmod(0o755)  # the sandbox user must read it (env.binds refuses a tree it could not)
  (lib / "harness_probe_lib.py").write_text("VALUE = 'from-the-variant-tree'\n")
  variant = HarnessVariant(libraries=(("probe", str(lib)),), max_output=300)
  env = env_factory(variant, SMALL)()
  plain = env_factory(None, SMALL)()
  try:
    env.reset(TASK)
    assert "from-the-variant-tree" in env.step("bash", {"command": PROBE}).text
    out = env.step("bash", {"command": "touch /opt/harness_lib_probe/x 2>&1; echo rc=$?"}).text
    assert "rc=1" in out  # read-only
    assert len(env.step("bash", {"command": "yes x | head -c 5000"}).text) < 600  # the variant's cap
    env.step("bash", {"command": "exit"})  # the shell dies and restarts: the exports come back
    assert "from-the-variant-tree" in env.step("bash", {"command": PROBE}).text
    plain.reset(TASK)
    assert "ModuleNotFoundError" in plain.step("bash", {"command": PROBE}).text
  finally:
    env.close()
    plain.close()


def test_configs_harness_variants_load_and_scaffold_applies():
  base, beta2 = load_variant("configs/harness.py:base"), load_variant("configs/harness.py:beta2")
  assert base.variant_id == HarnessVariant().variant_id  # the student's own harness
  assert beta2.extra_tools == ("ax_tree",) and beta2.variant_id != base.variant_id
  cfg = load_variant("configs/harness.py:tiny").episode_config(EpisodeConfig(max_steps=50))
  assert cfg.max_steps == 6 and cfg.harness.extra_tools == ("xdotool", "ax_tree")
