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

from optimize.linear import fit_linear
from optimize.metrics import calibration
from program.calibration import FEATURES, Calibrator
from program.errors import ConfigError

# The calibrator's default inputs: the critic's own probability and what retrieval knows.
DEFAULT_FEATURES = FEATURES


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
    missing = sorted({f for case in cases for f in features if f not in case["features"]})
    if missing:
        raise ConfigError(
            f"the critiques lack the features {missing}: they were recorded by an older program; harvest again"
        )
    info = {"complete": int(sum(labels)), **dict(fitted_on or {})}
    return fit_linear(Calibrator, [case["features"] for case in cases], labels, features, c, info)


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


# Feature sets :func:`select_features` chooses among: the critic's own probability alone (a monotone
# recalibration: it moves the threshold, not the ranking), plus the retriever's scores, plus whether the
# evidence names every entity of the question, and everything. A 10-feature regression over a hundred
# critiques can rank worse than its best single input; cross-validation by question decides.
CANDIDATE_FEATURES: tuple[tuple[str, ...], ...] = (
    ("p_token",),
    ("p_token", "score_2", "score_3"),
    ("p_token", "question_covered"),
    ("p_token", "score_2", "score_3", "question_covered"),
    FEATURES,
)
CANDIDATE_C = (0.1, 1.0)


def cv_auroc(
    cases: Sequence[Mapping[str, Any]], groups: Sequence[Any], features: Sequence[str], c: float, folds: int = 5
) -> float | None:
    """AUROC of a calibrator over ``features`` on critiques of questions it was not fitted on (grouped
    k-fold: every critique of a question falls in one fold); None when a fold cannot be fitted."""
    from optimize.metrics import auroc

    group_ids = sorted(set(groups), key=str)
    if len(group_ids) < 2:
        return None
    k = min(folds, len(group_ids))
    fold_of = {g: i % k for i, g in enumerate(group_ids)}
    probs: list[float] = [0.0] * len(cases)
    for fold in range(k):
        train = [case for case, g in zip(cases, groups) if fold_of[g] != fold]
        if len({bool(case["label"]) for case in train}) < 2:
            return None
        cal = fit_calibrator(train, features, c)
        for i, (case, g) in enumerate(zip(cases, groups)):
            if fold_of[g] == fold:
                probs[i] = cal.probability(case["features"])
    labels = [bool(case["label"]) for case in cases]
    return auroc([p for p, y in zip(probs, labels) if y], [p for p, y in zip(probs, labels) if not y])


def select_features(
    cases: Sequence[Mapping[str, Any]],
    groups: Sequence[Any],
    candidates: Sequence[Sequence[str]] = CANDIDATE_FEATURES,
    cs: Sequence[float] = CANDIDATE_C,
) -> tuple[tuple[str, ...], float, list[dict]]:
    """The (features, C) with the best grouped cross-validated AUROC on ``cases`` (ties: the fewer
    features, then the stronger regularisation), and every candidate's score."""
    table = []
    for features in candidates:
        for c in cs:
            table.append({"features": list(features), "C": c, "cv_auroc": cv_auroc(cases, groups, features, c)})
    scored = [row for row in table if row["cv_auroc"] is not None]
    if not scored:
        return tuple(candidates[0]), cs[0], table
    best = max(scored, key=lambda r: (round(r["cv_auroc"], 4), -len(r["features"]), -r["C"]))
    return tuple(best["features"]), best["C"], table
