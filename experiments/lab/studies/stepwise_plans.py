"""Can the 1.5B model plan a bridge one step at a time? Measured before it is built (issue 38).

The compiled hop planner writes a valid whole plan for 13% of MuSiQue's and 30% of HotpotQA's held-out train
bridges (findings/chain.md): its hop 1 repeats the question, or it writes one hop. Self-Ask's way asks less of
it at once: the first single question about an entity the question names (``FirstHop``), read as the chain
reads a hop; then the question rewritten with that answer in place (``RewriteWithAnswer``: "What is the
waterfall in Zimbabwe?"), read as the last hop, with the title lookup of the first answer. Both signatures get
``--k`` labeled demos from ``--demos``' train gold decompositions (2-hop ones for the rewrite; a question scored
is never a demo). Per bridge no rule plans (the first ``--n`` after ``--offset``, seeded): whether hop 1 is a
single question (not the question again, at most 30 words, no "#n"), hop 1 against the gold intermediate
answer, whether the rewrite writes that answer in and differs from the question, the last hop's EM.

    python -m experiments.lab.studies.stepwise_plans --dataset musique \\
        --program workspace/programs/sharp-musique-planner-labeled.json --n 30 \\
        --out experiments/results/chain/stepwise-musique.jsonl --json experiments/results/chain/stepwise-musique.json

Rows are appended to ``--out`` as they are read, and a rerun resumes after them.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import dspy

from experiments.lab.studies import show
from optimize.metrics import exact_match
from optimize.planner import natural_hop, plannable
from program.lm.accounting import Ledger
from program.sharp.chain import read_hop
from program.sharp.plans import MAX_HOP_WORDS, REF, substitute
from program.sharp.spans import words
from program.signatures import FirstHop, RewriteWithAnswer
from program.tracing import Budget, Tracer, adapter_settings


def _norm(text: str) -> str:
    return " ".join(words(text))


def first_hop_problem(hop: str, question: str) -> str | None:
    """Why ``hop`` is not a first single question of ``question`` (None: it is one)."""
    if not hop.strip():
        return "empty"
    if _norm(hop) == _norm(question) or len(words(hop)) >= len(words(question)):
        return "the question again"
    if len(hop.split()) > MAX_HOP_WORDS:
        return "too long"
    if REF.search(hop):
        return "names an earlier answer"
    return None


def rewrite_problem(rewritten: str, question: str, answer: str) -> str | None:
    """Why ``rewritten`` is not ``question`` with ``answer`` written in (None: it is)."""
    if _norm(rewritten) == _norm(question):
        return "the question unchanged"
    if _norm(answer) not in _norm(rewritten):
        return "the answer not written in"
    return None


def demos(examples: list[Any], skip: set[str], k: int) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """``k`` first-hop demos and ``k`` rewrite demos from gold decompositions (2-hop ones for the rewrite)."""
    first, rewrite = [], []
    for ex in examples:
        gold = list(getattr(ex, "gold_hops", None) or [])
        if ex.id in skip or len(gold) < 2 or REF.search(gold[0][0]):
            continue
        hop1 = natural_hop(gold[0][0])
        if len(first) < k:
            first.append(dspy.Example(question=ex.question, hop=hop1).with_inputs("question"))
        if len(gold) == 2 and len(rewrite) < k and "#1" in gold[1][0]:
            rewritten = substitute(natural_hop(gold[1][0]), [gold[0][1]])
            rewrite.append(
                dspy.Example(question=ex.question, hop=hop1, answer=gold[0][1], rewritten=rewritten).with_inputs(
                    "question", "hop", "answer"
                )
            )
        if len(first) >= k and len(rewrite) >= k:
            break
    return first, rewrite


def row(program: Any, first: dspy.Predict, rewrite: dspy.Predict, ex: Any) -> dict[str, Any]:
    """One bridge planned and read step by step."""
    cfg = program.config
    tr = Tracer(Budget(max_lm_calls=None), Ledger(), observer=None)
    gold = list(getattr(ex, "gold_hops", None) or [])
    out: dict[str, Any] = {"id": ex.id, "question": ex.question, "gold_hop1": gold[0][1] if gold else None}
    with dspy.context(**adapter_settings(cfg.structured_adapter)):
        hop = str(first(question=ex.question, config={"max_tokens": cfg.planner_max_tokens}).hop or "").strip()
    out.update(hop1=hop, hop1_problem=first_hop_problem(hop, ex.question))
    if out["hop1_problem"]:
        return out
    _, answer, why = read_hop(program, hop, [], tr, 1, 1)
    out.update(answer1=answer, answer1_problem=why or None)
    out["hop1_em"] = float(bool(gold) and answer is not None and exact_match(answer, [gold[0][1]]))
    if answer is None:
        return out
    with dspy.context(**adapter_settings(cfg.structured_adapter)):
        pred = rewrite(question=ex.question, hop=hop, answer=answer, config={"max_tokens": cfg.planner_max_tokens})
    rewritten = str(pred.rewritten or "").strip()
    out.update(rewritten=rewritten, rewrite_problem=rewrite_problem(rewritten, ex.question, answer))
    if out["rewrite_problem"]:
        return out
    _, final, why = read_hop(program, rewritten, [answer], tr, 1, 2)
    out.update(answer=final, answer_problem=why or None)
    out["em"] = float(final is not None and exact_match(final, [ex.answer, *ex.answer_aliases]))
    return out


def summary(rows: list[dict]) -> dict[str, Any]:
    n = len(rows) or 1

    def share(pred: Any) -> float:
        return round(sum(1 for r in rows if pred(r)) / n, 4)

    return {
        "bridges": len(rows),
        "hop 1 a single question": share(lambda r: not r.get("hop1_problem")),
        "hop 1 answered": share(lambda r: r.get("answer1")),
        "hop 1 = gold intermediate answer": share(lambda r: r.get("hop1_em")),
        "rewrite valid": share(lambda r: r.get("rewritten") and not r.get("rewrite_problem")),
        "last hop answered": share(lambda r: r.get("answer")),
        "EM": share(lambda r: r.get("em")),
        "hop 1 problems": _count(rows, "hop1_problem"),
        "rewrite problems": _count(rows, "rewrite_problem"),
    }


def _count(rows: list[dict], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        if r.get(key):
            out[r[key]] = out.get(r[key], 0) + 1
    return out


def main(argv: list[str] | None = None) -> None:
    from data.loaders import load_examples
    from experiments.runtime import Runtime, dataset_source

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--program", type=Path, required=True)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--offset", type=int, default=0, help="skip the first N plannable bridges")
    ap.add_argument("--demos", default="musique", help="the dataset whose train gold decompositions are the demos")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workspace", type=Path, default=Path("workspace"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(dataset=args.dataset, workspace=args.workspace)
    program, _ = rt.load_program(args.program)
    scored = plannable(rt.examples("train", seed=args.seed))[args.offset : args.offset + args.n]
    pool = load_examples(dataset_source(args.demos, rt.data_dir), "train", seed=args.seed)
    first_demos, rewrite_demos = demos(pool, {ex.id for ex in scored}, args.k)
    first, rewrite = dspy.Predict(FirstHop), dspy.Predict(RewriteWithAnswer)
    first.demos, rewrite.demos = first_demos, rewrite_demos
    first.lm = rewrite.lm = program.hop_planner.lm
    done = {}
    if args.out.exists():
        done = {r["id"]: r for r in map(json.loads, args.out.read_text().splitlines())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for ex in scored:
        if ex.id not in done:
            done[ex.id] = row(program, first, rewrite, ex)
            with args.out.open("a") as fh:
                fh.write(json.dumps(done[ex.id]) + "\n")
    rows = [done[ex.id] for ex in scored]
    show({"dataset": args.dataset, "demos": f"{args.k} of {args.demos}", **summary(rows)}, args.json)


if __name__ == "__main__":
    main()
