"""Bootstrap confidence intervals: a figure without its interval misleads on 100 questions."""

from __future__ import annotations

import random
from collections.abc import Sequence


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def bootstrap_ci(
    values: Sequence[float], n_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the mean."""
    vals = [float(v) for v in values]
    if len(vals) < 2:
        return None
    rng = random.Random(seed)
    n = len(vals)
    means = sorted(sum(vals[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_resamples))
    return means[int(alpha / 2 * n_resamples)], means[int((1 - alpha / 2) * n_resamples) - 1]


def paired_bootstrap(
    a: dict[str, float], b: dict[str, float], n_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
) -> dict | None:
    """Mean difference a - b over the ids both share, with a paired percentile CI and p(a <= b)."""
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
