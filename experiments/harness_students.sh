#!/usr/bin/env bash
# The recipe's student comparison (issue 31 item 3; the paper's beta1 37.6% vs beta2 25.1%): the same
# teacher collects the proof family's terminal train tasks under two harness variants, one student is
# trained on each variant's kept trajectories, and both students play the same 120 held-out terminal
# instances at T=1 (paired McNemar). docs/harness.md "The student comparison" has the measured run.
#
#   teacher   configs/evolve.py:scripted, harness/teacher.py's HarnessSensitiveTeacher, a STAND-IN: its
#             profile (which harness features cut its slips) decides how many of the tasks each
#             variant solves; its kept trajectories are the reference solution either way. What the
#             run measures for real is the student: the same SFT and evaluation as
#             experiments/terminal_proof.sh on each variant's trajectories. A real teacher is
#             configs/evolve.py:openai (--config.policy.base_url), not reachable here.
#   collect   launch.collect, the terminal train instances of the proof's data stage, one episode each
#   student   launch.curriculum's sft + eval_sft stages (configs/proof.py) from the pretrained base,
#             $SFT_STEPS steps on the kept trajectories (split in halves: the SFT config's two sources)
#
#   RUN=$PWD/workdirs/harness_students DATA_FROM=$PWD/workdirs/term_s0 bash experiments/harness_students.sh
#
# Variables: RUN (absolute; required), DATA_FROM (a finished experiments/terminal_proof.sh workdir:
# its data and base stages are reused; required), HARNESSES ("beta1 beta2", configs/harness.py args),
# SEED (0), SFT_STEPS (250), SLOTS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RUN:?set RUN to an absolute directory}"; : "${DATA_FROM:?set DATA_FROM to a terminal_proof.sh workdir}"
HARNESSES=${HARNESSES:-beta1 beta2}; SEED=${SEED:-0}; SFT_STEPS=${SFT_STEPS:-250}; SLOTS=${SLOTS:-2}
PY=${PY:-.venv/bin/python}
export PYTHONUNBUFFERED=1
case "$RUN" in /*) ;; *) echo "RUN must be absolute"; exit 2;; esac
D=$DATA_FROM/data
for f in "$D/train_suite" "$D/heldout_term" "$DATA_FROM/base/hf"; do
  [ -e "$f" ] || { echo "missing $f: run experiments/terminal_proof.sh with WORKDIR=$DATA_FROM first"; exit 2; }
done
mkdir -p "$RUN/train_term"
for p in "$D"/train_suite/proof_count_lines_train_* "$D"/train_suite/proof_make_file_train_*; do
  ln -sfn "$p" "$RUN/train_term/"
done

for H in $HARNESSES; do
  # 1. the teacher under harness H (resumes: collect_state.jsonl)
  "$PY" -m launch.collect --config=configs/evolve.py:scripted,collect "--config.harness=configs/harness.py:$H" \
    "--config.suite=$RUN/train_term" --config.repeats=1 "--config.slots=$SLOTS" \
    --config.env.width=640 --config.env.height=400 "--workdir=$RUN/collect_$H"
  # 2. its kept trajectories in three parts (the SFT config's gui, terminal and grounding sources)
  "$PY" experiments/split_parts.py "$RUN/collect_$H/trajectories.jsonl" \
    "$RUN/collect_$H/part_a.jsonl" "$RUN/collect_$H/part_b.jsonl" "$RUN/collect_$H/part_c.jsonl"
  # 3. a student on them, evaluated on the held-out terminal instances
  W=$RUN/student_$H
  mkdir -p "$W"; ln -sfn "$D" "$W/data"; ln -sfn "$DATA_FROM/base" "$W/base"
  S=()
  for s in data base vision eval_init rl eval_rl results; do S+=("--config.stages.$s.enabled=False"); done
  "$PY" -u -m launch.curriculum --config=configs/proof.py "--workdir=$W" --config.shared_dir= "--config.seed=$SEED" "${S[@]}" \
    "--config.stages.sft.overrides=data.sources.gui.paths=$RUN/collect_$H/part_a.jsonl;data.sources.terminal.paths=$RUN/collect_$H/part_b.jsonl;data.sources.grounding.paths=$RUN/collect_$H/part_c.jsonl;eval.click_jsonl=;model.compact_vocab=$W/base/vocab.json;init.from_dir=$W/base/hf;train.total_steps=$SFT_STEPS" \
    "--config.stages.eval_sft.overrides=proof.heldout_suite=$D/heldout_term;proof.probe_episodes=$D/teacher_heldout/terminal.jsonl;proof.modes=t1"
done

# 4. the students side by side (the first two harnesses), paired on the same held-out instances
"$PY" - "$RUN" $HARNESSES <<'EOF'
import json, sys
from mage_jax.runs import proof_steps
run, names = sys.argv[1], sys.argv[2:4]
rows = {}
for h in names:
  rep = json.load(open(f"{run}/collect_{h}/collect_report.json"))["collection"]
  a = json.load(open(f"{run}/student_{h}/eval_sft/summary.json"))["summary"]["t1"]["all"]
  rows[h] = json.load(open(f"{run}/student_{h}/eval_sft/episodes.json"))
  print(f"{h}: teacher kept {rep['kept']}/{rep['episodes']}; student held-out T=1 {a['solved']}/{a['episodes']} = "
        f"{a['success']:.3f} (95% CI {a['success_lo']:.3f}-{a['success_hi']:.3f})")
if len(names) == 2:
  m = proof_steps.paired(rows[names[0]], rows[names[1]], "t1", 10_000)["mcnemar"]
  print(f"{names[0]} -> {names[1]}: {m['only_b']} instances only {names[1]}'s student solves, {m['only_a']} only "
        f"{names[0]}'s; exact McNemar p = {m['p_value']:.4g}")
EOF
