"""GEPA's textual feedback: missing gold paragraphs, the wrong bridge entity, the answer critic's over- and
under-triggering, answer spans."""

from __future__ import annotations

import dspy
import pytest

from optimize.feedback import answer_feedback_metric
from program.types import Passage

EX = dspy.Example(
    id="q",
    question="What nationality is the director of Pulp Fiction?",
    answer="American",
    answer_aliases=[],
    type="bridge",
    gold_titles=["Pulp Fiction", "Quentin Tarantino"],
)


def prediction(answer, titles, queries, judged=()):
    return dspy.Prediction(
        answer=answer,
        passages=[Passage(t, t, "") for t in titles],
        queries=list(queries),
        trace=[{"role": "judgement", **j} for j in judged],
    )


def judged(action, answer, p, accepted):
    """A judged round: its answer, the answer critic's P(right), and whether the loop accepted it."""
    return {"action": action, "answer": answer, "p_right": p, "accepted": accepted, "source": "gate"}


def test_wrong_bridge_entity_and_missing_paragraph():
    fb = answer_feedback_metric("f1")
    pred = prediction(
        "British",
        ["Pulp Fiction", "Film"],
        ["Pulp Fiction director", "Uma Thurman"],
        [judged("draft", "British", 0.9, True)],
    )
    out = fb(EX, pred)
    assert out.score == 0.0
    assert "never retrieved the gold paragraph(s) 'Quentin Tarantino'" in out.feedback
    assert "Wrong bridge entity" in out.feedback and "no query named 'Quentin Tarantino'" in out.feedback
    assert "Critic under-triggered" in out.feedback
    planner_only = fb(EX, pred, None, "planner", None).feedback
    assert "Wrong bridge entity" in planner_only and "Critic" not in planner_only


def test_over_triggered_critic_and_a_wrong_span_from_complete_evidence():
    fb = answer_feedback_metric("em")
    titles = ["Pulp Fiction", "Quentin Tarantino"]
    pred = prediction(
        "an American director",
        titles,
        ["Pulp Fiction", "Quentin Tarantino"],
        [judged("draft", "American", 0.4, False), judged("retrieve", "an American director", 0.9, True)],
    )
    out = fb(EX, pred, None, "critic", None)
    assert out.score == 0.0 and "Critic over-triggered: the draft answer was right, but P(right)=0.40" in out.feedback
    assert "Critic under-triggered: it accepted a wrong retrieve answer (P(right)=0.90)" in out.feedback
    gen = fb(EX, pred, None, "generator", None).feedback
    assert "held every gold paragraph" in gen and "exact short span" in gen
    accepted_right = prediction("American", titles, ["Pulp Fiction"], [judged("draft", "American", 0.9, True)])
    right = fb(EX, accepted_right)
    assert right.score == 1.0 and "Correct answer" in right.feedback
    assert (
        "The critic's calls matched the answers' correctness" in fb(EX, accepted_right, None, "critic", None).feedback
    )


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric"):
        answer_feedback_metric("bleu")
