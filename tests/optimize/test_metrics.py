"""Metrics on hand-checked cases."""

from __future__ import annotations

import dspy
import pytest

from optimize.metrics import (
    answer_em,
    answer_f1,
    calibration,
    critic_points,
    normalize_answer,
    question_row,
    retrieval_scores,
)
from optimize.stats import bootstrap_ci, paired_bootstrap
from program.types import Passage


def ex(answer="Quentin Tarantino", aliases=(), gold=("A", "B"), type_="bridge"):
    return dspy.Example(
        id="q1", question="Who?", answer=answer, answer_aliases=list(aliases), gold_titles=list(gold), type=type_
    ).with_inputs("question")


def pred(answer, titles=("A", "C"), trace=()):
    return dspy.Prediction(
        answer=answer,
        passages=[Passage(t, t, "x") for t in titles],
        trace=list(trace),
        cost={
            "lm_calls": 3,
            "prompt_tokens": 30,
            "completion_tokens": 3,
            "lm_seconds": 1.0,
            "cached_calls": 1,
            "by_role": {},
        },
        retries=1,
        stop_reason="sufficient",
    )


def test_official_normalization():
    assert normalize_answer("The  Quentin, Tarantino!") == "quentin tarantino"


@pytest.mark.parametrize(
    "answer,em,f1",
    [
        ("Quentin Tarantino", 1.0, 1.0),
        ("the quentin tarantino.", 1.0, 1.0),
        ("Tarantino", 0.0, 2 * (1 * 0.5) / 1.5),
        ("Steven Spielberg", 0.0, 0.0),
    ],
)
def test_em_f1(answer, em, f1):
    assert answer_em(ex(), pred(answer)) == em
    assert answer_f1(ex(), pred(answer)) == pytest.approx(f1)


def test_aliases_count_and_yes_no_gets_no_partial_credit():
    assert answer_em(ex("United States", ["USA", "America"]), pred("america")) == 1.0
    assert answer_f1(ex("yes"), pred("yes it is")) == 0.0


def test_retrieval_scores():
    s = retrieval_scores(ex(), pred("x", titles=("A", "C", "D", "B")))
    assert s == {"recall": 1.0, "precision": 0.5, "all_gold": 1.0}
    s = retrieval_scores(ex(), pred("x", titles=("a", "C")))
    assert s["recall"] == 0.5 and s["all_gold"] == 0.0
    assert retrieval_scores(ex(gold=()), pred("x"))["recall"] is None


def crit_step(verdict, conf, titles, action):
    return {"role": "critic", "verdict": verdict, "confidence": conf, "evidence_titles": list(titles), "action": action}


def test_calibration_hand_checked():
    trace = [
        crit_step("insufficient", 0.8, ["A", "B"], "retry"),  # complete but retried: over-trigger
        crit_step("sufficient", 0.9, ["A"], "stop"),  # incomplete but stopped: under-trigger
        crit_step("insufficient", 0.6, ["A"], "retry"),  # correct
        crit_step("sufficient", 1.0, ["A", "B", "C"], "stop"),
    ]  # correct
    pts = critic_points(ex(), pred("x", trace=trace))
    assert [p["label"] for p in pts] == [True, False, False, True]
    assert [p["p_sufficient"] for p in pts] == pytest.approx([0.2, 0.9, 0.4, 1.0])
    cal = calibration(pts)
    assert cal["verdict_accuracy"] == 0.5
    assert cal["brier"] == pytest.approx(((0.2 - 1) ** 2 + 0.9**2 + 0.4**2 + 0) / 4)
    assert cal["over_trigger"] == 0.5 and cal["under_trigger"] == 0.5
    assert cal["insufficient_rate"] == 0.5
    # bins: 0.2 (label 1), 0.4 (0), 0.9 (0), 1.0 (1) -> |0.2-1| + |0.4-0| + |0.9-0| + |1-1| over 4
    assert cal["ece"] == pytest.approx((0.8 + 0.4 + 0.9 + 0.0) / 4)
    # complete: 0.2, 1.0; incomplete: 0.9, 0.4 -> pairs won: (1.0 > both) 2, (0.2 > neither) 0 -> 2 / 4
    assert cal["auroc"] == 0.5
    assert calibration([])["brier"] is None


def test_a_discarded_critique_counts_as_unknown_not_as_certainly_sufficient():
    # "insufficient, 0.0" is how a discarded critique is recorded; read verbally it would be P = 1.0
    legacy = {**crit_step("insufficient", 0.0, ["A"], "retry"), "critic_problem": "unparseable"}
    recorded = {**legacy, "p_sufficient": 0.5, "confidence_source": "fallback"}
    valid = crit_step("insufficient", 0.0, ["A"], "retry")
    pts = critic_points(ex(), pred("x", trace=[legacy, recorded, valid]))
    assert [p["p_sufficient"] for p in pts] == [0.5, 0.5, 1.0]
    assert [p["problem"] for p in pts] == ["unparseable", "unparseable", None]


def test_auroc_counts_ties_half_and_needs_both_classes():
    from optimize.metrics import auroc

    assert auroc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auroc([0.1], [0.9]) == 0.0
    assert auroc([0.5, 0.5], [0.5]) == 0.5
    assert auroc([0.9], []) is None


def test_question_row_carries_cost_and_scores():
    row = question_row(ex(), pred("Quentin Tarantino"))
    assert row["em"] == 1.0 and row["lm_calls"] == 3 and row["cached_calls"] == 1 and row["recall"] == 0.5


def test_bootstrap_intervals_cover_the_mean_and_are_seeded():
    vals = [1.0] * 30 + [0.0] * 70
    lo, hi = bootstrap_ci(vals, seed=1)
    assert lo < 0.3 < hi and hi - lo > 0.1
    assert bootstrap_ci(vals, seed=1) == (lo, hi)
    assert bootstrap_ci([1.0]) is None
    a = {str(i): 1.0 for i in range(50)}
    b = {str(i): float(i % 2) for i in range(50)}
    d = paired_bootstrap(a, b)
    assert d["diff"] == 0.5 and d["ci"][0] > 0 and d["p_not_better"] == 0.0


def test_calibration_judges_the_call_the_program_made_not_the_written_verdict():
    # the 1.5B critic writes "insufficient" while its tokens say P(sufficient) 0.8: SHARP stops
    def token_step(p, titles, stop):
        return {
            **crit_step("insufficient", 0.2, titles, "stop" if stop else "retry"),
            "p_sufficient": p,
            "confidence_source": "token",
            "critic_stop": stop,
        }

    trace = [
        token_step(0.8, ["A", "B"], True),  # complete, stopped: right
        token_step(0.6, ["A"], True),  # incomplete, stopped: under-trigger
        token_step(0.1, ["A"], False),
    ]  # incomplete, searched again: right
    cal = calibration(critic_points(ex(), pred("x", trace=trace)))
    assert cal["verdict_accuracy"] == pytest.approx(2 / 3)
    assert cal["under_trigger"] == 0.5 and cal["over_trigger"] == 0.0
    assert cal["insufficient_rate"] == pytest.approx(1 / 3)
    # a token point recorded before the call was stored: read at the default threshold (0.35)
    legacy = [
        {k: v for k, v in token_step(0.4, ["A", "B"], True).items() if k != "critic_stop"},
        {k: v for k, v in token_step(0.3, ["A", "B"], False).items() if k != "critic_stop"},
    ]
    assert calibration(critic_points(ex(), pred("x", trace=legacy)))["over_trigger"] == 0.5
