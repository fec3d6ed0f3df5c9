"""The bootstrap (optimize/stats.py) against the reference it replaced: every resample drawn one randrange at a time.

    python -m experiments.lab.benchmarks.bootstrap [--cases 60] [--json OUT]

Random EM-like (0/1) and F1-like (float) values of 2 to 600 questions, seeds 0-2, both intervals (of a mean, and
paired). Reports how many intervals differ (must be 0: every committed interval stays what it was) and the seconds of
each, measured in one run.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from experiments.lab.studies import show
from optimize.stats import bootstrap_ci, paired_bootstrap


def reference_ci(values, n_resamples=2000, alpha=0.05, seed=0):
    """bootstrap_ci as first written."""
    vals = [float(v) for v in values]
    if len(vals) < 2:
        return None
    rng = random.Random(seed)
    n = len(vals)
    means = sorted(sum(vals[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_resamples))
    return means[int(alpha / 2 * n_resamples)], means[int((1 - alpha / 2) * n_resamples) - 1]


def reference_paired(a, b, n_resamples=2000, alpha=0.05, seed=0):
    """paired_bootstrap as first written."""
    ids = sorted(set(a) & set(b))
    if len(ids) < 2:
        return None
    diffs = [a[i] - b[i] for i in ids]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_resamples))
    return {
        "diff": sum(diffs) / n,
        "ci": (means[int(alpha / 2 * n_resamples)], means[int((1 - alpha / 2) * n_resamples) - 1]),
        "p_not_better": sum(m <= 0 for m in means) / n_resamples,
        "n": n,
    }


def cases(n_cases: int, seed: int = 0) -> list[tuple[list[float], dict, dict, int]]:
    rng = random.Random(seed)
    out = []
    for i in range(n_cases):
        n = rng.choice([2, 3, 8, 30, 64, 100, 128, 130, 200, 259, 598]) if i % 3 else rng.randint(2, 600)
        f1 = rng.random() < 0.5
        draw = (lambda: rng.random()) if f1 else (lambda: float(rng.random() < 0.4))
        vals = [draw() for _ in range(n)]
        a = {str(j): draw() for j in range(n)}
        b = {str(j): draw() for j in range(n)}
        out.append((vals, a, b, i % 3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    todo = cases(args.cases)
    t0 = time.perf_counter()
    slow = [(reference_ci(v, seed=s), reference_paired(a, b, seed=s)) for v, a, b, s in todo]
    t1 = time.perf_counter()
    fast = [(bootstrap_ci(v, seed=s), paired_bootstrap(a, b, seed=s)) for v, a, b, s in todo]
    t2 = time.perf_counter()
    show(
        {
            "command": f"python -m experiments.lab.benchmarks.bootstrap --cases {args.cases}",
            "cases": len(todo),
            "intervals": 2 * len(todo),
            "differences": sum(x != y for x, y in zip(slow, fast, strict=True)),
            "reference_s": round(t1 - t0, 2),
            "bootstrap_s": round(t2 - t1, 2),
            "speedup": round((t1 - t0) / (t2 - t1), 1) if t2 > t1 else None,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
