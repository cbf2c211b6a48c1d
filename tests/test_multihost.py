"""Multi-host: 2 processes x 4 CPU devices (jax.distributed on loopback, gloo
collectives) train the same steps as 1 process x 8 devices; losses agree to 1e-6."""
import json
import os
import socket
import subprocess
import sys

import pytest

from mage_jax.train import distributed
from tests._multihost_steps import HELDOUT_SOURCES, SEQ, train_losses
from tests._train_helpers import write_bins

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r'''
import json, sys
pid, nproc, ndev, port, workdir, heldout = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                            sys.argv[4], sys.argv[5], sys.argv[6])
from mage_jax.train import distributed
distributed.initialize(coordinator=f"localhost:{port}", num_processes=nproc, process_id=pid,
                       cpu_devices=ndev)
from tests._multihost_steps import train_losses
print("LOSSES " + json.dumps(train_losses(workdir, heldout)), flush=True)
'''


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)
  return env


def _parse(out: str) -> dict:
  for line in out.splitlines():
    if line.startswith("LOSSES "):
      return json.loads(line[len("LOSSES "):])
  raise AssertionError(f"no LOSSES line in output:\n{out[-3000:]}")


@pytest.mark.slow
def test_two_processes_match_one_process(tmp_path):
  script = tmp_path / "worker.py"
  script.write_text(WORKER)
  heldout = tmp_path / "heldout"
  for seed, (name, n) in enumerate(HELDOUT_SOURCES.items()):
    write_bins(str(heldout / name), n=n, seq_len=SEQ, seed=seed, train_from=0.3)
  port = str(_free_port())
  procs = [subprocess.Popen([sys.executable, str(script), str(i), "2", "4", port,
                             str(tmp_path / "multi"), str(heldout)], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  try:
    # The reference, 1 process x 8 devices, is this pytest process (conftest: 8 CPU
    # devices), run while the two workers start: one process fewer to launch.
    ref = train_losses(str(tmp_path / "single"), str(heldout))
  finally:
    outs = [p.communicate(timeout=400) for p in procs]
  assert ref["devices"] == 8 and ref["process_count"] == 1
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  for out, _ in outs:
    got = _parse(out)
    assert got["process_count"] == 2 and got["devices"] == 8
    assert got["restored_step"] == ref["restored_step"] == len(ref["losses"])  # checksums verified
    for a, b in zip(got["losses"], ref["losses"]):
      assert abs(a - b) <= 1e-6 * abs(b), (got["losses"], ref["losses"])
    # Held-out eval: each process reads its share of the bins; every bin counted once.
    assert set(got["heldout"]) == set(ref["heldout"]), (got["heldout"], ref["heldout"])
    for name, n in HELDOUT_SOURCES.items():
      assert got["heldout"][f"heldout_bins/{name}"] == ref["heldout"][f"heldout_bins/{name}"] == n
      for k in (f"heldout_loss/{name}", f"heldout_accuracy/{name}"):
        assert abs(got["heldout"][k] - ref["heldout"][k]) <= 1e-5 * abs(ref["heldout"][k]) + 1e-7, k
  assert ref["losses"][2] < ref["losses"][0]


def test_settings_from_slurm_and_flags():
  env = {"SLURM_NTASKS": "3", "SLURM_PROCID": "2", "SLURM_JOB_NODELIST": "gpu[07-09]",
         "MAGE_COORDINATOR_PORT": "4242"}
  s = distributed.settings(env=env)
  assert s == {"coordinator_address": "gpu07:4242", "num_processes": 3, "process_id": 2}
  assert distributed.settings(env={}) is None
  assert distributed.settings("h:1", 2, 1, env={}) == {
      "coordinator_address": "h:1", "num_processes": 2, "process_id": 1}
  with pytest.raises(ValueError, match="--process_id"):
    distributed.settings("h:1", 2, None, env={})
