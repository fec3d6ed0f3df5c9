"""Bootstrap confidence intervals: a figure without its interval misleads on 100 questions.

The resamples are the ones ``random.Random(seed).randrange(n)`` draws one at a time (every committed interval was
computed so), drawn in bulk: the same Mersenne Twister, its state handed to numpy, its 32-bit words cut to
``n.bit_length()`` bits and the words ``>= n`` skipped, as ``randrange`` does. The same intervals, to the last
bit, 10-26x faster (a build computes dozens; ``python -m experiments.lab.benchmarks.bootstrap``).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence

import numpy as np


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def resample_indices(n: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` indices in ``[0, n)``: exactly ``[random.Random(seed).randrange(n) for _ in range(count)]``."""
    if n < 1:
        raise ValueError(f"resample_indices needs n >= 1, got {n}")
    k = n.bit_length()
    if k > 32:  # randrange draws more than one word a value: its own loop
        rng = random.Random(seed)
        return np.array([rng.randrange(n) for _ in range(count)], dtype=np.int64)
    _, state, _ = random.Random(seed).getstate()
    twister = np.random.MT19937()
    twister.state = {"bit_generator": "MT19937", "state": {"key": np.array(state[:-1], dtype=np.uint32),
                                                          "pos": state[-1]}}  # fmt: skip
    kept: list[np.ndarray] = []
    need = count
    while need > 0:  # a word below n is kept (randrange's rejection): at least half of them
        words = twister.random_raw(need * (1 << k) // n + 64) >> np.uint64(32 - k)
        below = words[words < n][:need]
        kept.append(below)
        need -= len(below)
    return np.concatenate(kept).astype(np.int64) if kept else np.zeros(0, dtype=np.int64)


def _resampled_means(vals: list[float], n_resamples: int, seed: int) -> list[float]:
    """The sorted means of ``n_resamples`` resamples of ``vals``, each summed to the bit as Python's ``sum`` sums
    it (from 0): whole values (EM, its differences) by numpy, exact in any order; others one after another in draw
    order (numpy's running sum where ``sum`` adds plainly, before Python 3.12; ``sum`` itself after)."""
    n = len(vals)
    idx = resample_indices(n, n * n_resamples, seed).reshape(n_resamples, n)
    arr = np.asarray(vals, dtype=np.float64)
    picked = arr[idx]
    if np.all(arr == np.trunc(arr)) and float(np.abs(arr).max()) * n < 2**53:
        sums = picked.sum(axis=1) + 0.0  # + 0.0: sum's start (no -0.0)
    elif sys.version_info < (3, 12):
        picked[:, 0] += 0.0
        sums = np.cumsum(picked, axis=1)[:, -1]
    else:  # sum adds with compensation
        pick = vals.__getitem__
        return sorted(sum(map(pick, row)) / n for row in idx.tolist())
    return sorted((sums / n).tolist())


def bootstrap_ci(
    values: Sequence[float], n_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the mean."""
    vals = [float(v) for v in values]
    if len(vals) < 2:
        return None
    means = _resampled_means(vals, n_resamples, seed)
    return means[int(alpha / 2 * n_resamples)], means[int((1 - alpha / 2) * n_resamples) - 1]


def paired_bootstrap(
    a: dict[str, float], b: dict[str, float], n_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
) -> dict | None:
    """Mean difference a - b over the ids both share, with a paired percentile CI and p(a <= b)."""
    ids = sorted(set(a) & set(b))
    if len(ids) < 2:
        return None
    diffs = [a[i] - b[i] for i in ids]
    n = len(diffs)
    means = _resampled_means(diffs, n_resamples, seed)
    return {
        "diff": sum(diffs) / n,
        "ci": (means[int(alpha / 2 * n_resamples)], means[int((1 - alpha / 2) * n_resamples) - 1]),
        "p_not_better": sum(m <= 0 for m in means) / n_resamples,
        "n": n,
    }
