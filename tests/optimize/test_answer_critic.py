"""Fitting the answer critic (optimize/gate_fitting.py): cases from a recording, feature selection, held-out report."""

from __future__ import annotations

import random

import dspy
import pytest

from optimize.gate_fitting import (
    CANDIDATE_FEATURES,
    CONFIDENCE,
    bootstrap_auroc,
    curves,
    cv_probabilities,
    fit_answer_critic,
    pick_threshold,
    report,
    round_cases,
    select_features,
)
from program.errors import ConfigError
from program.sharp.gate import CRITIC_FEATURES, GATE_FEATURES


def case(qid, label, lp_mean=-0.5, in_evidence=0.0, critic=None, problem=None):
    features = dict.fromkeys(GATE_FEATURES, 0.0)
    features.update(lp_mean=lp_mean, lp_min=lp_mean, p_first=0.5, in_evidence=in_evidence)
    return {"question_id": qid, "form": "bridge", "action": "draft", "answer": "a", "features": features,
            "critic": critic, "critic_problem": problem, "label": label, "f1": float(label)}  # fmt: skip


def separated(n, seed=0, key="in_evidence", critic=False):
    """``n`` questions, two drafts each: ``key`` tells right from wrong, lp_mean is noise; with ``critic`` the
    critic's P(supported) leans the right way too."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        for label in (True, False):
            value = 1.0 if label else 0.0
            kw = {"lp_mean": rng.uniform(-2, 0)} if key == "in_evidence" else {"lp_mean": -0.1 if label else -1.5}
            if key == "in_evidence":
                kw["in_evidence"] = value
            crit = None
            if critic:
                p = rng.uniform(0.6, 0.9) if label else rng.uniform(0.1, 0.5)
                crit = {"p_supported": p, "said_supported": float(p > 0.5), "said_incomplete": 0.0}
            out.append(case(f"{seed}-{i}", label, critic=crit, **kw))
    return out


def test_a_feature_that_separates_right_from_wrong_gives_a_high_held_out_auroc_with_an_ordered_ci():
    fitted = fit_answer_critic(separated(20, 0), separated(15, 1), {"dataset": "toy"})
    gate, rep = fitted["gate"], fitted["report"]
    assert "in_evidence" in gate.features and not gate.needs_critic and fitted["judge"] is None
    assert gate.fitted_on["dataset"] == "toy" and gate.fitted_on["role"] == "gate" and gate.fitted_on["cases"] == 40
    held = rep["gate"]
    assert held["auroc"] == 1.0 and held["auroc_ci"][0] <= held["auroc"] <= held["auroc_ci"][1]
    assert held["drafts"] == 30 and held["questions"] == 15 and held["right"] == 15
    assert rep["generator_confidence"]["auroc"] < 0.8  # the noise feature alone does not separate
    assert rep["fit"] == {"drafts": 40, "questions": 20, "right": 20, "critiqued": 0}
    assert 0.0 <= fitted["threshold"] <= 1.0 and rep["gate_curves"]["roc"][0] == (0.0, 0.0)


def test_the_judge_is_fitted_on_critiqued_drafts_and_reported_next_to_the_critic_alone():
    fit = separated(12, 0, key="lp_mean", critic=True)
    fitted = fit_answer_critic(fit, separated(8, 1, key="lp_mean", critic=True))
    judge, rep = fitted["judge"], fitted["report"]
    assert judge is not None and judge.needs_critic and set(CRITIC_FEATURES) <= set(judge.features)
    assert judge.fitted_on["role"] == "judge"
    assert {"judge", "judge_curves", "gate_on_critiqued", "critic_alone"} <= set(rep)
    assert rep["critic_alone"]["auroc"] == 1.0 and rep["judge"]["drafts"] == 16
    # under 20 critiqued train drafts, no judge
    assert fit_answer_critic(fit[:18], separated(4, 1, key="lp_mean", critic=True))["judge"] is None


def test_discarded_critiques_are_counted_and_not_read_by_the_judge():
    fit = separated(12, 0, key="lp_mean", critic=True)
    for c in fit[:4]:
        c.update(critic=None, critic_problem="no valid verdict (None)")
    held = separated(4, 1, key="lp_mean", critic=True)
    held[0].update(critic=None, critic_problem="unparseable")
    fitted = fit_answer_critic(fit, held)
    assert fitted["report"]["critic_problems"] == 5
    assert fitted["report"]["fit"]["critiqued"] == 20 and fitted["judge"].fitted_on["cases"] == 20
    assert fitted["report"]["judge"]["drafts"] == 7


def test_a_critic_that_cannot_be_fitted_is_a_clear_error():
    with pytest.raises(ConfigError, match="no drafts to fit the answer critic on"):
        fit_answer_critic([], [])
    with pytest.raises(ConfigError, match="need right and wrong answers"):
        fit_answer_critic([case(f"q{i}", True) for i in range(10)], [])


def test_feature_selection_prefers_the_fewest_features_that_separate():
    features, c, table = select_features(separated(20, 0, key="lp_mean"))
    assert features == CONFIDENCE and c == 0.1  # ties: the fewest features, then the stronger regularisation
    assert len(table) == len(CANDIDATE_FEATURES) * 2 and all(row["cv_auroc"] is not None for row in table)
    features, _, _ = select_features(separated(20, 0, key="in_evidence"))
    assert "in_evidence" in features  # the confidence alone is noise here
    assert cv_probabilities(separated(1, 0), CONFIDENCE, 1.0, False) is None  # one question: no fold to hold out


def test_the_report_counts_over_and_under_triggers_at_the_threshold():
    cases = [case("q1", True), case("q1", False), case("q2", True), case("q2", False)]
    rep = report([0.9, 0.7, 0.4, 0.2], cases, 0.5)
    # accepted (p >= 0.5): the right 0.9 and the wrong 0.7; sent to a repair: the right 0.4 and the wrong 0.2
    assert rep["over_trigger"] == 0.5 and rep["under_trigger"] == 0.5 and rep["verdict_accuracy"] == 0.5
    assert rep["brier"] == pytest.approx((0.1**2 + 0.7**2 + 0.6**2 + 0.2**2) / 4)
    assert rep["auroc"] == 0.75 and rep["repair_rate"] == 0.5
    assert (rep["threshold"], rep["drafts"], rep["questions"], rep["right"]) == (0.5, 4, 2, 2)
    strict = report([0.9, 0.7, 0.4, 0.2], cases, 0.8)
    assert strict["under_trigger"] == 0.0 and strict["over_trigger"] == 0.5


def test_pick_threshold_is_the_lowest_that_accepts_few_enough_wrong_drafts():
    probs, labels = [0.9, 0.8, 0.6, 0.3, 0.2], [True, False, True, False, False]
    assert pick_threshold(probs, labels, max_under_trigger=0.2) == 0.9  # 0.8 accepts 1 of 3 wrong drafts
    assert pick_threshold(probs, labels, max_under_trigger=0.4) == 0.6  # 0.3 accepts 2 of 3, 0.6 one
    assert pick_threshold([0.4, 0.7], [True, True]) == 0.4  # no wrong draft: accept everything seen
    assert pick_threshold([0.9, 0.9], [False, False]) == 1.0  # nothing low enough


def test_curves_and_bootstrap():
    assert curves([0.9, 0.1], [True, False]) == {
        "roc": [(0.0, 0.0), (0.0, 1.0), (1.0, 1.0)],
        "reliability": [(0.1, 0.0, 1), (0.9, 1.0, 1)],
    }
    lo, hi = bootstrap_auroc([0.9, 0.2, 0.8, 0.3], [True, False, True, False], ["a", "a", "b", "b"], n=200)
    assert lo == hi == 1.0
    assert bootstrap_auroc([0.9, 0.8], [True, True], ["a", "b"], n=50) == (None, None)  # one label only
    noisy = bootstrap_auroc([0.9, 0.2, 0.3, 0.8], [True, False, True, False], ["a", "a", "b", "b"], n=200, seed=1)
    assert noisy[0] < noisy[1] and noisy == bootstrap_auroc(
        [0.9, 0.2, 0.3, 0.8], [True, False, True, False], ["a", "a", "b", "b"], n=200, seed=1
    )


def _round(action, answer=None, critique=None, fallback=None):
    read = {"question": "q", "answer": answer, "evidence": [{"id": "p1", "title": "Paris", "score": 0.5}],
            "cited_ids": ["p1"], "confidence": {"mean": -0.2, "min": -0.3, "first": 0.9}, "top": None}  # fmt: skip
    return {"action": action, "read": read if answer is not None else None, "fallback": fallback,
            "critique": critique, "steps": [], "calls": [], "seconds": 1.0}  # fmt: skip


def test_round_cases_label_answered_rounds_by_exact_match_settled_as_the_policy_settles_them():
    from program.sharp.policy import SharpConfig

    question = "Which city is older, Paris or Lyon?"
    records = {
        "q1": {"format": 4, "question": question, "form": "comparison", "critiqued": True, "error": None,
               "rounds": [_round("draft", "Paris.", {"verdict": "supported", "p_supported": 0.8, "critic_problem": None}),
                          _round("compare", fallback="the planner wrote 1 sub-question(s): the draft stands"),
                          _round("retrieve", "the city of Lyon",
                                 {"verdict": None, "p_supported": None, "critic_problem": "unparseable"})]},
        "q2": {"error": "LMUnavailableError: down"},
    }  # fmt: skip
    examples = [dspy.Example(id=i, question=question, answer="Paris", answer_aliases=[]) for i in ("q1", "q2", "q3")]
    cases = round_cases(records, examples, SharpConfig())
    assert [(c["action"], c["label"]) for c in cases] == [("draft", True), ("retrieve", False)]
    assert cases[0]["critic"] == {"p_supported": 0.8, "said_supported": 1.0, "said_incomplete": 0.0}
    assert cases[1]["critic"] is None and cases[1]["critic_problem"] == "unparseable"
    assert cases[0]["form"] == "comparison" and cases[0]["question_id"] == "q1"
    # settled as the policy says: "the city of Lyon" names the option Lyon, written as the question writes it
    assert cases[1]["answer"] == "Lyon" and cases[1]["how"] == "option"
    assert cases[1]["features"]["option_miss"] == 0.0 and cases[0]["features"]["action_retrieve"] == 0.0
