"""Task-package types for the web replicas (registered with tasks/preparers.py and tasks/checkers.py).

Preparers:
  web_replica {app: "shop" | "forum"}          the app's server on a fresh database (web/replica.py)
  browser     {url, title?, kiosk?: true}      Chromium on `url` in the episode's desktop (web/browser.py);
                                               waits for a window whose title contains `title`
Checker:
  web_db      {app, query, rows}               the read-only SQL query's rows equal `rows` exactly
                                               (order included: say ORDER BY); use `all` to combine
"""
from __future__ import annotations

from typing import Any

from mage_jax.tasks import checkers, preparers
from mage_jax.tasks.web import browser, replica


def _need(spec: dict[str, Any], where: str, kind: str, **fields: type) -> None:
  for key, typ in fields.items():
    if not isinstance(spec.get(key), typ):
      raise ValueError(f"{where}: {kind} needs {key!r} ({typ.__name__})")


def _validate_replica(spec, where):
  _need(spec, where, "web_replica", app=str)
  if spec["app"] not in replica.PORTS:
    raise ValueError(f"{where}: web_replica app must be one of {sorted(replica.PORTS)}, got {spec['app']!r}")


def _run_replica(target, spec, root):
  replica.start(target.sandbox, spec["app"])


def _validate_browser(spec, where):
  _need(spec, where, "browser", url=str)


def _run_browser(target, spec, root):
  if getattr(target, "desktop", None) is None:
    raise preparers.SetupError("the browser needs a desktop; the task kind is 'terminal'")
  browser.launch(target.desktop, spec["url"], kiosk=spec.get("kiosk", True), title=spec.get("title"))


def _validate_web_db(spec, where):
  _need(spec, where, "web_db", app=str, query=str, rows=list)
  if not spec["query"].lstrip().lower().startswith("select"):
    raise ValueError(f"{where}: web_db query must be a SELECT")


def _score_web_db(ctx, spec) -> float:
  sb = getattr(ctx, "sandbox", None)
  if sb is None:
    return 0.0
  return float(replica.query(sb, spec["app"], spec["query"]) == spec["rows"])


preparers.register("web_replica", preparers.Extension(_run_replica, _validate_replica))
preparers.register("browser", preparers.Extension(_run_browser, _validate_browser))
checkers.register("web_db", checkers.Extension(_score_web_db, _validate_web_db))
