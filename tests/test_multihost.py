"""Multi-host: 2 processes x 4 CPU devices (jax.distributed on loopback, gloo
collectives) train the same steps as 1 process x 8 devices; losses agree to 1e-6."""
import json
import os
import socket
import subprocess
import sys

import pytest

from mage_jax.train import distributed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r'''
import json, sys
import numpy as np
pid, nproc, ndev, port, workdir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
from mage_jax.train import distributed
distributed.initialize(coordinator=f"localhost:{port}" if nproc > 1 else None,
                       num_processes=nproc if nproc > 1 else None,
                       process_id=pid if nproc > 1 else None, cpu_devices=ndev)
import jax
from configs import stage2_gui_sft
from mage_jax.train import loop, step as step_lib
c = stage2_gui_sft.get_config("tiny")
c.model.arch = "qwen3"
c.mesh.data, c.mesh.fsdp = 2, 4
c.train.total_steps = 3
c.data.batch_size = 8
c.step.loss_chunk_size = 32
t = loop.build(c, f"{workdir}/p{pid}", prepare_data=False)
state = loop.initial_state(t)
SEQ = 64

def global_batch(step):
  rng = np.random.default_rng(step)
  b = {"tokens": rng.integers(0, 3000, (8, SEQ)).astype(np.int32),
       "positions": np.tile(np.arange(SEQ, dtype=np.int32), (8, 1)),
       "segment_ids": np.ones((8, SEQ), np.int32),
       "loss_mask": (rng.random((8, SEQ)) < 0.5).astype(np.float32)}
  b["targets"] = np.roll(b["tokens"], -1, axis=1)
  return b

like = global_batch(0)
shardings = step_lib.batch_shardings(t.mesh, like)
fn = step_lib.jit_train_step(t.graphdef, t.rest, t.tx, step_lib.StepConfig(loss_chunk_size=32),
                             t.mesh, t.shardings, like)
losses = []
for s in range(3):
  gb = global_batch(s)
  arrays = {}
  for k, v in gb.items():
    sh = shardings[k]
    # This process's rows: the union of its devices' slices of the batch axis.
    rows = sorted({i for idx in sh.addressable_devices_indices_map(v.shape).values()
                   for i in range(*idx[0].indices(v.shape[0]))})
    arrays[k] = jax.make_array_from_process_local_data(sh, v[rows], v.shape)
  with jax.set_mesh(t.mesh):
    state, m = fn(state, arrays)
  losses.append(float(np.asarray(jax.device_get(m["loss"]))))
print("LOSSES " + json.dumps({"process_count": jax.process_count(),
                              "devices": jax.device_count(), "losses": losses}), flush=True)
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
  single = subprocess.run([sys.executable, str(script), "0", "1", "8", "0", str(tmp_path / "single")],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=400)
  assert single.returncode == 0, single.stderr[-3000:]
  ref = _parse(single.stdout)
  assert ref["devices"] == 8 and ref["process_count"] == 1

  port = str(_free_port())
  procs = [subprocess.Popen([sys.executable, str(script), str(i), "2", "4", port,
                             str(tmp_path / "multi")], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  outs = [p.communicate(timeout=400) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  for out, _ in outs:
    got = _parse(out)
    assert got["process_count"] == 2 and got["devices"] == 8
    for a, b in zip(got["losses"], ref["losses"]):
      assert abs(a - b) <= 1e-6 * abs(b), (got["losses"], ref["losses"])
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
