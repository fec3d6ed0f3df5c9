"""Study behind the critic's layout and stop threshold: does the critic notice a missing gold paragraph?

    python -m experiments.lab.studies.critic_discrimination [N] [--split train] [--variants a,b] [--cap 5]

For each of N seeded questions the critic judges two evidence sets built from the hybrid top-10
for the question: *complete* (every gold paragraph plus the best-ranked others, up to the cap)
and *incomplete* (the same with one gold paragraph, alternating which, replaced by the next
other passage). The labels are balanced by construction, so the figures say whether the critic
discriminates, not how often evidence happens to be complete. Reported per variant:

- AUROC of P(sufficient) read from the verdict's token probabilities (program/confidence.py),
  and of the written verdict and confidence (1 - confidence for "insufficient");
- verdict accuracy, the share of "sufficient" verdicts, and mean token P(sufficient) on complete
  and on incomplete evidence; seconds per critique.

Variants: ``evidence-first`` (CritiqueEvidence as it is: evidence, searches, then the question
last) and ``question-first`` (question, searches, then evidence: its layout before this
benchmark). DSPy's cache is off.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

log = logging.getLogger(__name__)

VARIANTS = ("question-first", "evidence-first")  # the old layout first: the reference


def _signature(variant: str):
    import dspy

    from program.signatures import CritiqueEvidence

    if variant == "question-first":
        return (
            CritiqueEvidence.delete("question")
            .delete("evidence")
            .prepend("question", dspy.InputField())
            .append("evidence", CritiqueEvidence.input_fields["evidence"])
        )
    return CritiqueEvidence


def evidence_pair(example, ranked: list, by_title: dict, cap: int, drop: int) -> tuple[list, list] | None:
    """(complete, incomplete) passage lists for one question, or None without two gold paragraphs."""
    golds = [by_title[t] for t in example.gold_titles if t in by_title]
    if len(golds) < 2:
        return None
    gold_ids = {p.id for p in golds}
    others = [p for p in ranked if p.id not in gold_ids]
    order = {p.id: i for i, p in enumerate(ranked)}
    complete = sorted(golds + others[: cap - len(golds)], key=lambda p: order.get(p.id, len(ranked)))
    dropped = golds[drop % len(golds)].id
    incomplete = [p for p in complete if p.id != dropped] + others[cap - len(golds) : cap - len(golds) + 1]
    return complete, incomplete


def _critique(variant: str, lm, question: str, evidence: str) -> dict:
    import dspy

    from program.confidence import TOP_LOGPROBS, choice_probabilities
    from program.critique import VERDICTS
    from program.parsing import as_score

    t0 = time.perf_counter()
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        try:
            pred = dspy.Predict(_signature(variant))(
                question=question,
                sub_queries=[question],
                evidence=evidence,
                config={"max_tokens": 256, "logprobs": True, "top_logprobs": TOP_LOGPROBS},
            )
        except Exception as exc:
            log.warning("%s: %s", variant, exc)
            pred = None
    verdict = getattr(pred, "verdict", None)
    conf = as_score(getattr(pred, "confidence", None)) or 0.0
    probs = choice_probabilities(getattr(pred, "logprobs", None), "verdict", VERDICTS) if pred else None
    return {
        "verdict": verdict,
        "p_token": probs["sufficient"] if probs else None,
        "p_verbal": conf if verdict == "sufficient" else 1.0 - conf,
        "seconds": time.perf_counter() - t0,
    }


def summarize(points: list[dict]) -> dict:
    from optimize.metrics import auroc

    pos = [p for p in points if p["label"]]
    neg = [p for p in points if not p["label"]]

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    tok = [p for p in points if p["p_token"] is not None]
    return {
        "n": len(points),
        "auroc_token": auroc([p["p_token"] for p in tok if p["label"]], [p["p_token"] for p in tok if not p["label"]]),
        "auroc_verbal": auroc([p["p_verbal"] for p in pos], [p["p_verbal"] for p in neg]),
        "verdict_accuracy": mean([float((p["verdict"] == "sufficient") == p["label"]) for p in points]),
        "sufficient_rate": mean([float(p["verdict"] == "sufficient") for p in points]),
        "p_token_complete": mean([p["p_token"] for p in pos]),
        "p_token_incomplete": mean([p["p_token"] for p in neg]),
        "seconds_per_critique": mean([p["seconds"] for p in points]),
    }


def main(argv: list[str] | None = None) -> None:
    from experiments.runtime import Runtime, load_dataset_corpus
    from program.evidence import format_evidence
    from program.lm import LMConfig
    from program.lm.factory import build_lm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=20)
    ap.add_argument("--split", default="train")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--cap", type=int, default=5)
    ap.add_argument("--chars", type=int, default=450)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if bad := [v for v in variants if v not in VARIANTS]:
        ap.error(f"unknown variant(s) {bad}; valid: {', '.join(VARIANTS)}")

    rt = Runtime(cache=False)
    lm = build_lm(LMConfig().resolve("critic"), "critic")
    retriever = rt.retriever()
    by_title = {p.title: p for p in load_dataset_corpus(rt.dataset, rt.data_dir)}
    points: dict[str, list[dict]] = {v: [] for v in variants}
    used = 0
    for ex in rt.examples(args.split, None, 0):
        if used >= args.n:
            break
        pair = evidence_pair(ex, retriever.retrieve(ex.question, 10), by_title, args.cap, used)
        if pair is None:
            continue
        used += 1
        for label, passages in zip((True, False), pair):
            evidence = format_evidence(passages, args.chars)
            for v in variants:
                points[v].append({"id": ex.id, "label": label, **_critique(v, lm, ex.question, evidence)})
        log.info(
            "%d/%d %s | %s",
            used,
            args.n,
            ex.question[:60],
            " | ".join(
                f"{v}: {[(p['verdict'], round(p['p_token'] or -1, 2)) for p in points[v][-2:]]}" for v in variants
            ),
        )
    summary = {v: summarize(ps) for v, ps in points.items()}
    if args.json:
        sys.stdout.write(json.dumps({"questions": used, "summary": summary}) + "\n")
        return
    sys.stdout.write(
        f"{used} {args.split} questions x (complete, incomplete) evidence, cap {args.cap}\n\n"
        "| variant | AUROC token | AUROC verbal | verdict acc | says sufficient | "
        "P(suff) complete / incomplete | s/critique |\n|---|---|---|---|---|---|---|\n"
    )

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for v, s in summary.items():
        sys.stdout.write(
            f"| {v} | {f(s['auroc_token'])} | {f(s['auroc_verbal'])} | {f(s['verdict_accuracy'])} | "
            f"{f(s['sufficient_rate'])} | {f(s['p_token_complete'])} / {f(s['p_token_incomplete'])} | "
            f"{f(s['seconds_per_critique'])} |\n"
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
