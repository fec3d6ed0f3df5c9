"""closest_span (program/sharp/spans.py) against the reference it replaced, on random answers over corpus passages.

    python -m experiments.lab.benchmarks.closest_span --dataset 2wikimultihopqa [--cases 1500] [--json OUT]

The reference reads every window's words afresh (the function as first written, 6554 calls of which took 54% of a
replayed build's time in a profile of the MuSiQue MANIFEST rebuild test). Answers are windows of 1-4 words of one of
three random passages, perturbed (a word added, the first dropped, upper-cased with commas, shuffled words). Reports
how many differ (must be 0) and the seconds of each, measured in one run, the fast one before any cache hit.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.lab.studies import show
from program.sharp.spans import closest_span, is_span, token_f1, words
from program.types import Passage


def reference(answer: str, evidence: Sequence[Passage], min_f1: float = 0.5) -> str | None:
    """closest_span as first written: every window's words read afresh."""
    target = words(answer)
    if not target or is_span(answer, evidence) or len(target) > 12:
        return None
    best: tuple[float, int, str] | None = None
    for p in evidence:
        for sentence in re.split(r"(?<=[.!?])\s+", f"{p.title}. {p.text}"):
            tokens = sentence.split()
            for n in range(1, len(target) + 3):
                for i in range(0, max(0, len(tokens) - n) + 1):
                    span = " ".join(tokens[i : i + n]).strip(" ,.;:()\"'")
                    score = token_f1(words(span), target)
                    if score >= min_f1 and (best is None or (score, -len(span)) > (best[0], -best[1])):
                        best = (score, len(span), span)
    return best[2] if best else None


def cases(passages: Sequence[Passage], n: int, seed: int = 0) -> list[tuple[str, list[Passage]]]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        ev = rng.sample(list(passages), 3)
        toks = rng.choice(ev).text.split()
        if len(toks) < 6:
            continue
        i, k = rng.randrange(len(toks) - 4), rng.randint(1, 4)
        ans, r = toks[i : i + k], rng.random()
        if r < 0.3:
            ans = [*ans, rng.choice(["Jr", "city", "the", "Smith", "of"])]
        elif r < 0.5 and len(ans) > 1:
            ans = ans[1:]
        elif r < 0.7:
            ans = [w.upper() + "," for w in ans]
        elif r < 0.8:
            ans = [rng.choice(toks) for _ in range(k)]
        out.append((" ".join(ans), ev))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="2wikimultihopqa")
    ap.add_argument("--cases", type=int, default=1500)
    ap.add_argument("--passages", type=int, default=5000, help="the corpus's first N passages are drawn from")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from data.corpus import load_corpus
    from experiments.runtime import dataset_source

    corpus = load_corpus(dataset_source(args.dataset, None).corpus_file())[: args.passages]
    todo = cases(corpus, args.cases)
    t0 = time.perf_counter()
    slow = [reference(a, ev) for a, ev in todo]
    t1 = time.perf_counter()
    fast = [closest_span(a, ev) for a, ev in todo]
    t2 = time.perf_counter()
    show(
        {
            "command": f"python -m experiments.lab.benchmarks.closest_span --dataset {args.dataset} --cases {args.cases}",
            "cases": len(todo),
            "spans found": sum(s is not None for s in slow),
            "differences": sum(a != b for a, b in zip(slow, fast, strict=True)),
            "reference_s": round(t1 - t0, 2),
            "closest_span_s": round(t2 - t1, 2),
            "speedup": round((t1 - t0) / (t2 - t1), 1) if t2 > t1 else None,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
