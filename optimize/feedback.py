"""Textual feedback for GEPA: what went wrong on one question, in words a reflection LM can use.

A feedback metric has GEPA's signature ``(gold, pred, trace, pred_name, pred_trace)`` and returns
``dspy.Prediction(score=..., feedback=...)``. The score is the plain answer metric (F1 or EM);
the feedback names the failure: a gold paragraph the searches never found, a bridge entity that
no query named, a critic that asked for more evidence it did not need (over-triggered) or stopped
without it (under-triggered), an answer span that missed although the evidence was complete.
When GEPA asks about one predictor (``pred_name``), only that predictor's part is returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy

from optimize.metrics import answer_em, answer_f1, critic_points, gold_answers, normalize_answer

ANSWER_METRICS: dict[str, Callable[..., float]] = {"f1": answer_f1, "em": answer_em}


def _titles(prediction: Any) -> list[str]:
    out = []
    for p in getattr(prediction, "passages", None) or []:
        out.append(p.title if hasattr(p, "title") else str(p.get("title", "")))
    return out


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def diagnose(example: Any, prediction: Any, score: float) -> dict[str, list[str]]:
    """Feedback sentences per predictor role (planner, critic, generator)."""
    gold_titles = list(getattr(example, "gold_titles", None) or [])
    seen = {_norm(t) for t in _titles(prediction)}
    missing = [t for t in gold_titles if _norm(t) not in seen]
    found = [t for t in gold_titles if _norm(t) in seen]
    queries = list(getattr(prediction, "queries", None) or getattr(prediction, "sub_queries", None) or [])
    answer = getattr(prediction, "answer", "") or ""
    golds = gold_answers(example)
    return {
        "planner": _planner_notes(example, gold_titles, missing, found, queries),
        "critic": _critic_notes(example, prediction),
        "generator": _generator_notes(answer, golds, score, gold_titles, missing),
    }


def _planner_notes(
    example: Any, gold_titles: list[str], missing: list[str], found: list[str], queries: list[str]
) -> list[str]:
    """The planner's feedback: which gold paragraphs its searches missed and the entity to name."""
    notes: list[str] = []
    if missing:
        asked = "; ".join(f"'{q}'" for q in queries) or "none"
        notes.append(
            f"The searches ({asked}) never retrieved the gold paragraph(s) {', '.join(repr(t) for t in missing)}."
        )
        unnamed = [t for t in missing if not any(_norm(t) in _norm(q) for q in queries)]
        if getattr(example, "type", None) == "bridge" and found and unnamed:
            notes.append(
                f"Wrong bridge entity: the paragraph {found[0]!r} was found, but no query named "
                f"{unnamed[0]!r}, the entity it leads to; the follow-up query must name that bridge entity."
            )
        elif unnamed:
            notes.append(f"Name the entity explicitly in a query, e.g. {unnamed[0]!r}.")
    elif gold_titles:
        notes.append("The searches found every gold paragraph.")
    return notes


def _critic_notes(example: Any, prediction: Any) -> list[str]:
    """The critic's feedback: each call that sent a right answer to a repair or accepted a wrong one."""
    notes: list[str] = []
    for point in critic_points(example, prediction):
        conf = point["p"]
        if point["label"] and not point["stop_call"]:
            notes.append(
                f"Critic over-triggered: the {point['action']} answer was right, but P(right)={conf:.2f} sent it "
                "to a repair."
            )
        elif not point["label"] and point["stop_call"]:
            notes.append(f"Critic under-triggered: it accepted a wrong {point['action']} answer (P(right)={conf:.2f}).")
    if not notes and critic_points(example, prediction):
        notes.append("The critic's calls matched the answers' correctness.")
    return notes


def _generator_notes(
    answer: str, golds: list[str], score: float, gold_titles: list[str], missing: list[str]
) -> list[str]:
    """The generator's feedback: right, or why wrong (evidence complete, no answer, or a guess)."""
    if score >= 1.0:
        return [f"Correct answer {answer!r}."]
    wrong = f"The answer {answer!r} does not match the gold answer {golds[0]!r}" if golds else "Wrong answer"
    if gold_titles and not missing:
        return [
            f"{wrong} although the evidence held every gold paragraph; copy the exact short span from "
            f"the passages ({', '.join(repr(t) for t in gold_titles)})."
        ]
    if normalize_answer(answer) in ("", "unknown"):
        return [f"{wrong}: no answer was given."]
    return [f"{wrong}; the evidence was incomplete, so the answer was a guess."]


def answer_feedback_metric(metric: str = "f1") -> Callable[..., dspy.Prediction]:
    """A GEPA feedback metric over the program's answers: score = ``metric``, plus diagnosis text."""
    if metric not in ANSWER_METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(ANSWER_METRICS)}")
    score_fn = ANSWER_METRICS[metric]

    def feedback_metric(
        gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
    ) -> dspy.Prediction:
        score = float(score_fn(gold, pred))
        notes = diagnose(gold, pred, score)
        role = (pred_name or "").split(".")[0]
        parts = notes.get(role) or [s for part in notes.values() for s in part]
        return dspy.Prediction(score=score, feedback=f"{metric.upper()} {score:.2f}. " + " ".join(parts))

    feedback_metric.__name__ = f"answer_{metric}_feedback"
    return feedback_metric
