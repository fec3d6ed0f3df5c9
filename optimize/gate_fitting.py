"""Compile the answer critic: its calibrators fitted on recorded train drafts, judged on held-out ones.

1. :func:`round_cases` turns a recording (optimize/replay.py: every round of every question) into one case
   per answered round, settled as a policy settles it (optimize.replay.judged_rounds): the gate's features,
   the critic's verdict features where its reply was usable, and the label "the round's answer is an exact
   match with the gold answer".
2. :func:`fit_answer_critic` chooses the gate's features by question-grouped cross-validation on the fit
   cases (:func:`select_features`), fits the gate (no critic features) and the judge (gate features plus the
   critic's verdict), and reports both on the held-out cases: AUROC with a bootstrap CI over questions,
   Brier, ECE, and the over- and under-trigger rates at a threshold. Where the LM wrote no token
   log-probabilities (no round has them: :func:`has_logprobs`), the candidates leave those features out
   (:func:`without_logprobs`) and the report says so (``logprobs``: false).

Only plain numbers leave here (program.sharp.gate.AnswerCalibrator); the pictures of the report (ROC,
reliability diagram) are drawn and logged by experiments/.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from optimize.linear import fit_linear
from optimize.metrics import auroc, calibration, exact_match, f1_score, gold_answers
from optimize.replay import judged_rounds
from program.errors import ConfigError
from program.sharp.gate import CRITIC_FEATURES, GATE_FEATURES, AnswerCalibrator, critic_features
from program.sharp.rounds import PassageLookup, titles_only

# the gate's candidate inputs, from the generator's own confidence alone to everything the round knows;
# question-grouped cross-validation on the fit cases chooses one (a 18-feature regression over a few hundred
# drafts can rank worse than a smaller one)
CONFIDENCE = ("lp_mean", "lp_min", "p_first", "lp_missing")
FORM = ("unknown", "answer_words", "form_comparison", "form_yesno", "option_miss", "yesno_mismatch")
EVIDENCE = ("in_evidence", "in_question", "score_1", "score_2", "score_3")
# what separates the reader's own mistakes: the answer's type, the intermediate entity, the yes/no margin,
# a span of a cited passage, how code settled it and agreement between reads
MISTAKES = ("type_mismatch", "names_passage", "yes_margin", "in_cited", "by_code", "agrees_draft")
ROUND = ("action_retrieve", "action_compare", "action_focus")
# what a chain round knows of its hops (zeros for every other round)
CHAIN = ("action_chain", "chain_by_rule", "hop_lp_min", "hop_mismatch", "hop_titled")
CANDIDATE_FEATURES: tuple[tuple[str, ...], ...] = (
    CONFIDENCE,
    CONFIDENCE + FORM,
    CONFIDENCE + FORM + MISTAKES,
    CONFIDENCE + FORM + EVIDENCE + MISTAKES,
    GATE_FEATURES,
)
CANDIDATE_C = (0.1, 1.0)
# the features read from the LM's token log-probabilities: constant (their stand-ins) where the LM returned none
LOGPROB_FEATURES = ("lp_mean", "lp_min", "p_first", "lp_missing", "yes_margin", "hop_lp_min")


def has_logprobs(cases: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any round of ``cases`` was read with token log-probabilities (many API models return none)."""
    return any(not c["features"].get("lp_missing", 1.0) for c in cases)


