#!/usr/bin/env bash
# The learning proof on its two terminal templates only (count_lines, make_file): issue 36, session 21
# (docs/results.md "Issue 36, session 21"). The same stages and code as `configs/proof.py`, through
# launch.curriculum, with stage overrides:
#   data      the proof's data stage without the vision stage's click screens (train_screens=0)
#   base      the pretrained base (cached under workdirs/cache/proof_base by config + code)
#   sft       from the base on the compact vocabulary, on the teacher's terminal episodes only
#             (split in two halves, the teacher and grounding sources of the SFT config: one file
#             given twice would fail on duplicate episode ids), $SFT_STEPS steps
#   eval_sft  the 120 held-out terminal instances (a suite of links to the held-out split's
#             count_lines and make_file packages), T=1
#   rl        the proof config's RL (configs/proof.py: GRPO + entropy term, terminal tasks, 8 x 8
#             episodes an update) on the data stage's RL suite; RL_EXTRA appends overrides
#   eval_rl   the same 120 held-out instances, T=1
# Then the paired SFT-vs-RL test (exact McNemar) on the 120 instances.
#
#   WORKDIR=$PWD/workdirs/term_s0 SFT_STEPS=250 bash experiments/terminal_proof.sh
#
# Variables: WORKDIR (absolute; required), SEED (0), SFT_STEPS (800), RL_UPDATES (16), RL_LR (3e-4),
# RL_EXTRA (more rl-stage overrides, ';'-separated), DATA_FROM (a finished run's workdir whose data
# and base stages to reuse, linked; "" builds them). Session 21 ran it with RL_LR=1e-4, 20 updates of
# 4 x 8 episodes and no entropy term (the proof config's RL then).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${WORKDIR:?set WORKDIR to an absolute directory}"
SEED=${SEED:-0}; SFT_STEPS=${SFT_STEPS:-800}; RL_UPDATES=${RL_UPDATES:-16}; RL_LR=${RL_LR:-3e-4}
RL_EXTRA=${RL_EXTRA:+;$RL_EXTRA}
DATA_FROM=${DATA_FROM:-}
PY=${PY:-.venv/bin/python}
export PYTHONUNBUFFERED=1
case "$WORKDIR" in /*) ;; *) echo "WORKDIR must be absolute (docs/results.md)"; exit 2;; esac
mkdir -p "$WORKDIR"
if [ -n "$DATA_FROM" ]; then
  ln -sfn "$DATA_FROM/data" "$WORKDIR/data"
  ln -sfn "$DATA_FROM/base" "$WORKDIR/base"
fi
D=$WORKDIR/data
CUR=("$PY" -u -m launch.curriculum --config=configs/proof.py "--workdir=$WORKDIR" --config.shared_dir=
     "--config.seed=$SEED" --config.stages.vision.enabled=False --config.stages.eval_init.enabled=False
     --config.stages.results.enabled=False
     "--config.stages.data.overrides=vision.train_screens=0;vision.heldout_screens=0")
only() {  # enable the named stages, disable the rest of the six
  for s in data base sft eval_sft rl eval_rl; do
    case " $* " in *" $s "*) echo "--config.stages.$s.enabled=True";; *) echo "--config.stages.$s.enabled=False";; esac
  done
}

# 1. data and base (skipped when complete or linked)
if [ -z "$DATA_FROM" ]; then
  "${CUR[@]}" $(only data base)
fi

# 2. the terminal episodes in three parts (the SFT config's gui, terminal and grounding sources: the same
#    distribution in each, so their weights only interleave them); the held-out terminal suite
"$PY" experiments/split_parts.py "$D/teacher/terminal.jsonl" "$D/teacher/term_a.jsonl" "$D/teacher/term_b.jsonl" \
  "$D/teacher/term_c.jsonl"
"$PY" - "$D" <<'EOF'
import os, sys
from mage_jax.tasks import proof_family as pf
d = sys.argv[1]
src, dst = f"{d}/heldout_suite", f"{d}/heldout_term"
os.makedirs(dst, exist_ok=True)
kept = [e for e in sorted(os.listdir(src))
        if e.startswith("proof_") and pf.TEMPLATES[pf.template_of(e)] == "terminal"]
for e in kept:
  if not os.path.lexists(f"{dst}/{e}"):
    os.symlink(f"{src}/{e}", f"{dst}/{e}")
print(f"held-out terminal instances {len(kept)}")
EOF

# 3. SFT -> eval -> RL -> eval
C="model.compact_vocab=$WORKDIR/base/vocab.json"
EVAL="proof.heldout_suite=$D/heldout_term;proof.probe_episodes=$D/teacher_heldout/terminal.jsonl;proof.modes=t1"
"${CUR[@]}" $(only sft eval_sft rl eval_rl) \
  "--config.stages.sft.overrides=data.sources.gui.paths=$D/teacher/term_a.jsonl;data.sources.terminal.paths=$D/teacher/term_b.jsonl;data.sources.grounding.paths=$D/teacher/term_c.jsonl;eval.click_jsonl=;$C;init.from_dir=$WORKDIR/base/hf;train.total_steps=$SFT_STEPS" \
  "--config.stages.eval_sft.overrides=$EVAL" \
  "--config.stages.rl.overrides=rl.suite=$D/rl_suite;rl.kinds=terminal;rl.total_updates=$RL_UPDATES;optimizer.learning_rate=$RL_LR;$C$RL_EXTRA" \
  "--config.stages.eval_rl.overrides=$EVAL"

# 4. the paired test
"$PY" - "$WORKDIR" <<'EOF'
import json, sys
from mage_jax.runs import proof_steps
w = sys.argv[1]
rows = {s: json.load(open(f"{w}/{s}/episodes.json")) for s in ("eval_sft", "eval_rl")}
for s in rows:
  a = json.load(open(f"{w}/{s}/summary.json"))["summary"]["t1"]["all"]
  print(f"{s}: T=1 {a['solved']}/{a['episodes']} = {a['success']:.3f} "
        f"(95% CI {a['success_lo']:.3f}-{a['success_hi']:.3f}), calls per solved task "
        f"{a['calls_per_solved_task']:.2f}, output tokens per task {a['output_tokens_per_task']:.1f}")
p = proof_steps.paired(rows["eval_sft"], rows["eval_rl"], "t1", 10_000)
m = p["mcnemar"]
print(f"SFT -> RL: {m['only_b']} gained, {m['only_a']} lost, exact McNemar p = {m['p_value']:.4g}")
EOF
