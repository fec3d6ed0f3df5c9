"""How far a threshold on the reader's own P("yes") can take yes/no questions (what the issue's "yes/no >= 0.80"
asks of the draft):

    python -m experiments.lab.studies.yesno_ceiling --dataset hotpotqa --n 598 \\
        --recording workspace/recordings/hotpotqa-train.jsonl --json experiments/results/reading/yesno-ceiling-hotpotqa.json

Over the first ``--n`` seeded train questions whose gold answer is "yes" or "no", from the recorded drafts
alone (no LM call): how often the reader writes "yes", how often its text is right, how well its P("yes")
against P("no") at the answer's first token separates gold "yes" from gold "no" (AUROC with a bootstrap CI),
the accuracy of the best threshold chosen on these very questions (a ceiling: no threshold rule on the draft
does better on them) and of a threshold chosen in 5 folds on the others (what a fitted threshold gets). A
draft with no P("yes") keeps its text.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from experiments.lab.studies import show
from optimize.gate_fitting import bootstrap_auroc
from optimize.metrics import auroc as auroc_of
from optimize.metrics import gold_answers, normalize_answer
from program.sharp.rounds import Read


def _right(rows: list[dict], t: float | None) -> int:
    """How many are right when "yes" is said where P(yes) >= t (t None: the text as written)."""
    said = [r["text"] if t is None or r["p_yes"] is None else ("yes" if r["p_yes"] >= t else "no") for r in rows]
    return sum(s == r["gold"] for s, r in zip(said, rows))


def _accuracy(rows: list[dict], t: float | None) -> float:
    return _right(rows, t) / len(rows)


def best_threshold(rows: list[dict]) -> float:
    """The threshold with the highest accuracy on ``rows`` (ties: the one nearest 0.5)."""
    cuts = sorted({round(r["p_yes"], 4) for r in rows if r["p_yes"] is not None} | {0.5})
    return max(cuts, key=lambda t: (_accuracy(rows, t), -abs(t - 0.5)))


def ceiling(rows: list[dict], folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """The figures above for ``rows`` (each: gold, text, p_yes, id)."""
    if len(rows) < folds:
        raise ValueError(f"{len(rows)} yes/no questions cannot be split into {folds} folds")
    scored = [r for r in rows if r["p_yes"] is not None]
    labels = [r["gold"] == "yes" for r in scored]
    lo, hi = bootstrap_auroc([r["p_yes"] for r in scored], labels, [r["id"] for r in scored], seed=seed)
    auroc = auroc_of(
        [r["p_yes"] for r in scored if r["gold"] == "yes"], [r["p_yes"] for r in scored if r["gold"] != "yes"]
    )
    oracle = best_threshold(rows)
    right = 0
    chosen = []
    for k in range(folds):
        held, rest = rows[k::folds], [r for i, r in enumerate(rows) if i % folds != k]
        t = best_threshold(rest)
        chosen.append(t)
        right += _right(held, t)
    return {
        "questions": len(rows),
        "gold yes": round(sum(r["gold"] == "yes" for r in rows) / len(rows), 3),
        "reader says yes": round(sum(r["text"] == "yes" for r in rows) / len(rows), 3),
        "with P(yes)": len(scored),
        "accuracy, the text as written": round(_accuracy(rows, None), 3),
        "AUROC of P(yes) for gold yes": round(auroc, 3) if auroc is not None else None,
        "AUROC CI": [round(lo, 3), round(hi, 3)] if lo is not None else None,
        "accuracy, the best threshold on these questions (ceiling)": round(_accuracy(rows, oracle), 3),
        "that threshold": oracle,
        f"accuracy, a threshold chosen in {folds} folds": round(right / len(rows), 3),
        "thresholds chosen": chosen,
    }


def main() -> None:
    from experiments.runtime import Runtime
    from optimize.recording import read_records

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--recording", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    examples = rt.examples("train", limit=args.n, seed=args.seed)
    records = read_records(args.recording, examples)
    passages = rt.passages()
    rows = []
    for ex in examples:
        golds = {normalize_answer(g) for g in gold_answers(ex)} & {"yes", "no"}
        if len(golds) != 1:
            continue
        gold = golds.pop()
        draft = next(r for r in records[ex.id]["rounds"] if r["action"] == "draft")
        read = Read.from_record(draft["read"], passages)
        rows.append({"id": ex.id, "gold": gold, "text": normalize_answer(read.answer), "p_yes": read.p_yes})
    out = {
        "positions": f"train 0:{len(examples)} (seed {args.seed}), gold yes/no only",
        **ceiling(rows, seed=args.seed),
    }
    show(out, args.json)


if __name__ == "__main__":
    main()
