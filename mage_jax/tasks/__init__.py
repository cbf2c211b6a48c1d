"""Verifiable task packages: format, loader, preparers, checkers and gates (docs/tasks.md)."""
