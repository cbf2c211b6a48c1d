"""What every training entry point does after parsing its flags: run the job on the config,
turn a config error into a usage error, print the summary as JSON."""
from __future__ import annotations

import json
from typing import Any, Callable

from absl import app


def require_config(config: Any) -> Any:
  if config is None:
    raise app.UsageError("--config is required")
  return config


def run_and_print(job: Callable[[Any, str], dict], config: Any, workdir: str,
                  config_error: type[Exception]) -> None:
  try:
    summary = job(require_config(config), workdir)
  except config_error as e:
    raise app.UsageError(str(e)) from None
  print(json.dumps(summary, indent=1, default=str))
