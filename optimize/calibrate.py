"""Fit the critic's calibrator on labelled critiques, and judge any P(sufficient) against the labels.

A case is one critique a program made on a train question: its features (program.calibration, recorded in
the critic's trace step) and the label "the evidence held every gold paragraph". :func:`fit_calibrator`
fits a logistic regression (scikit-learn) on standardised features and returns it as plain numbers
(:class:`program.calibration.Calibrator`); :func:`report` gives AUROC, Brier, ECE and the over- and
under-trigger rates of the stop call at a threshold; :func:`pick_threshold` chooses the threshold with the
fewest under-triggers among those that over-trigger at most a given share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optimize.metrics import calibration
from program.calibration import FEATURES, Calibrator, make_calibrator
from program.errors import ConfigError

# The calibrator's default inputs: the critic's own probability and what retrieval knows.
DEFAULT_FEATURES = FEATURES


def _matrix(cases: Sequence[Mapping[str, Any]], features: Sequence[str]) -> list[list[float]]:
    missing = sorted({f for c in cases for f in features if f not in c["features"]})
    if missing:
        raise ConfigError(
            f"the critiques lack the features {missing}: they were recorded by an older program; harvest again"
        )
    return [[float(c["features"][f]) for f in features] for c in cases]


def fit_calibrator(
    cases: Sequence[Mapping[str, Any]],
    features: Sequence[str] = DEFAULT_FEATURES,
    c: float = 1.0,
    fitted_on: Mapping[str, Any] | None = None,
) -> Calibrator:
    """A logistic regression of ``label`` on ``features`` (standardised), as a Calibrator."""
    labels = [bool(case["label"]) for case in cases]
    if len(set(labels)) < 2:
        raise ConfigError(
            f"cannot fit a calibrator on {len(cases)} critiques that all have the label {labels[:1]}: "
            "harvest more questions (some must reach complete evidence and some not)"
        )
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    x = np.array(_matrix(cases, features))
    means = x.mean(axis=0)
    scales = x.std(axis=0)
    scales[scales == 0] = 1.0
    model = LogisticRegression(C=c, max_iter=1000).fit((x - means) / scales, np.array(labels, dtype=int))
    info = {"cases": len(cases), "complete": int(sum(labels)), "C": c, **dict(fitted_on or {})}
    return make_calibrator(features, means, scales, model.coef_[0], float(model.intercept_[0]), info)


def probabilities(calibrator: Calibrator, cases: Sequence[Mapping[str, Any]]) -> list[float]:
    return [calibrator.probability(case["features"]) for case in cases]


def report(probs: Sequence[float], labels: Sequence[bool], threshold: float) -> dict:
    """AUROC, Brier, ECE, accuracy and trigger rates of stopping when P(sufficient) >= ``threshold``."""
    points = [
        {"p_sufficient": float(p), "label": bool(y), "stop_call": p >= threshold, "source": "calibrated"}
        for p, y in zip(probs, labels)
    ]
    out = calibration(points)
    out["threshold"] = threshold
    return out


def pick_threshold(probs: Sequence[float], labels: Sequence[bool], max_over_trigger: float = 0.15) -> float:
    """The threshold with the fewest under-triggers (incomplete evidence let through) among those that send
    at most ``max_over_trigger`` of the complete evidence back for more. Candidates lie halfway between
    neighbouring probabilities (and at 0 and 1), so a rounded threshold never lands on a case."""
    values = sorted({float(p) for p in probs})
    candidates = [0.0, *(round((a + b) / 2, 4) for a, b in zip(values, values[1:])), 1.0]
    best, best_under = 1.0, None
    for t in candidates:
        r = report(probs, labels, t)
        over, under = r["over_trigger"] or 0.0, r["under_trigger"] or 0.0
        if over <= max_over_trigger and (best_under is None or under < best_under):
            best, best_under = t, under
    return best
