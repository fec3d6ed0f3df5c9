"""Adaptive-RAG (Jeong et al., 2024): a complexity classifier routes each question to no
retrieval, single-step retrieval, or the multi-step SHARP loop. The route is the ``route`` key of
the router's step; a router's garbage takes ``default_route`` (recorded as the step's problem).

It *is* a SharpRAG (same planner, critic and generator, same config keys plus its own), so the
multi-step route is SHARP unchanged and optimizers see every predictor under its role name.
"""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import Field

from program.reading.generation import answer_from_evidence
from program.retrieval.base import Retriever
from program.sharp.module import SharpRAG
from program.sharp.policy import SharpConfig
from program.signatures import AnswerClosedBook, ClassifyComplexity
from program.systems.closed_book import closed_book_answer
from program.systems.common import answered, as_choice, finish, graded, retrieve
from program.tracing import traced

ROUTES = ("no_retrieval", "single_step", "multi_step")
Route = Literal["no_retrieval", "single_step", "multi_step"]


class AdaptiveConfig(SharpConfig):
    single_k: int = Field(5, ge=1, le=50, description="Passages retrieved on the single-step route.")
    default_route: Route = Field("multi_step", description="The route taken when the router's output is garbage.")
    second_hop: bool = False  # as published: the single-step route is plain RAG over the runtime's retriever


class AdaptiveRAG(SharpRAG):
    """Predictors: router, closed_book, and SHARP's planner, critic, generator."""

    SYSTEM = "adaptive"
    ROLE_MAP = {**SharpRAG.ROLE_MAP, "router": "planner", "closed_book": "generator"}

    def __init__(self, retriever: Retriever, config: AdaptiveConfig | None = None):
        super().__init__(retriever, config or AdaptiveConfig())
        self.router = dspy.Predict(ClassifyComplexity)
        self.closed_book = dspy.Predict(AnswerClosedBook)  # SHARP reads without chain of thought

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            route, _ = graded(
                tr,
                "router",
                self.router,
                "complexity",
                as_choice(ROUTES),
                cfg.default_route,
                "route",
                {"question": q[:200]},
                question=q,
            )
            if route == "no_retrieval":
                answer = closed_book_answer(self.closed_book, q, tr)
                return finish(self.SYSTEM, tr, answer=answer, stop_reason="route_no_retrieval")
            if route == "single_step":
                evidence = retrieve(self.retriever, q, cfg.single_k, tr)
                answer, cited = answer_from_evidence(
                    self.generator, q, evidence, cfg.passage_chars, tr, adapter=cfg.generator_adapter
                )
                return answered(self.SYSTEM, tr, q, answer, evidence, cited, "route_single_step")
            inner = super().forward(q)  # the SHARP loop, with its own budget; accounted in this tr.ledger too
            offset = len(tr.steps)
            tr.steps.extend([{**s, "step": offset + i} for i, s in enumerate(inner.trace)])
        return finish(
            self.SYSTEM,
            tr,
            answer=inner.answer,
            passages=inner.passages,
            cited=inner.cited_ids,
            sub_queries=inner.sub_queries,
            queries=inner.queries,
            retries=inner.retries,
            stop_reason=inner.stop_reason,
        )
