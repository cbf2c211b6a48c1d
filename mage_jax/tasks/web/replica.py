"""Self-hosted web replicas (mage_jax/tasks/web/server.py) for one episode, out of the workload's reach.

Where things run (docs/web_replicas.md):
- The server is a host process (`/usr/bin/python3 -I`, standard library only) that joins ONLY the
  episode sandbox's network namespace (`nsenter --net`), then a pid namespace of its own with its
  own /proc, and drops to the sandbox's own service uid (root mode: one uid per live sandbox,
  `Sandbox.service_uid`; user mode keeps the harness's unprivileged uid, every capability dropped).
  It binds 127.0.0.1:<port> inside that namespace, so the episode's browser and shell reach it over
  HTTP and nothing else does.
- It sees the host's files but no other process: the workload cannot see, signal or trace it, it
  can signal or trace no other episode's processes nor the harness, and its database is a file in
  a host temp directory (mode 0700, owned by the service uid) that has no path inside the sandbox. Editing the database directly is therefore not a way to solve a
  web task; only the app's HTTP interface changes it.
- Every episode gets a fresh copy of a template database built once per process from the app's
  schema + seed SQL: resets leave nothing behind. The server and the copy go when the sandbox closes.
Checkers open the copy read-only from the harness (`query`).
"""
from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import os
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import weakref

from mage_jax.machine import sandbox as sandbox_lib

SERVER_SOURCE = os.path.join(os.path.dirname(__file__), "server.py")
PORTS = {"shop": 8080, "forum": 8081}
SYSTEM_PYTHON = "/usr/bin/python3"   # readable by the service uid (the venv's interpreter may not be)
START_TIMEOUT = 20.0


class ReplicaError(RuntimeError):
  pass


@dataclasses.dataclass
class Replica:
  app: str
  port: int
  db: str
  proc: subprocess.Popen

  @property
  def url(self) -> str:
    return f"http://127.0.0.1:{self.port}/"


_LOCK = threading.Lock()
_TEMPLATES: dict[str, str] = {}
_REPLICAS: "weakref.WeakKeyDictionary[object, dict[str, Replica]]" = weakref.WeakKeyDictionary()


def _template(app: str) -> str:
  """The app's pristine database, built once per process (schema + seed rows of server.py)."""
  with _LOCK:
    if app not in _TEMPLATES:
      spec = importlib.util.spec_from_file_location("mage_web_server", SERVER_SOURCE)
      mod = importlib.util.module_from_spec(spec)
      spec.loader.exec_module(mod)
      d = tempfile.mkdtemp(prefix="mage_web_template_")
      atexit.register(shutil.rmtree, d, True)
      path = os.path.join(d, f"{app}.sqlite")
      mod.create_db(app, path)
      _TEMPLATES[app] = path
    return _TEMPLATES[app]


def _server_argv(sb, app: str, db: str, port: int) -> list[str]:
  """The sandbox's network namespace only, a pid and mount namespace of the server's own (its
  /proc shows nothing else), then the sandbox's service uid (root mode); see
  `Sandbox.service_argv_prefix`."""
  with open(SERVER_SOURCE) as f:
    source = f.read()
  return sb.service_argv_prefix(["net"], mount_proc=True) + [SYSTEM_PYTHON, "-I", "-c", source, app, db, str(port)]


def start(sb, app: str, port: int | None = None) -> Replica:
  """Starts `app` on a fresh database copy for sandbox `sb`; returns once it accepts requests."""
  if app not in PORTS:
    raise ReplicaError(f"unknown web app {app!r}; expected one of {sorted(PORTS)}")
  if not os.access(SYSTEM_PYTHON, os.X_OK):
    raise ReplicaError(f"{SYSTEM_PYTHON} is missing: the web replicas' server runs on the system Python")
  port = port or PORTS[app]
  d = tempfile.mkdtemp(prefix=f"mage_web_{app}_")
  db = os.path.join(d, f"{app}.sqlite")
  shutil.copyfile(_template(app), db)
  if sb.mode == "root":
    for p in (d, db):
      os.chown(p, sb.service_uid, sb.service_uid)
  os.chmod(d, 0o700)
  os.chmod(db, 0o600)
  # forked from this thread, not the sandbox's spawner: on cgroup v1 that thread sits in the
  # sandbox's cgroup, and the server is no part of the workload
  # only the namespace fds nsenter needs: not the sandbox's root fd or its other namespaces
  fds = (sb._ns["net"],) + ((sb._outer_userns,) if sb._outer_userns is not None else ())
  proc = subprocess.Popen(_server_argv(sb, app, db, port), pass_fds=fds, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=sandbox_lib.HARNESS_ENV,
                          start_new_session=True)
  sb._services.append(proc)           # killed by the sandbox's close, like Xvfb
  sandbox_lib.wait_forked(proc)       # its parent-death signal armed
  sb.on_close.append(lambda: shutil.rmtree(d, ignore_errors=True))
  timer = threading.Timer(START_TIMEOUT, proc.kill)
  timer.start()
  try:
    line = proc.stdout.readline()
  finally:
    timer.cancel()
  if line.strip() != b"ready":
    proc.kill()
    err = proc.stderr.read().decode(errors="replace")[-800:]
    raise ReplicaError(f"web app {app!r} did not start: {err.strip() or 'no output'}")
  rep = Replica(app, port, db, proc)
  with _LOCK:
    _REPLICAS.setdefault(sb, {})[app] = rep
  return rep


def replica_of(sb, app: str) -> Replica | None:
  with _LOCK:
    return _REPLICAS.get(sb, {}).get(app)


def query(sb, app: str, sql: str, params: tuple = ()) -> list[list]:
  """Rows of a read-only query on the episode's database (the harness reads it, never the workload)."""
  rep = replica_of(sb, app)
  if rep is None:
    raise ReplicaError(f"no {app!r} replica runs in this episode (add a web_replica setup step)")
  conn = sqlite3.connect(f"file:{rep.db}?mode=ro", uri=True, timeout=10)
  try:
    return [list(r) for r in conn.execute(sql, params).fetchall()]
  finally:
    conn.close()
