"""Self-RAG style: decide to retrieve -> grade each passage -> (rewrite the query when none is
relevant)* -> generate -> check the answer is supported -> (regenerate)* -> answer or abstain.

Asai et al. (2023) train reflection tokens into the generator (Retrieve, ISREL, ISSUP); here
each reflection is a separate DSPy predictor, so it runs on any LM and an optimizer can tune it.
Every loop is bounded (max_rewrites, max_generations, the budget); a grader's garbage is
recorded and read as the permissive default (retrieve, relevant, supported).
"""

from __future__ import annotations

from typing import Literal

import dspy
from pydantic import Field

from program.config import StrictConfig
from program.reading.answers import clean_answer
from program.reading.evidence import format_evidence
from program.reading.generation import GENERATOR_ADAPTER, GENERATOR_MAX_TOKENS, answer_from_evidence, ints, salvage
from program.retrieval.base import Retriever
from program.signatures import (
    AnswerClosedBook,
    CheckSupport,
    DecideRetrieval,
    GenerateAnswer,
    GradeRelevance,
    RegenerateAnswer,
    RewriteQuery,
)
from program.systems.closed_book import closed_book_answer
from program.systems.common import answered, as_bool, as_choice, as_text, finish, graded, graded_passage, retrieve
from program.tracing import Budget, Tracer, traced
from program.types import Passage

SUPPORT = ("fully", "partially", "no")


class SelfRAGConfig(StrictConfig):
    k: int = Field(5, ge=1, le=50)
    passage_chars: int = Field(600, ge=50, le=5000)
    always_retrieve: bool = Field(False, description="Skip the retrieve/no-retrieval decision.")
    max_rewrites: int = Field(1, ge=0, le=5, description="Query rewrites when no passage is relevant.")
    max_generations: int = Field(2, ge=1, le=5, description="Answers generated at most (1 = no regeneration).")
    accept_partial: bool = Field(True, description="A partially supported answer is accepted.")
    on_unsupported: Literal["abstain", "keep"] = "abstain"
    abstain_answer: str = Field("unknown", min_length=1)
    generator_reasoning: bool = False
    max_question_chars: int = Field(2000, ge=50)
    budget: Budget = Budget(max_lm_calls=30)


