"""Study reference point for generator_formats: one raw chat call per question (no DSPy prompt format).

    python -m experiments.lab.studies.raw_reference [N]

Retrieves the hybrid top-5 for each of N seeded HotpotQA dev questions, asks the local 1.5B model
with a one-line "short answer only" system prompt, and prints one JSON line per question and the
EM / F1. Compare with `sharp eval --system vanilla --limit N --seed 0` to see what DSPy's prompt
format costs (or gains) on this model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

# The reference's own one-line prompt (LOCAL_LM.md): deliberately not a DSPy signature.
SYSTEM = (
    "Answer the question using the passages. Reply with the short answer only (a name, date, number "
    "or short phrase; yes or no for yes/no questions)."
)


def main(argv: list[str] | None = None) -> None:
    from experiments.runtime import Runtime
    from optimize.metrics import exact_match, f1_score
    from program.lm.local import get_session
    from program.reading.answers import clean_answer
    from program.reading.evidence import format_evidence

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=20)
    ap.add_argument("--model", default="local/qwen2.5-coder-1.5b")
    args = ap.parse_args(argv)
    rt = Runtime()
    examples = rt.examples("dev", args.n, 0)
    retriever, session = rt.retriever(), get_session(args.model)
    em = f1 = 0.0
    for ex in examples:
        golds = [ex.answer, *(getattr(ex, "answer_aliases", None) or [])]
        evidence = format_evidence(retriever.retrieve(ex.question, 5), 600)
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Passages:\n{evidence}\n\nQuestion: {ex.question}\nAnswer:"},
        ]
        t0 = time.perf_counter()
        answer = clean_answer(session.chat(messages, max_tokens=32).text, ex.question)
        e, f = exact_match(answer, golds), f1_score(answer, golds)
        em, f1 = em + e, f1 + f
        sys.stdout.write(
            json.dumps(
                {"q": ex.question, "gold": ex.answer, "pred": answer, "em": e, "s": round(time.perf_counter() - t0, 1)}
            )
            + "\n"
        )
    sys.stdout.write(f"EM {em / len(examples):.3f} F1 {f1 / len(examples):.3f} on {len(examples)} questions\n")


if __name__ == "__main__":
    main()
