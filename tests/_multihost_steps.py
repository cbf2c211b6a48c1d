"""The tiny training steps of tests/test_multihost.py, run by every process
(after jax.distributed is initialised, or in the pytest process itself for the
1-process × 8-device reference)."""
import numpy as np

SEQ = 64
STEPS = 3
# Held-out bins per source: odd counts, so the two processes hold unequal shares
# (3 + 2 and 2 + 1 bins) and the short one pads and waits on the allgather.
HELDOUT_SOURCES = {"alpha": 5, "beta": 3}


def global_batch(step: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(step)
  b = {"tokens": rng.integers(0, 3000, (8, SEQ)).astype(np.int32),
       "positions": np.tile(np.arange(SEQ, dtype=np.int32), (8, 1)),
       "segment_ids": np.ones((8, SEQ), np.int32),
       "loss_mask": (rng.random((8, SEQ)) < 0.5).astype(np.float32)}
  b["targets"] = np.roll(b["tokens"], -1, axis=1)
  return b


def train_losses(workdir: str, heldout_dir: str = "") -> dict:
  """{process_count, devices, losses[, heldout]} of STEPS steps on a data 2 × fsdp 4 mesh,
  then (with `heldout_dir`) the held-out loss of every source folder in it."""
  import jax
  from configs import common, stage2_gui_sft
  from mage_jax.train import evaluation, loop, step as step_lib
  c = stage2_gui_sft.get_config("tiny")
  c.model.arch = "qwen3"
  c.model.text.vocab_size = 32768  # token ids < 3000 and no pads: a smaller head is enough
  c.optimizer.warmup_steps = 0  # full learning rate from step 1, so 3 steps show the loss falling
  c.mesh.data, c.mesh.fsdp = 2, 4
  c.train.total_steps = STEPS
  c.data.batch_size = 8
  c.step.loss_chunk_size = 32
  if heldout_dir:
    common.set_sources(c, {name: ("unused.jsonl", 1.0, 2) for name in HELDOUT_SOURCES})
    c.eval.heldout_dir = heldout_dir
    c.eval.num_batches = 2
  t = loop.build(c, workdir, prepare_data=False)
  state = loop.initial_state(t)
  like = global_batch(0)
  shardings = step_lib.batch_shardings(t.mesh, like)
  fn = step_lib.jit_train_step(t.graphdef, t.rest, t.tx, step_lib.StepConfig(loss_chunk_size=32),
                               t.mesh, t.shardings, like)
  losses = []
  for s in range(STEPS):
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
  out = {"process_count": jax.process_count(), "devices": jax.device_count(), "losses": losses}
  # Every process writes its own shards; the per-array checksums (of the global arrays) must
  # still verify, else the restore falls back past the only checkpoint and returns None.
  from mage_jax.train import checkpoint as ckpt_lib
  ck = ckpt_lib.Checkpointer(workdir, keep=1, async_save=False)
  ck.save(STEPS, state, None, t.meta)
  ck.wait()
  restored = ck.restore(t.abstract, t.meta)
  ck.close()
  out["restored_step"] = restored[2] if restored is not None else None
  if heldout_dir:
    out["heldout"] = evaluation.heldout_loss(t, state.params, c)
  return out