def without_logprobs(candidates: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """``candidates`` with the log-probability features left out (a set left empty, or repeated, dropped): what
    a gate can read of rounds an LM wrote without them (agreement between reads, spans, the answer's type)."""
    out: list[tuple[str, ...]] = []
    for features in candidates:
        kept = tuple(f for f in features if f not in LOGPROB_FEATURES)
        if kept and kept not in out:
            out.append(kept)
    return tuple(out)


def round_cases(
    records: Mapping[str, dict], examples: Iterable[Any], policy: Any, passages: PassageLookup = titles_only
) -> list[dict]:
    """One case per answered round of every usable record of ``examples``, settled as ``policy`` settles it."""
    cases = []
    for ex in examples:
        rec = records.get(ex.id)
        if not rec or rec.get("error"):
            continue
        golds = gold_answers(ex)
        for rnd in judged_rounds(rec, policy, passages).rounds:
            if rnd.answer is None or rnd.features is None:
                continue
            critique = rnd.critique if rnd.critic_used else None
            cases.append(
                {
                    "question_id": ex.id,
                    "form": rec["form"],
                    "action": rnd.action,
                    "answer": rnd.answer,
                    "how": rnd.how,
                    "features": dict(rnd.features),
                    "critic": critic_features(critique),
                    "critic_problem": (critique or {}).get("critic_problem"),
                    "label": bool(exact_match(rnd.answer, golds)),
                    "f1": f1_score(rnd.answer, golds),
                }
            )
    return cases


def rows_of(cases: Sequence[Mapping[str, Any]], with_critic: bool) -> list[dict]:
    return [{**c["features"], **(c["critic"] or {})} if with_critic else dict(c["features"]) for c in cases]


def cv_probabilities(
    cases: Sequence[Mapping[str, Any]], features: Sequence[str], c: float, with_critic: bool, folds: int = 5
) -> list[float] | None:
    """Out-of-fold probabilities (question-grouped k-fold), or None when a fold cannot be fitted."""
    groups = sorted({case["question_id"] for case in cases}, key=str)
    if len(groups) < 2:
        return None
    k = min(folds, len(groups))
    fold_of = {g: i % k for i, g in enumerate(groups)}
    rows = rows_of(cases, with_critic)
    probs = [0.0] * len(cases)
    for fold in range(k):
        train = [i for i, case in enumerate(cases) if fold_of[case["question_id"]] != fold]
        if len({cases[i]["label"] for i in train}) < 2:
            return None
        model = fit_linear(AnswerCalibrator, [rows[i] for i in train], [cases[i]["label"] for i in train], features, c)
        for i, case in enumerate(cases):
            if fold_of[case["question_id"]] == fold:
                probs[i] = model.probability(rows[i])
    return probs


def _auroc(probs: Sequence[float], labels: Sequence[bool]) -> float | None:
    return auroc([p for p, y in zip(probs, labels) if y], [p for p, y in zip(probs, labels) if not y])


def select_features(
    cases: Sequence[Mapping[str, Any]],
    candidates: Sequence[Sequence[str]] = CANDIDATE_FEATURES,
    cs: Sequence[float] = CANDIDATE_C,
    with_critic: bool = False,
) -> tuple[tuple[str, ...], float, list[dict]]:
    """The (features, C) with the best question-grouped cross-validated AUROC on ``cases`` (ties: fewer
    features, then stronger regularisation), and every candidate's score."""
    table = []
    labels = [c["label"] for c in cases]
    for features in candidates:
        feats = tuple(features) + (CRITIC_FEATURES if with_critic else ())
        for c in cs:
            probs = cv_probabilities(cases, feats, c, with_critic)
            table.append({"features": list(feats), "C": c, "cv_auroc": _auroc(probs, labels) if probs else None})
    scored = [row for row in table if row["cv_auroc"] is not None]
    if not scored:
        raise ConfigError(f"cannot fit the answer critic on {len(cases)} drafts: they need right and wrong answers")
    best = max(scored, key=lambda r: (round(r["cv_auroc"], 4), -len(r["features"]), -r["C"]))
    return tuple(best["features"]), best["C"], table


def bootstrap_auroc(
    probs: Sequence[float], labels: Sequence[bool], groups: Sequence[Any], n: int = 1000, seed: int = 0
) -> tuple[float | None, float | None]:
    """A 95% percentile CI of the AUROC, resampling questions (all drafts of a question together)."""
    by_group: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    keys = list(by_group)
    rng = random.Random(seed)
    values = []
    for _ in range(n):
        idx = [i for g in (rng.choice(keys) for _ in keys) for i in by_group[g]]
        v = _auroc([probs[i] for i in idx], [labels[i] for i in idx])
        if v is not None:
            values.append(v)
    if not values:
        return None, None
    values.sort()
    return values[int(0.025 * (len(values) - 1))], values[int(0.975 * (len(values) - 1))]


def report(
    probs: Sequence[float],
    cases: Sequence[Mapping[str, Any]],
    threshold: float | Sequence[float],
    seed: int = 0,
) -> dict[str, Any]:
    """The critic's probabilities on ``cases``: AUROC [bootstrap CI], Brier, ECE, and the over-trigger (right
    drafts sent to a repair) and under-trigger (wrong drafts accepted) rates at ``threshold`` (one for every
    case, or each case's own: drafts pooled from programs with different gates)."""
    labels = [bool(c["label"]) for c in cases]
    each = [float(threshold)] * len(cases) if isinstance(threshold, (int, float)) else [float(t) for t in threshold]
    if len(each) != len(cases):
        raise ValueError(f"report: {len(each)} thresholds for {len(cases)} cases")
    points = [{"p": float(p), "label": y, "stop_call": p >= t} for p, y, t in zip(probs, labels, each)]
    out = calibration(points)
    lo, hi = bootstrap_auroc(probs, labels, [c["question_id"] for c in cases], seed=seed)
    out.update(
        threshold=threshold if isinstance(threshold, (int, float)) else "each case's own",
        auroc_ci=[lo, hi],
        drafts=len(cases),
        questions=len({c["question_id"] for c in cases}),
        right=int(sum(labels)),
    )
    return out


def curves(probs: Sequence[float], labels: Sequence[bool], bins: int = 10) -> dict[str, list]:
    """The points of the ROC curve and of the reliability diagram (what experiments/ draws)."""
    pos, neg = sum(labels), len(labels) - sum(labels)
    roc = [(0.0, 0.0)]
    for t in sorted(set(probs), reverse=True):
        tp = sum(p >= t and y for p, y in zip(probs, labels))
        fp = sum(p >= t and not y for p, y in zip(probs, labels))
        roc.append((fp / neg if neg else 0.0, tp / pos if pos else 0.0))
    reliability = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [(p, y) for p, y in zip(probs, labels) if lo <= p < hi or (b == bins - 1 and p == 1.0)]
        if members:
            reliability.append(
                (sum(p for p, _ in members) / len(members), sum(y for _, y in members) / len(members), len(members))
            )
    return {"roc": roc, "reliability": reliability}


def pick_threshold(probs: Sequence[float], labels: Sequence[bool], max_under_trigger: float = 0.2) -> float:
    """The lowest threshold (fewest right drafts sent to a repair) that accepts at most ``max_under_trigger``
    of the wrong drafts: a starting point for ``sharp tune``, which chooses by EM and cost."""
    values = sorted({round(float(p), 4) for p in probs})
    negatives = [p for p, y in zip(probs, labels) if not y]
    for t in values:
        if not negatives or sum(p >= t for p in negatives) / len(negatives) <= max_under_trigger:
            return t
    return 1.0


def _fit_judge(
    critiqued: Sequence[Mapping[str, Any]],
    heldout: Sequence[Mapping[str, Any]],
    features: Sequence[str],
    c: float,
    info: dict,
    gate: AnswerCalibrator,
    threshold: float,
    seed: int,
    rep: dict[str, Any],
) -> AnswerCalibrator:
    """The judge (the gate's features plus the critic's) fitted on the ``critiqued`` drafts; where held-out
    drafts were critiqued, ``rep`` gets the judge's, the gate's and the critic's own reports on them."""
    judge = fit_linear(
        AnswerCalibrator,
        rows_of(critiqued, True),
        [x["label"] for x in critiqued],
        tuple(features) + CRITIC_FEATURES,
        c,
        {**info, "role": "judge"},
    )
    held_c = [x for x in heldout if x["critic"] is not None]
    if held_c:
        rep["judge"] = report([judge.probability(r) for r in rows_of(held_c, True)], held_c, threshold, seed)
        rep["judge_curves"] = curves(
            [judge.probability(r) for r in rows_of(held_c, True)], [x["label"] for x in held_c]
        )
        rep["gate_on_critiqued"] = report(
            [gate.probability(r) for r in rows_of(held_c, False)], held_c, threshold, seed
        )
        rep["critic_alone"] = report([x["critic"]["p_supported"] for x in held_c], held_c, threshold, seed)
    return judge


def fit_answer_critic(
    fit: Sequence[Mapping[str, Any]],
    heldout: Sequence[Mapping[str, Any]],
    fitted_on: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The gate and (where the critic's verdicts allow) the judge fitted on ``fit``, each reported on
    ``heldout``: ``{"gate": AnswerCalibrator, "judge": AnswerCalibrator | None, "report": {...}}``."""
    if not fit:
        raise ConfigError("no drafts to fit the answer critic on: record train questions first")
    info = dict(fitted_on or {})
    logprobs = has_logprobs(fit)
    features, c, table = select_features(fit, CANDIDATE_FEATURES if logprobs else without_logprobs(CANDIDATE_FEATURES))
    gate = fit_linear(
        AnswerCalibrator, rows_of(fit, False), [x["label"] for x in fit], features, c, {**info, "role": "gate"}
    )
    gate_fit_probs = cv_probabilities(fit, features, c, False) or [gate.probability(r) for r in rows_of(fit, False)]
    threshold = pick_threshold(gate_fit_probs, [x["label"] for x in fit])
    out: dict[str, Any] = {"gate": gate, "judge": None, "threshold": threshold}
    rep: dict[str, Any] = {"selection": table, "fit": _counts(fit), "heldout": _counts(heldout), "logprobs": logprobs}
    if heldout:
        held = [gate.probability(r) for r in rows_of(heldout, False)]
        rep["gate"] = report(held, heldout, threshold, seed)
        rep["gate_curves"] = curves(held, [x["label"] for x in heldout])
        if logprobs:  # the reader's own confidence, where it wrote any
            rep["generator_confidence"] = report(
                [math.exp(x["features"]["lp_mean"]) for x in heldout], heldout, threshold, seed
            )
    critiqued = [x for x in fit if x["critic"] is not None]
    if len({x["label"] for x in critiqued}) == 2 and len(critiqued) >= 20:
        out["judge"] = _fit_judge(critiqued, heldout, features, c, info, gate, threshold, seed, rep)
    rep["critic_problems"] = sum(1 for x in [*fit, *heldout] if x["critic_problem"])
    out["report"] = rep
    return out


def _counts(cases: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {
        "drafts": len(cases),
        "questions": len({c["question_id"] for c in cases}),
        "right": sum(bool(c["label"]) for c in cases),
        "critiqued": sum(c["critic"] is not None for c in cases),
    }
