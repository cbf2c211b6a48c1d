"""Why RL turns file_and_click's last call into newlines (issue 36, docs/results.md "Issue 36, session 42").

For a finished proof run's held-out teacher episodes (data/teacher_heldout) of one template, the policy
an evaluation stage served (<stage>/weights/v0) is read teacher-forced on each step's response: per step,
the entropy and the top probability at the first think word (the token after "<think>\\n"), the newline's
probability there, the teacher word's log-prob, and the call's highest-entropy token. After SFT, the
file_and_click call after the click opens its think with the file name, which the policy cannot recall
across the screenshot (a position with no mode); RL's entropy term (rl.entropy_coeff < 0) then has
nothing to sharpen but a newline.

  PYTHONPATH=. python experiments/think_entropy_probe.py /abs/workdirs/proof_s0 eval_sft,eval_rl
  PYTHONPATH=. python experiments/think_entropy_probe.py /abs/workdirs/proof_s0 eval_sft make_file
"""
import sys

import numpy as np

from configs import proof
from mage_jax import api
from mage_jax.agent.episode import EpisodeConfig, renderer_for
from mage_jax.data import trajectory
from mage_jax.data.tokenizer import load_tokenizer

W, STAGES = sys.argv[1], sys.argv[2].split(",")
TEMPLATE = sys.argv[3] if len(sys.argv) > 3 else "file_and_click"
FIRST_WORD = 2   # the response's labels start "<think>", "\n", then the first think word


def main() -> None:
  tok = load_tokenizer("")
  newline = tok.encode("\n")[0]
  episodes = [e for e in trajectory.read_episodes(f"{W}/data/teacher_heldout/episodes.jsonl")
              if f"proof_{TEMPLATE}_" in e.id]
  if not episodes:
    raise SystemExit(f"{W}/data/teacher_heldout/episodes.jsonl: no {TEMPLATE} episode")
  ep_cfg = proof.get_config("eval").episode   # the runner's context window (evaluation and RL)
  renderer = renderer_for(EpisodeConfig(**ep_cfg.to_dict()))
  steps = min(len(e.steps) for e in episodes)
  print(f"{len(episodes)} held-out teacher episodes of {TEMPLATE}, {steps} steps each")
  for stage in STAGES:
    policy = api.load(f"{W}/{stage}/weights/v0")
    for t in range(1, steps + 1):
      rows = []
      for e in episodes:
        s = renderer.render_step(e, t)
        tokens = np.asarray(s.tokens)
        idx = np.flatnonzero(np.asarray(s.loss_mask))
        logits = policy.logits(tokens, images=s.images)[idx - 1]
        logp = logits - logits.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        p = np.exp(logp)
        entropy = -(p * logp).sum(-1)
        k = FIRST_WORD
        rows.append((entropy[k], p[k].max(), p[k, newline], logp[k, tokens[idx[k]]], entropy.max()))
      h, top, nl, word, hmax = np.mean(rows, axis=0)
      print(f"{stage} step {t}: first think word entropy {h:.2f} nats, top prob {top:.3f}, "
            f"newline {nl:.3f}, teacher's word log-prob {word:.2f}; the call's highest entropy {hmax:.2f}",
            flush=True)


if __name__ == "__main__":
  main()
