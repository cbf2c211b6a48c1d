"""Orchestration on top of the library: the curriculum and the learning proof, suite runs,
evaluation drivers and sweeps. Nothing below this floor imports it."""
