"""Sentence evidence as a lever: fit the sentence selector on train supporting facts, measure what it shows
the reader (no LM), and, with ``--record``, what the reader makes of it (the draft read from sentences against
the draft read from whole passages, on the same held-out questions).

    python -m experiments.lab.studies.sentence_evidence --dataset hotpotqa --fit-n 448 --offset 448 --n 150 \\
        [--record --recording workspace/recordings/hotpotqa-train.jsonl] [--json OUT]

Fit: every sentence of the top ``--passages`` ranked passages of the first ``--fit-n`` seeded train questions,
labelled by the question's supporting facts (sentence ids where the dataset has them; a question without any
is skipped). Coverage on the held-out questions: the share of gold sentences shown, of questions shown every
gold sentence, and characters shown, for the selected sentences against the top 3 passages whole (what the
draft reads today). The selector is written to ``workspace/selectors/DATASET.json``. With ``--record``, the
held-out drafts are read from sentences (a recording of their own, resumable) and both drafts are replayed:
EM, F1 and prompt tokens a question, and the paired EM difference.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from experiments.jobs.selectors import fit_from_runtime, save_selector, selectors_dir
from experiments.lab.studies import rounded_diff, show
from experiments.runtime import Runtime
from optimize import recording, replay
from optimize.stats import paired_bootstrap

DRAFT = {"max_repairs": 0, "ask_critic": "off"}


def drafts(rt: Runtime, records: dict, examples: list, overrides: dict) -> Any:
    program = rt.system("sharp", overrides)
    return replay.score(records, examples, program.config.replace(**DRAFT), passages=rt.passages())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--fit-n", type=int, required=True, help="fit on the first N seeded train questions")
    ap.add_argument("--offset", type=int, required=True, help="held-out questions start here")
    ap.add_argument("--n", type=int, required=True, help="held-out questions")
    ap.add_argument("--passages", type=int, default=5, help="ranked passages the sentences are drawn from")
    ap.add_argument("--budget", type=int, default=10, help="sentences shown in all")
    ap.add_argument("--record", action="store_true", help="read the held-out drafts from sentences (LM time)")
    ap.add_argument("--recording", type=Path, default=None, help="the drafts read from whole passages")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(dataset=args.dataset, workspace=args.workspace, retriever_config={"ranker": args.dataset})
    if args.offset != args.fit_n:
        ap.error("the held-out questions start where the fit's end: --offset must equal --fit-n")
    budgets = tuple(sorted({args.budget - 2, args.budget, args.budget + 2, args.budget + 4}))
    selector, summary = fit_from_runtime(rt, args.fit_n, args.n, args.passages, budgets)
    path = save_selector(selector, selectors_dir(args.workspace) / f"{args.dataset}.json", args.passages, args.budget)
    out: dict[str, Any] = {"selector": str(path), **summary}
    held = rt.examples("train", limit=args.offset + args.n)[args.offset :]
    if args.record:
        sentence_config = {"evidence": "sentences", "selector": selector.model_dump(mode="json"),
                           "sentence_passages": args.passages, "sentence_budget": args.budget}  # fmt: skip
        program = rt.system("sharp", sentence_config)
        where = args.workspace / "recordings" / f"{args.dataset}-train-sentences.jsonl"
        recs = recording.record(program, held, where, critique=False, actions=(), passages=rt.passages())
        whole = recording.read_records(args.recording, held)
        runs = {"passages": drafts(rt, whole, held, {}), "sentences": drafts(rt, recs, held, sentence_config)}
        em = {k: {r["id"]: float(r["em"]) for r in v.rows} for k, v in runs.items()}
        out["reader"] = {
            k: {m: round(v.metrics[m], 3) for m in ("em", "f1", "prompt_tokens_per_q", "lm_seconds_per_q")}
            for k, v in runs.items()
        }
        out["reader"]["delta_em"] = rounded_diff(paired_bootstrap(em["sentences"], em["passages"]))
        out["reader"]["recording"] = str(where)
    show(out, args.json)


if __name__ == "__main__":
    main()
