"""The critic benchmark's paired evidence: complete holds every gold paragraph, incomplete lacks one."""

from __future__ import annotations

from types import SimpleNamespace

from experiments.lab.studies.critic_discrimination import evidence_pair, summarize
from program.types import Passage


def p(i, title):
    return Passage(f"p{i}", title, f"text {i}")


def test_pairs_differ_by_exactly_one_gold_paragraph_and_keep_the_cap():
    ranked = [p(1, "A"), p(2, "X"), p(3, "Y"), p(4, "Z"), p(5, "W"), p(6, "V")]
    gold_b = p(9, "B")  # a gold paragraph retrieval missed: still in the complete set
    by_title = {q.title: q for q in ranked + [gold_b]}
    ex = SimpleNamespace(gold_titles=["A", "B"])
    complete, incomplete = evidence_pair(ex, ranked, by_title, cap=4, drop=1)
    assert {q.title for q in complete} == {"A", "B", "X", "Y"}
    assert {q.title for q in incomplete} == {"A", "X", "Y", "Z"}  # B dropped, the next other added
    assert len(complete) == len(incomplete) == 4
    _, other = evidence_pair(ex, ranked, by_title, cap=4, drop=0)
    assert "A" not in {q.title for q in other} and "B" in {q.title for q in other}
    assert evidence_pair(SimpleNamespace(gold_titles=["A"]), ranked, by_title, 4, 0) is None


def test_summary_separates_token_and_verbal_discrimination():
    pts = [
        {"label": True, "verdict": "insufficient", "p_token": 0.6, "p_verbal": 1.0, "seconds": 1.0},
        {"label": False, "verdict": "insufficient", "p_token": 0.3, "p_verbal": 1.0, "seconds": 1.0},
    ]
    s = summarize(pts)
    assert s["auroc_token"] == 1.0 and s["auroc_verbal"] == 0.5  # the written confidence ties
    assert s["verdict_accuracy"] == 0.5 and s["sufficient_rate"] == 0.0