class SelfRAG(dspy.Module):
    """Predictors: decider, grader, rewriter, generator, regenerator, checker, closed_book."""

    SYSTEM = "self-rag"
    ROLE_MAP = {
        "decider": "critic",
        "grader": "critic",
        "checker": "critic",
        "rewriter": "planner",
        "regenerator": "generator",
        "closed_book": "generator",
    }

    def __init__(self, retriever: Retriever, config: SelfRAGConfig | None = None):
        super().__init__()
        self.config = cfg = config or SelfRAGConfig()
        self.retriever = retriever
        make = dspy.ChainOfThought if cfg.generator_reasoning else dspy.Predict
        self.decider = dspy.Predict(DecideRetrieval)
        self.grader = dspy.Predict(GradeRelevance)
        self.rewriter = dspy.Predict(RewriteQuery)
        self.generator = make(GenerateAnswer)
        self.regenerator = make(RegenerateAnswer)
        self.checker = dspy.Predict(CheckSupport)
        self.closed_book = make(AnswerClosedBook)

    # ---- steps -------------------------------------------------------------------------------
    def _search(self, q: str, tr: Tracer) -> tuple[list[Passage], list[Passage], list[str]]:
        """(relevant passages, last retrieved set, queries asked); rewrites while none is relevant."""
        cfg, queries, query = self.config, [], q
        kept: list[Passage] = []
        retrieved: list[Passage] = []
        for round_no in range(cfg.max_rewrites + 1):
            queries.append(query)
            retrieved = retrieve(self.retriever, query, cfg.k, tr, round_no)
            kept = [p for p in retrieved if self._relevant(q, p, tr, round_no)]
            if kept or round_no == cfg.max_rewrites or tr.exhausted():
                break
            new, step = graded(
                tr,
                "query_rewriter",
                self.rewriter,
                "query",
                as_text,
                None,
                "query",
                {"question": q[:200], "previous": len(queries)},
                question=q,
                previous_queries=queries,
            )
            if new is None or new.lower() in {x.lower() for x in queries}:
                step["action"] = "stop"
                break
            step["action"] = "retry"
            query = new
        return kept, retrieved, queries

    def _relevant(self, q: str, p: Passage, tr: Tracer, round_no: int) -> bool:
        relevant, step = graded_passage(
            tr, "relevance_grader", self.grader, "relevant", as_bool, True, q, p, self.config.passage_chars
        )
        step.update(round=round_no, passage_id=p.id, passage_title=p.title)
        return relevant

    def _supported(self, q: str, answer: str, evidence: list[Passage], tr: Tracer, attempt: int) -> bool:
        cfg = self.config
        support, step = graded(
            tr,
            "support_checker",
            self.checker,
            "support",
            as_choice(SUPPORT),
            "fully",
            "support",
            {"question": q[:200], "answer": answer[:100]},
            question=q,
            answer=answer,
            evidence=format_evidence(evidence, cfg.passage_chars),
        )
        ok = support == "fully" or (support == "partially" and cfg.accept_partial)
        step.update(attempt=attempt, accepted=ok)
        return ok

    def _regenerate(self, q: str, evidence: list[Passage], rejected: list[str], tr: Tracer) -> tuple[str, list[str]]:
        pred, step = tr.call(
            "generator",
            self.regenerator,
            {"question": q[:200], "rejected": rejected},
            adapter=GENERATOR_ADAPTER,
            config={"max_tokens": GENERATOR_MAX_TOKENS},
            question=q,
            evidence=format_evidence(evidence, self.config.passage_chars),
            rejected_answers=rejected,
        )
        if pred is None:
            raw = salvage(step.get("raw_output"))
            answer, numbers = (clean_answer(raw, q) if raw else "unknown"), []
        else:
            answer, numbers = (
                clean_answer(getattr(pred, "answer", ""), q),
                getattr(pred, "supporting_passages", None) or [],
            )
        cited = [evidence[n - 1].id for n in ints(numbers) if 1 <= n <= len(evidence)]
        step.update(answer=answer, cited_ids=cited, evidence_ids=[p.id for p in evidence], regeneration=True)
        return answer or "unknown", cited

    def _answer(self, q: str, evidence: list[Passage], tr: Tracer) -> tuple[str, list[str], str]:
        """Generate, check support, regenerate while unsupported (bounded); abstain or keep at the end."""
        cfg = self.config
        answer, cited = answer_from_evidence(self.generator, q, evidence, cfg.passage_chars, tr)
        rejected: list[str] = []
        for attempt in range(1, cfg.max_generations + 1):
            if answer.lower() in ("unknown", cfg.abstain_answer.lower()):
                return answer, cited, "no_answer"
            if self._supported(q, answer, evidence, tr, attempt):
                return answer, cited, "supported" if attempt == 1 else "supported_after_regeneration"
            rejected.append(answer)
            if attempt == cfg.max_generations or tr.exhausted():
                break
            answer, cited = self._regenerate(q, evidence, rejected, tr)
        if cfg.on_unsupported == "abstain":
            tr.add("self_rag", decision="abstain", rejected_answers=rejected)
            return cfg.abstain_answer, [], "unsupported_abstain"
        tr.add("self_rag", decision="keep_unsupported", rejected_answers=rejected)
        return answer, cited, "unsupported_kept"

    # ---- control flow ------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            if not cfg.always_retrieve:
                decision, _ = graded(
                    tr,
                    "retrieval_decider",
                    self.decider,
                    "decision",
                    as_choice(("retrieve", "no_retrieval")),
                    "retrieve",
                    "decision",
                    {"question": q[:200]},
                    question=q,
                )
                if decision == "no_retrieval":
                    answer = closed_book_answer(self.closed_book, q, tr)
                    return finish(self.SYSTEM, tr, answer=answer, stop_reason="no_retrieval")
            kept, retrieved, queries = self._search(q, tr)
            if not kept:
                tr.add("self_rag", note="no passage graded relevant: generating from the last retrieved set")
            evidence = kept or retrieved
            answer, cited, stop = self._answer(q, evidence, tr)
        return answered(self.SYSTEM, tr, q, answer, evidence, cited, stop, queries)
