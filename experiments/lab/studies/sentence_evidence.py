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
import json
import logging
from pathlib import Path
from typing import Any

from experiments.lab.studies import rounded_diff, show
from experiments.runtime import Runtime
from optimize import replay
from optimize.sentences import coverage, fit_selector, sentence_cases
from optimize.stats import paired_bootstrap

DRAFT = {"max_repairs": 0, "ask_critic": "off"}


def gold_sentences(example: Any, sentences: dict[str, list[str]]) -> dict[str, list[str]]:
    """title -> the texts of the example's supporting sentences (none where the ids are unknown)."""
    out: dict[str, list[str]] = {}
    for title, sid in getattr(example, "gold_sentences", None) or []:
        found = sentences.get(title) or []
        if sid is not None and 0 <= int(sid) < len(found):
            out.setdefault(title, []).append(found[int(sid)])
    return out


def corpus_sentences(rt: Runtime) -> dict[str, list[str]]:
    with open(rt.source.corpus_file(), encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    return {r["title"]: list(r["text"]) if isinstance(r["text"], list) else [r["text"]] for r in rows}


def items(rt: Runtime, examples: list, k: int, sentences: dict) -> list[tuple]:
    retriever = rt.retriever()
    out = []
    for ex in examples:
        gold = gold_sentences(ex, sentences)
        if gold:
            out.append((ex.question, retriever.retrieve(ex.question, k), gold, ex.id))
    return out


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
    examples = rt.examples("train", limit=args.offset + args.n)
    sentences = corpus_sentences(rt)
    fit_items = items(rt, examples[: args.fit_n], args.passages, sentences)
    cases = [c for q, ps, gold, qid in fit_items for c in sentence_cases(q, ps, gold, qid)]
    fitted_on = {"dataset": args.dataset, "corpus_sha256": rt.index_manifest().get("corpus_sha256"),
                 "questions": len(fit_items), "train_offset": 0, "n_train": args.fit_n}  # fmt: skip
    selector = fit_selector(cases, fitted_on)
    path = args.workspace / "selectors" / f"{args.dataset}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(selector.model_dump(mode="json"), indent=1) + "\n")
    held = examples[args.offset :]
    held_items = [(q, ps, gold) for q, ps, gold, _ in items(rt, held, args.passages, sentences)]
    out: dict[str, Any] = {
        "selector": str(path),
        "fit": {"questions": len(fit_items), "sentences": len(cases), "supporting": sum(c["label"] for c in cases)},
        "held_out": f"train {args.offset}:{args.offset + args.n}",
        "coverage": {
            "top 3 passages whole (the draft today)": coverage(held_items, None, args.budget, 3),
            f"top {args.passages} passages whole": coverage(held_items, None, args.budget, args.passages),
            **{
                f"{b} sentences of the top {args.passages}": coverage(held_items, selector, b, 0)
                for b in sorted({args.budget - 2, args.budget, args.budget + 2, args.budget + 4})
            },
        },
        "weights": dict(zip(selector.features, [round(w, 3) for w in selector.weights])),
    }
    if args.record:
        sentence_config = {"evidence": "sentences", "selector": selector.model_dump(mode="json"),
                           "sentence_passages": args.passages, "sentence_budget": args.budget}  # fmt: skip
        program = rt.system("sharp", sentence_config)
        where = args.workspace / "recordings" / f"{args.dataset}-train-sentences.jsonl"
        recs = replay.record(program, held, where, critique=False, actions=(), passages=rt.passages())
        whole = replay.read_records(args.recording, held)
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
