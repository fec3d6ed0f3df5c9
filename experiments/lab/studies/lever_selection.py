"""Each lever alone against the neutral program, on the tuning questions and on the held-out ones; the levers
whose tuning CI lies above zero, combined (optimize/levers.py), saved as a program to ship:

    python -m experiments.lab.studies.lever_selection --dataset hotpotqa \\
        --program workspace/programs/sharp-hotpotqa-policy.json \\
        --recording workspace/recordings/hotpotqa-train.jsonl --tune-n 448 --check-n 150 \\
        --json experiments/results/reading/levers-hotpotqa.json --save workspace/programs/sharp-hotpotqa-levers.json

``--program``: the program whose reading the recording holds and whose rules' values the levers take (a tuned
policy: its yes/no thresholds); its gate and thresholds are not used (the neutral program accepts no draft of
a form a kept repair serves). The first ``--tune-n`` seeded train questions choose; the next ``--check-n``
only report (the ablation on held-out train questions). Replays only: no LM call.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from experiments.lab.studies import show
from optimize import levers as lv
from optimize.recording import check_reading, read_records
from optimize.stats import paired_bootstrap


def _form_em(records: dict, examples: list, em: dict[str, float]) -> dict[str, float]:
    out = {}
    for form in ("bridge", "comparison", "yesno"):
        ids = [ex.id for ex in examples if records[ex.id]["form"] == form]
        if ids:
            out[form] = round(sum(em[i] for i in ids) / len(ids), 3)
    return out


def _rows(neutral: dict, effects: list[lv.Effect], records: dict, examples: list) -> dict[str, Any]:
    rows: dict[str, Any] = {"neutral (the ranked read as written)": neutral}
    for e in effects:
        rows[e.lever.name] = {"em": e.em, "delta_em": e.delta_em, "lm_calls_per_q": e.lm_calls_per_q,
                              "seconds_per_q": e.seconds_per_q,
                              "em by form": _form_em(records, examples, e.per_question)}  # fmt: skip
    return rows


def by_form(records: dict, examples: list, em: dict[str, float], em0: dict[str, float]) -> dict[str, Any]:
    """Per question form: its questions, EM without and with the kept levers, and the paired difference."""
    out = {}
    for form in ("bridge", "comparison", "yesno"):
        ids = [ex.id for ex in examples if records[ex.id]["form"] == form]
        if ids:
            d = paired_bootstrap({i: em[i] for i in ids}, {i: em0[i] for i in ids})
            out[form] = {"questions": len(ids), "em neutral": round(sum(em0[i] for i in ids) / len(ids), 3),
                         "em kept levers": round(sum(em[i] for i in ids) / len(ids), 3),
                         "delta_em": [round(d["diff"], 3), round(d["ci"][0], 3), round(d["ci"][1], 3)] if d else None}  # fmt: skip
    return out


def study(program: Any, records: dict, tune: list, check: list, passages: Any, seed: int = 0) -> dict[str, Any]:
    base = program.config
    have = lv.recorded_actions(records, tune)
    offered = [lever for lever in lv.levers(base) if lever.needs is None or lever.needs in have]
    candidates, unrecorded = lv.replayable(records, [*tune, *check], base, offered, passages, seed)
    neutral_t, on_tune = lv.measure(records, tune, base, candidates, passages, seed)
    kept = lv.select(on_tune)
    out: dict[str, Any] = {"recorded actions": sorted(have), "kept": [lever.name for lever in kept]}
    if unrecorded:
        out["not candidates (rounds the recording lacks)"] = unrecorded
    combined = lv.combine(base, kept)
    out["kept config"] = {k: v for k, v in combined.model_dump(mode="json").items() if lv.shown(k, combined)}
    for label, examples, (neutral, effects) in (
        ("tuning", tune, (neutral_t, on_tune)),
        ("held out", check, lv.measure(records, check, base, candidates, passages, seed)),
    ):
        (_, [one]) = lv.measure(
            records, examples, base, [lv.Lever("kept levers", "all", dict(combined))], passages, seed
        )
        em0 = lv.scores(records, examples, base.replace(**lv.NEUTRAL), passages, seed)[0]
        neutral = {**neutral, "em by form": _form_em(records, examples, em0)}
        out[label] = {
            "questions": len(examples),
            "levers alone": _rows(neutral, effects, records, examples),
            "kept levers": {
                "em": one.em,
                "delta_em": one.delta_em,
                "lm_calls_per_q": one.lm_calls_per_q,
                "seconds_per_q": one.seconds_per_q,
                "by form": by_form(records, examples, one.per_question, em0),
            },  # fmt: skip
        }
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options a lever study shares (this one and experiments/lab/studies/crossfit_levers.py)."""
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--program", type=Path, required=True)
    ap.add_argument("--recording", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--save", type=Path, default=None, help="write the program with the kept levers here")
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))


def load(args: argparse.Namespace, n: int) -> tuple:
    """(runtime, program, saved, examples, records) for the first ``n`` seeded train questions, less the train
    questions the program's hop planner has as demos; the recording must read as the program does."""
    from experiments.runtime import Runtime

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    program, saved = rt.load_program(args.program)
    examples = rt.examples("train", limit=n, seed=args.seed)
    demos = set(saved.meta.get("planner_demo_ids") or ())  # the hop planner's demos: not measured on
    if demos & {ex.id for ex in examples}:
        logging.getLogger(__name__).info(
            "left out %d planner demo question(s)", len(demos & {ex.id for ex in examples})
        )
        examples = [ex for ex in examples if ex.id not in demos]
    records = read_records(args.recording, examples)
    check_reading(records.values(), program)
    return rt, program, saved, examples, records


def save_kept(path: Path, program: Any, saved: Any, config: dict[str, Any], meta: dict[str, Any]) -> str:
    """``program`` with the kept levers' ``config`` written to ``path``, ``meta`` added to its own."""
    from program.serving.saved import save_program

    program.config = program.config.replace(**config)
    save_program(path, program, saved.system, saved.retriever, saved.lm, saved.index_manifest, {**saved.meta, **meta})
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.add_argument("--tune-n", type=int, required=True)
    ap.add_argument("--check-n", type=int, required=True)
    args = ap.parse_args()
    rt, program, saved, examples, records = load(args, args.tune_n + args.check_n)
    tune, check = examples[: args.tune_n], examples[args.tune_n :]
    out = {"positions": f"train 0:{args.tune_n} choose, {args.tune_n}:{len(examples)} held out (seed {args.seed})",
           "program": str(args.program), **study(program, records, tune, check, rt.passages(), args.seed)}  # fmt: skip
    if args.save:
        meta = {"levers kept": out["kept"], "chosen on": f"train 0:{args.tune_n} (seed {args.seed})"}
        out["saved"] = save_kept(args.save, program, saved, out["kept config"], meta)
    show(out, args.json)


if __name__ == "__main__":
    main()
