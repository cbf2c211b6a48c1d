"""What every training entry point does around its job: parse the flags with a bad
`--config.<field>` reported in one line, run the job on the config, report a config error
(exit 2) or a diverged run (exit 1) in one line, print the summary."""
from __future__ import annotations

import json
import sys
from typing import Any, Callable

from absl import app

USAGE_EXIT = 2
FAILED_RUN_EXIT = 1


def parse_flags(argv: list[str]) -> list[str]:
  """absl's parsing (pass as app.run(main, flags_parser=shell.parse_flags)), except that a
  `--config.<field>` naming no field of the config exits with one line naming it rather
  than ml_collections' traceback (an unknown *nested* field is already absl's one line)."""
  try:
    return app.parse_flags_with_usage(argv)
  except (AttributeError, KeyError) as e:
    field = str(e).strip("\"'")
    culprit = next((a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")
                    and field in a.split("=", 1)[0].split(".")), "--config.<field>")
    sys.stderr.write(f"FATAL Flags parsing error: {culprit}: the config has no field {field!r}\n")
    sys.exit(USAGE_EXIT)


def require_config(config: Any) -> Any:
  if config is None:
    raise app.UsageError("--config is required")
  return config


def run_job(job: Callable[[Any, str], Any], config: Any, workdir: str,
            config_error: type[Exception]) -> Any:
  """job(config, workdir). A config error is one line on stderr and exit status 2 (absl's
  UsageError would print the module's whole help first); a run that diverged
  (FloatingPointError: non-finite losses) is one line and exit status 1."""
  try:
    return job(require_config(config), workdir)
  except config_error as e:
    print(f"FATAL usage error: {e}", file=sys.stderr, flush=True)
    sys.exit(USAGE_EXIT)
  except FloatingPointError as e:
    print(f"FAILED: {e}", file=sys.stderr, flush=True)
    sys.exit(FAILED_RUN_EXIT)


def run_and_print(job: Callable[[Any, str], dict], config: Any, workdir: str,
                  config_error: type[Exception]) -> None:
  print(json.dumps(run_job(job, config, workdir, config_error), indent=1, default=str))

