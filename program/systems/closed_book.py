"""Closed-book: the generator alone, no retrieval. How much the LM knows without evidence."""

from __future__ import annotations

from typing import Any

import dspy
from pydantic import Field

from program.config import StrictConfig
from program.reading.answers import clean_answer
from program.reading.generation import salvage
from program.signatures import AnswerClosedBook
from program.systems.common import finish
from program.tracing import Tracer, traced


class ClosedBookConfig(StrictConfig):
    generator_reasoning: bool = False
    max_question_chars: int = Field(2000, ge=50)


def closed_book_answer(predictor: dspy.Module, q: str, tr: Tracer, role: str = "generator") -> str:
    """Run an AnswerClosedBook predictor; garbage is salvaged from the raw text, else "unknown"."""
    pred, step = tr.call(role, predictor, {"question": q[:200], "n_passages": 0}, question=q)
    if pred is not None:
        answer = clean_answer(getattr(pred, "answer", ""), q)
    else:
        raw = salvage(step.get("raw_output"))
        step["fallback"] = "salvaged raw output" if raw else "no answer"
        answer = clean_answer(raw, q) if raw else "unknown"
    step.update(answer=answer or "unknown", cited_ids=[], evidence_ids=[])
    return answer or "unknown"


class ClosedBook(dspy.Module):
    """Answer from the LM's own knowledge. Predictor: generator."""

    SYSTEM = "closed-book"
    NEEDS_RETRIEVER = False

    def __init__(self, retriever: Any = None, config: ClosedBookConfig | None = None):
        super().__init__()
        self.config = config or ClosedBookConfig()
        self.retriever = retriever  # unused; kept for the registry's uniform constructor
        self.generator = (dspy.ChainOfThought if self.config.generator_reasoning else dspy.Predict)(AnswerClosedBook)

    def forward(self, question: str) -> dspy.Prediction:
        with traced(question, self.config.max_question_chars) as (q, tr):
            answer = closed_book_answer(self.generator, q, tr)
        return finish(self.SYSTEM, tr, answer=answer, stop_reason="closed_book")
