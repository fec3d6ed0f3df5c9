"""Study behind the generator's prompt layout and JSON adapter: variants of one call on the same evidence.

    python -m experiments.lab.studies.generator_formats [N] [--variants a,b,...] [--k 5] [--chars 600]

Retrieves the hybrid top-k once for each of N seeded HotpotQA dev questions (the same questions
`sharp eval --limit N --seed 0` uses), then answers every question with each variant of the
generator step and prints EM / F1, prompt tokens and seconds per question, and the paired
difference of each variant to the first. Variants:

- ``question-first``: GenerateAnswer with the question before the evidence (the layout before
  this benchmark), ChatAdapter.
- ``evidence-first``: the current GenerateAnswer (evidence, then question last), ChatAdapter.
- ``evidence-first-json``: the same signature through the JSON adapter (grammar-constrained).
- ``answer-only``: evidence first, no ``supporting_passages`` output field.
- ``raw``: one raw chat call with a one-line system prompt (experiments.lab.studies.raw_reference).

DSPy's cache is off, so every call is cold and timed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

log = logging.getLogger(__name__)

VARIANTS = ("question-first", "evidence-first", "evidence-first-json", "answer-only", "raw")


def _signature(variant: str):
    import dspy

    from program.signatures import GenerateAnswer

    sig = GenerateAnswer
    if variant == "question-first":
        sig = sig.delete("question").prepend("question", dspy.InputField())
    if variant == "answer-only":
        sig = sig.delete("supporting_passages")
    return sig


def _answer(variant: str, lm, session, question: str, evidence: str) -> tuple[str, int]:
    """The variant's answer and the prompt tokens it took."""
    import dspy

    from experiments.lab.studies.raw_reference import SYSTEM
    from program.lm.accounting import recording

    if variant == "raw":
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Passages:\n{evidence}\n\nQuestion: {question}\nAnswer:"},
        ]
        out = session.chat(messages, max_tokens=32)
        return out.text, out.prompt_tokens
    adapter = dspy.JSONAdapter() if variant.endswith("-json") else dspy.ChatAdapter()
    with recording() as ledger, dspy.context(lm=lm, adapter=adapter):
        try:
            pred = dspy.Predict(_signature(variant))(question=question, evidence=evidence)
            text = pred.answer
        except Exception as exc:
            log.warning("%s: %s", variant, exc)
            text = ""
    return text, ledger.summary()["prompt_tokens"]


def _run_variants(
    variants: list[str], examples: list, retriever: Any, lm: Any, session: Any, k: int, chars: int
) -> dict[str, dict[str, dict]]:
    """Each variant's row (answer, EM, F1, prompt tokens, seconds) for each question, by variant and id;
    every variant reads the same top-``k`` evidence."""
    from optimize.metrics import exact_match, f1_score, gold_answers
    from program.reading.answers import clean_answer
    from program.reading.evidence import format_evidence

    rows: dict[str, dict[str, dict]] = {v: {} for v in variants}
    for i, ex in enumerate(examples, 1):
        evidence = format_evidence(retriever.retrieve(ex.question, k), chars)
        golds = gold_answers(ex)
        for v in variants:
            t0 = time.perf_counter()
            text, tokens = _answer(v, lm, session, ex.question, evidence)
            answer = clean_answer(text, ex.question)
            rows[v][ex.id] = {
                "answer": answer,
                "em": exact_match(answer, golds),
                "f1": f1_score(answer, golds),
                "prompt_tokens": tokens,
                "seconds": time.perf_counter() - t0,
            }
        log.info(
            "%d/%d %s | gold %r | %s",
            i,
            len(examples),
            ex.question[:60],
            ex.answer,
            " | ".join(f"{v}: {rows[v][ex.id]['answer']!r}" for v in variants),
        )
    return rows


def _summary(rows: dict[str, dict[str, dict]], variants: list[str]) -> dict[str, dict]:
    """Each variant's means (EM, F1, prompt tokens and seconds a question) and, but for the first (the
    base), its paired bootstrap EM and F1 differences to the base."""
    from optimize.stats import paired_bootstrap

    base = variants[0]
    summary = {}
    for v in variants:
        r = rows[v].values()
        n = len(rows[v])
        summary[v] = {
            "em": sum(x["em"] for x in r) / n,
            "f1": sum(x["f1"] for x in r) / n,
            "prompt_tokens_per_q": sum(x["prompt_tokens"] for x in r) / n,
            "seconds_per_q": sum(x["seconds"] for x in r) / n,
        }
        if v != base:
            for m in ("em", "f1"):
                summary[v][f"d_{m}"] = paired_bootstrap(
                    {i: x[m] for i, x in rows[v].items()}, {i: x[m] for i, x in rows[base].items()}
                )
    return summary


def _write_table(summary: dict[str, dict], base: str, n: int, k: int, chars: int) -> None:
    """The summary as a Markdown table on stdout."""
    sys.stdout.write(f"{n} seeded HotpotQA dev questions, hybrid top-{k}, {chars} chars\n\n")
    sys.stdout.write(
        f"| variant | EM | F1 | prompt tok/q | s/q | dEM vs {base} [95% CI] |\n|---|---|---|---|---|---|\n"
    )
    for v, s in summary.items():
        d = s.get("d_em")
        dtxt = f"{d['diff']:+.3f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]" if d else "-"
        sys.stdout.write(
            f"| {v} | {s['em']:.3f} | {s['f1']:.3f} | {s['prompt_tokens_per_q']:.0f} | "
            f"{s['seconds_per_q']:.1f} | {dtxt} |\n"
        )


def main(argv: list[str] | None = None) -> None:
    from experiments.runtime import Runtime
    from program.lm import LMConfig
    from program.lm.factory import build_lm
    from program.lm.local import get_session

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=20)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--chars", type=int, default=600)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if bad := [v for v in variants if v not in VARIANTS]:
        ap.error(f"unknown variant(s) {bad}; valid: {', '.join(VARIANTS)}")

    rt = Runtime(cache=False)
    spec = LMConfig().resolve("generator")
    lm = build_lm(spec, "generator")
    session = get_session(spec.model)
    retriever = rt.retriever()
    examples = rt.examples("dev", args.n, 0)
    rows = _run_variants(variants, examples, retriever, lm, session, args.k, args.chars)
    summary = _summary(rows, variants)
    if args.json:
        sys.stdout.write(json.dumps({"n": len(examples), "summary": summary}, default=str) + "\n")
        return
    _write_table(summary, variants[0], len(examples), args.k, args.chars)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
