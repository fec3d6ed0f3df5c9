#!/bin/sh
# Compile, tune and ship SHARP for one dataset from its recorded train rounds: the commands behind
# program/compiled/sharp-DATASET.json (each is a `sharp` command a user can run alone).
#
#   experiments/lab/ship_dataset.sh DATASET N_TUNE N_HELDOUT [TRIALS]
#
# The first N_TUNE seeded train questions choose everything (the answer rules, the gate, the policy); the next
# N_HELDOUT are held out: the gate's AUROC and the ship check against the shipped program are measured there.
# Every step replays workspace/recordings/DATASET-train.jsonl (record it first: experiments/lab/studies/
# record_drafts.py), recording only what it lacks; no step asks the critic LM (the 1.5B critic did not pay).
# SPACE=experiments/spaces/compare-only.yaml ACTIONS=compare tunes and fits over a recording of the drafts and
# comparisons alone.
set -eu
D=$1
T=$2
H=$3
TRIALS=${4:-300}
REC=workspace/recordings/$D-train.jsonl
SHARP=${SHARP:-.venv/bin/sharp}
TUNE="--dataset $D --split train --train-offset 0 --n $T --recording $REC --fix ask_critic=off --max-calls 2.5"
# SPACE: a search space that asks only for the rounds the recording holds (experiments/spaces/)
if [ -n "${SPACE:-}" ]; then TUNE="$TUNE --space $SPACE"; fi

# 1. the rules code applies to what the reader read, and a first policy, over the uncalibrated P(right)
$SHARP tune $TUNE --trials "$TRIALS" --study "sharp-$D-rules"
# 2. the answer critic's gate, fitted on the tuning questions' rounds settled by those rules, reported on the
#    held-out ones
$SHARP compile --system sharp --target critic --dataset "$D" --train-offset 0 --n-train "$T" --n-val "$H" \
    --no-critic-reads --recording "$REC" --actions "${ACTIONS:-retrieve,compare,focus}" \
    --program "workspace/programs/sharp-$D-rules.json" --name "sharp-$D-critic"
# 3. the policy again, over the gate's P(right), the rules kept as the gate was fitted with them
RULES=$(.venv/bin/python -c "
import json, sys
c = json.load(open('workspace/programs/sharp-$D-rules.json'))['config']
keys = ('yes_threshold', 'yes_threshold_sub', 'option_form', 'force_option', 'span_rule', 'compare_by')
print(' '.join(f'--fix {k}={json.dumps(c[k]) if c[k] is not None else \"off\"}' for k in keys))
")
# shellcheck disable=SC2086
$SHARP tune $TUNE $RULES --trials "$TRIALS" --program "workspace/programs/sharp-$D-critic.json" --study "sharp-$D-policy"
# 4. the gate and the policy on the held-out questions (replayed), their figures written into the manifest
HELD=experiments/results/reading/heldout-critic-$D.json
.venv/bin/python -m experiments.lab.studies.heldout_critic --dataset "$D" --split train --offset "$T" --n "$H" \
    --program "workspace/programs/sharp-$D-policy.json" --recording "$REC" --json "$HELD"
FIGURES=$(.venv/bin/python -c "
import json
d = json.load(open('$HELD'))
gate, pol = d['critic']['all'], d['policy']['all']
calls = d['policy']['lm_calls_per_q']
figs = {'gate_auroc_heldout': gate['auroc'], 'gate_drafts_heldout': gate['drafts'],
        'heldout_em_draft': pol['em draft only'], 'heldout_em_program': pol['em program'],
        'heldout_lm_calls_per_q': calls['program'], 'heldout_questions': pol['questions']}
print(' '.join(f'--figure {k}={round(v, 3) if v is not None else \"n/a\"}' for k, v in figs.items()))
")
# 5. ship it where it scores at least as well as the program it replaces, on the held-out questions
if [ -f "program/compiled/sharp-$D.json" ]; then
    CHECK="--check-offset $T --check-n $H --recording $REC"
else
    CHECK=""
fi
# shellcheck disable=SC2086
$SHARP ship "workspace/programs/sharp-$D-policy.json" --name "sharp-$D" --dataset "$D" $CHECK $FIGURES \
    --command "experiments/lab/ship_dataset.sh $D $T $H $TRIALS"
