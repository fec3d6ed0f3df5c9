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
        stop_reason="confident",
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


def judged(answer, p, accepted, action="draft", verdict=None, source="gate"):
    return {"role": "judgement", "round": 0, "action": action, "answer": answer, "p_gate": p, "verdict": verdict,
            "p_right": p, "source": source, "accepted": accepted}  # fmt: skip


def test_critic_points_are_the_judged_rounds_labelled_by_their_answers():
    trace = [
        {"role": "retriever", "queries": ["Who?"]},
        {"role": "critic", "verdict": "supported", "p_supported": 0.9},  # the critic's own step is no point
        judged("quentin tarantino.", 0.2, False),  # right, sent to a repair: over-trigger
        judged(None, None, False, "decompose"),  # a decomposed read that fell back: no point
        judged("Steven Spielberg", 0.9, True, "retrieve", "supported", "judge"),  # wrong, accepted: under-trigger
        {"role": "select", "round": 0, "answer": "quentin tarantino."},
    ]
    pts = critic_points(ex(), pred("x", trace=trace))
    assert pts == [
        {"p": 0.2, "source": "gate", "verdict": None, "label": True, "action": "draft", "stop_call": False},
        {"p": 0.9, "source": "judge", "verdict": "supported", "label": False, "action": "retrieve", "stop_call": True},
    ]
    assert critic_points(ex(), pred("x", trace=[{"role": "critic", "verdict": "sufficient"}])) == []


HAND_CHECKED = [(0.2, True, False), (0.9, False, True), (0.4, False, False), (1.0, True, True)]  # p, label, call


def check_hand_checked(cal):
    assert cal["verdict_accuracy"] == 0.5
    assert cal["brier"] == pytest.approx(((0.2 - 1) ** 2 + 0.9**2 + 0.4**2 + 0) / 4)
    assert cal["over_trigger"] == 0.5 and cal["under_trigger"] == 0.5
    assert cal["repair_rate"] == 0.5
    # bins: 0.2 (label 1), 0.4 (0), 0.9 (0), 1.0 (1) -> |0.2-1| + |0.4-0| + |0.9-0| + |1-1| over 4
    assert cal["ece"] == pytest.approx((0.8 + 0.4 + 0.9 + 0.0) / 4)
    # positives: 0.2, 1.0; negatives: 0.9, 0.4 -> pairs won: (1.0 > both) 2, (0.2 > neither) 0 -> 2 / 4
    assert cal["auroc"] == 0.5


def test_calibration_hand_checked_on_answer_critic_points():
    trace = [judged("Quentin Tarantino" if y else "Spielberg", p, call) for p, y, call in HAND_CHECKED]
    check_hand_checked(calibration(critic_points(ex(), pred("x", trace=trace))))
    assert calibration([])["brier"] is None


def test_calibration_reads_the_evidence_critics_points_of_older_runs_alike():
    """Compact rows of runs before the answer critic hold P(sufficient) points, each with its call: the same
    numbers give the same report (point_p)."""
    from optimize.evaluate import compact_row
    from optimize.metrics import point_p

    old = [{"p_sufficient": p, "label": y, "stop_call": call, "source": "token"} for p, y, call in HAND_CHECKED]
    check_hand_checked(calibration(old))
    new = [{"p": p, "label": y, "stop_call": call} for p, y, call in HAND_CHECKED]
    assert calibration(old) == calibration(new)
    assert point_p({"p": 0.3}) == 0.3 and point_p({"p_sufficient": 0.7}) == 0.7
    # compact rows keep either kind of point's numbers
    row = {"id": "q1", "critic_points": [{**new[0], "source": "gate", "verdict": None}, old[1]]}
    kept = compact_row(row)["critic_points"]
    assert kept[0]["p"] == 0.2 and kept[1]["p_sufficient"] == 0.9 and all("label" in k for k in kept)


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


@pytest.mark.parametrize("n", [2, 7, 8, 64, 127, 128, 130, 259])
def test_the_bulk_bootstrap_draws_the_same_resamples_as_randrange_to_the_bit(n):
    import random

    from experiments.lab.benchmarks.bootstrap import reference_ci, reference_paired  # one randrange a draw
    from optimize.stats import resample_indices

    rng = random.Random(n)
    for seed in (0, 3):
        draws = random.Random(seed)
        assert resample_indices(n, 500, seed).tolist() == [draws.randrange(n) for _ in range(500)]
        em = [float(rng.random() < 0.4) for _ in range(n)]  # whole values: summed by numpy
        f1 = [rng.random() for _ in range(n)]  # fractions: summed in draw order
        for vals in (em, f1):
            assert bootstrap_ci(vals, seed=seed) == reference_ci(vals, seed=seed)
        a = {str(i): f for i, f in enumerate(f1)}
        b = {str(i): e for i, e in enumerate(em)}
        assert paired_bootstrap(a, b, seed=seed) == reference_paired(a, b, seed=seed)
