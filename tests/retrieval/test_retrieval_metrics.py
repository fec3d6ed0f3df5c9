"""optimize.retrieval_metrics on hand-checked cases."""

from __future__ import annotations

import pytest

from optimize.retrieval_metrics import aggregate, all_gold_at_k, precision_at_k, question_metrics, recall_at_k

RETRIEVED = ["A", "x", "B ", "y", "a", "z"]  # "a" repeats A (case), "B " has a trailing space
GOLD = ["a", "b", "c"]


def test_recall_precision_all_gold():
    assert recall_at_k(RETRIEVED, GOLD, 1) == pytest.approx(1 / 3)
    assert recall_at_k(RETRIEVED, GOLD, 3) == pytest.approx(2 / 3)
    assert recall_at_k(RETRIEVED, ["a", "b"], 3) == 1.0
    assert precision_at_k(RETRIEVED, GOLD, 2) == 0.5
    assert precision_at_k(RETRIEVED, GOLD, 5) == pytest.approx(3 / 5)  # A, B, a
    assert precision_at_k(RETRIEVED, GOLD, 10) == pytest.approx(3 / 10)  # divided by k, not by 6
    assert all_gold_at_k(RETRIEVED, ["a", "b"], 2) == 0.0
    assert all_gold_at_k(RETRIEVED, ["a", "b"], 3) == 1.0
    assert all_gold_at_k(RETRIEVED, GOLD, 6) == 0.0


def test_question_metrics_keys():
    m = question_metrics(["A", "B"], ["A", "C"], ks=(1, 2))
    assert m == {
        "recall@1": 0.5,
        "precision@1": 1.0,
        "all_gold@1": 0.0,
        "recall@2": 0.5,
        "precision@2": 0.5,
        "all_gold@2": 0.0,
    }


def test_undefined_cases():
    with pytest.raises(ValueError):
        recall_at_k(["A"], [], 1)
    with pytest.raises(ValueError):
        precision_at_k(["A"], ["A"], 0)


def test_aggregate_overall_and_by_type():
    rows = [
        ("bridge", ["A", "B"], ["A", "B"]),  # r@1 .5, r@2 1, ag@2 1
        ("bridge", ["C", "A"], ["A", "D"]),  # r@1 0, r@2 .5, ag@2 0
        ("comparison", ["E", "F"], ["F"]),  # r@1 0, r@2 1, ag@2 1
        (None, ["G"], ["G"]),  # r@1 1, r@2 1, ag@2 1 ; type -> unknown
        ("bridge", ["A"], []),  # no gold: skipped
    ]
    out = aggregate(rows, ks=(1, 2))
    assert out["skipped"] == 1
    o = out["overall"]
    assert o["n"] == 4
    assert o["recall@1"] == pytest.approx((0.5 + 0 + 0 + 1) / 4)
    assert o["recall@2"] == pytest.approx((1 + 0.5 + 1 + 1) / 4)
    assert o["all_gold@2"] == pytest.approx(3 / 4)
    assert o["precision@2"] == pytest.approx((1 + 0.5 + 0.5 + 0.5) / 4)  # G: 1 hit / k=2
    assert list(out["by_type"]) == ["bridge", "comparison", "unknown"]
    assert out["by_type"]["bridge"]["n"] == 2 and out["by_type"]["bridge"]["recall@2"] == pytest.approx(0.75)
    assert out["by_type"]["unknown"]["all_gold@1"] == 1.0
    assert aggregate([], ks=(1,)) == {"overall": {"n": 0}, "by_type": {}, "skipped": 0}
    assert aggregate(rows, ks=(1, 2)) == out  # deterministic
