"""Fit a logistic regression (scikit-learn) and keep it as plain numbers (program/linear.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from program.errors import ConfigError
from program.linear import LinearModel

M = TypeVar("M", bound=LinearModel)


def fit_linear(
    cls: type[M],
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    features: Sequence[str],
    c: float = 1.0,
    fitted_on: Mapping[str, Any] | None = None,
) -> M:
    """A logistic regression of ``labels`` on ``features`` of ``rows`` (standardised), as a ``cls``."""
    if len(set(map(bool, labels))) < 2:
        raise ConfigError(
            f"cannot fit a {cls.KIND} on {len(rows)} cases that all have the label {bool(labels[0]) if labels else None}"
        )
    missing = sorted({f for row in rows for f in features if f not in row})
    if missing:
        raise ConfigError(f"the cases lack the features {missing}: they were recorded by an older program")
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    x = np.array([[float(row[f]) for f in features] for row in rows])
    means = x.mean(axis=0)
    scales = x.std(axis=0)
    scales[scales == 0] = 1.0
    y = np.array([bool(v) for v in labels], dtype=int)
    model = LogisticRegression(C=c, max_iter=2000).fit((x - means) / scales, y)
    info = {"cases": len(rows), "positives": int(y.sum()), "C": c, **dict(fitted_on or {})}
    return cls.make(features, means, scales, model.coef_[0], float(model.intercept_[0]), info)
