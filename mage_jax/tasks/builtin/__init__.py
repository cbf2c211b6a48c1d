"""The built-in task suite (terminal-only, GUI-only and hybrid); see suite.py."""
from mage_jax.tasks.builtin.suite import builtin_packages, builtin_task_dicts  # noqa: F401
