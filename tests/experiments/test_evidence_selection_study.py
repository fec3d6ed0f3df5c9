"""Evidence selection rules replayed from a trace: round-robin is SHARP's own, RRF rewards agreement."""

from __future__ import annotations

from experiments.lab.studies.evidence_selection import pooled, question_first, round_robin, rrf, score

TRACE = [
    {"role": "retriever", "queries": ["q", "a"], "retrieved_ids": [["1", "2", "3"], ["4", "2", "5"]]},
    {"role": "critic"},
    {"role": "retriever", "queries": ["b"], "retrieved_ids": [["6", "2"]]},
]


def test_rules_on_a_pooled_trace():
    pool = pooled(TRACE)
    assert round_robin(pool, 4) == ["1", "4", "6", "2"]
    assert rrf(pool, 2) == ["2", "1"]  # found by all three queries
    assert question_first(pool, 4) == ["1", "2", "4", "6"]


def test_score_counts_recall_and_all_gold_by_title():
    titles = {"1": "A", "2": "B", "4": "C", "6": "D"}
    rows = [{"id": "x", "trace": TRACE}]
    out = score(rows, {"x": {"b", "d"}}, titles, [2, 4])
    assert out["round-robin@2"] == {"n": 1, "recall": 0.0, "all_gold": 0.0}
    assert out["round-robin@4"]["all_gold"] == 1.0 and out["rrf@2"]["recall"] == 0.5
