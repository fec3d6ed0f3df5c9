"""What choosing levers by their CI adds, with every train question serving once as held out (cross-fitting):

    python -m experiments.lab.studies.crossfit_levers --dataset hotpotqa \\
        --program experiments/results/programs/sharp-hotpotqa-checks-refused.json \\
        --recording workspace/recordings/hotpotqa-train.jsonl --n 598 --folds 5 \\
        --json experiments/results/reading/crossfit-levers-hotpotqa.json --save workspace/programs/sharp-hotpotqa-crossfit.json

One tuning slice and one held-out slice (experiments/lab/studies/lever_selection.py) judge a choice on the few
questions held out (150 of HotpotQA's 598); here the first ``--n`` seeded train questions are dealt into
``--folds`` folds, the levers are chosen on all folds but one (optimize/levers.py: each lever alone against
the neutral ranked read, kept where its paired CI lies above zero, the yes/no thresholds chosen among
:data:`optimize.levers.THRESHOLDS` in the fold) and the chosen program scores the fold left out. The paired
CI against the neutral program then rests on every question. The program to ship is the levers chosen on all
``--n`` questions (``--save``); the cross-fitted figure is what that procedure is expected to add, not an
in-sample score. Replays only: no LM call.
"""

from __future__ import annotations

import argparse
from typing import Any

from experiments.lab.studies import show
from experiments.lab.studies.lever_selection import add_arguments, by_form, load, save_kept
from optimize import levers as lv
from optimize.stats import paired_bootstrap


def study(program: Any, records: dict, examples: list, folds: int, passages: Any, seed: int = 0) -> dict[str, Any]:
    base = program.config
    have = lv.recorded_actions(records, examples)
    offered = [lever for lever in lv.levers(base, lv.THRESHOLDS) if lever.needs is None or lever.needs in have]
    candidates, unrecorded = lv.replayable(records, examples, base, offered, passages, seed)
    cf = lv.crossfit(records, examples, base, candidates, folds, passages, seed)
    d = paired_bootstrap(cf.em, cf.em0, seed=seed)
    n = len(examples)
    neutral = lv.scores(records, examples, base.replace(**lv.NEUTRAL), passages, seed)[1]
    kept = lv.select(lv.measure(records, examples, base, candidates, passages, seed)[1])
    combined = lv.combine(base, kept)
    return {
        "recorded actions": sorted(have),
        "candidates": [lever.name for lever in candidates],
        "not candidates (rounds the recording lacks)": unrecorded,
        "cross-fitted": {
            "questions": n,
            "folds": cf.folds,
            "em neutral (the ranked read as written)": round(sum(cf.em0.values()) / n, 4),
            "em levers chosen out of fold": round(sum(cf.em.values()) / n, 4),
            "delta_em": [round(d["diff"], 4), round(d["ci"][0], 4), round(d["ci"][1], 4)] if d else None,
            "lm_calls_per_q": cf.lm_calls_per_q,
            "lm_calls_per_q neutral": round(neutral["lm_calls_per_q"], 3),
            "seconds_per_q": cf.seconds_per_q,
            "seconds_per_q neutral": round(neutral["live_seconds_per_q"], 2),
            "by form": by_form(records, examples, cf.em, cf.em0),
        },
        "kept on all": [lever.name for lever in kept],
        "kept config": {k: v for k, v in combined.model_dump(mode="json").items() if lv.shown(k, combined)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.add_argument("--n", type=int, required=True, help="the first N seeded train questions")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    rt, program, saved, examples, records = load(args, args.n)
    out = {"positions": f"train 0:{len(examples)} in {args.folds} folds (seed {args.seed})",
           "program": str(args.program), **study(program, records, examples, args.folds, rt.passages(), args.seed)}  # fmt: skip
    if args.save:
        meta = {"levers kept": out["kept on all"], "chosen on": f"train 0:{len(examples)} (seed {args.seed})",
                "cross-fitted delta_em": out["cross-fitted"]["delta_em"]}  # fmt: skip
        out["saved"] = save_kept(args.save, program, saved, out["kept config"], meta)
    show(out, args.json)


if __name__ == "__main__":
    main()
