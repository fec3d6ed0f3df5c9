"""Corrective RAG (Yan et al., 2024): grade the retrieved set, then correct it.

retrieve -> score each passage (retrieval evaluator) -> grade the set:
  correct   (some passage >= upper): refine the relevant passages into sentence strips, keep the
            strips that help;
  incorrect (every passage < lower): rewrite the query, search a fallback source;
  ambiguous (otherwise, or the evaluator gave garbage): both.
-> generate. The fallback source is a second local route (lexical search with the rewritten
query) by default, or a web-search endpoint; when it is down or slow the question is answered
from the local evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import dspy
from pydantic import Field, model_validator

from program.config import StrictConfig
from program.errors import RetrievalError
from program.reading.generation import answer_from_evidence, ints
from program.retrieval.base import Retriever
from program.signatures import GenerateAnswer, RewriteQuery, ScoreRelevance, SelectStrips
from program.systems.common import (
    answered,
    as_score,
    as_text,
    graded,
    graded_passage,
    retrieve,
    split_strips,
    unique_passages,
)
from program.systems.web import WebSearch
from program.tracing import Budget, Tracer, traced
from program.types import Passage

Grade = Literal["correct", "ambiguous", "incorrect"]


class CRAGConfig(StrictConfig):
    k: int = Field(5, ge=1, le=50)
    upper: float = Field(0.6, ge=0.0, le=1.0, description="Correct when some passage scores >= upper.")
    lower: float = Field(0.2, ge=0.0, le=1.0, description="Incorrect when every passage scores < lower.")
    fallback: Literal["lexical", "web", "none"] = "lexical"
    fallback_k: int = Field(5, ge=1, le=50)
    web_url: str | None = Field(None, description="SearxNG-style JSON endpoint, for fallback=web.")
    web_timeout_s: float = Field(5.0, gt=0.0, le=60.0)
    refine: bool = Field(True, description="Refine kept passages into relevant sentence strips.")
    max_strips: int = Field(30, ge=1, le=200)
    evidence_cap: int = Field(8, ge=1, le=40)
    passage_chars: int = Field(600, ge=50, le=5000)
    generator_reasoning: bool = False
    max_question_chars: int = Field(2000, ge=50)
    budget: Budget = Budget(max_lm_calls=20)

    @model_validator(mode="after")
    def _consistent(self) -> CRAGConfig:
        if self.lower > self.upper:
            raise ValueError(f"lower ({self.lower}) must be <= upper ({self.upper})")
        if self.fallback == "web" and not (self.web_url or "").startswith(("http://", "https://")):
            raise ValueError("fallback=web needs web_url, an http(s) URL of a JSON search endpoint")
        return self


def crag_grade(scores: Sequence[float | None], upper: float, lower: float) -> Grade:
    """correct / incorrect / ambiguous from per-passage scores (None = the evaluator failed)."""
    valid = [s for s in scores if s is not None]
    if not scores:
        return "incorrect"
    if any(s >= upper for s in valid):
        return "correct"
    if len(valid) == len(scores) and all(s < lower for s in valid):
        return "incorrect"
    return "ambiguous"


def strip_numbers(n: int):
    """Parser for the strip filter: the valid 1-based numbers, or None if it is not a list."""

    def parse(value: Any) -> list[int] | None:
        if not isinstance(value, (list, tuple)):
            return None
        return sorted({i for i in ints(list(value)) if 1 <= i <= n})

    return parse


class CorrectiveRAG(dspy.Module):
    """Predictors: evaluator, refiner, rewriter, generator."""

    SYSTEM = "crag"
    ROLE_MAP = {"evaluator": "critic", "refiner": "critic", "rewriter": "planner"}

    @classmethod
    def extra_retrievers(cls, config: CRAGConfig) -> dict[str, dict]:
        """Retrievers the composition root should open besides the main one (keyword -> overrides)."""
        return {"fallback_retriever": {"mode": "bm25"}} if config.fallback == "lexical" else {}

    def __init__(
        self, retriever: Retriever, config: CRAGConfig | None = None, fallback_retriever: Retriever | None = None
    ):
        super().__init__()
        self.config = cfg = config or CRAGConfig()
        self.retriever = retriever
        self.fallback_retriever = fallback_retriever
        self.web = WebSearch(cfg.web_url, cfg.web_timeout_s) if cfg.fallback == "web" else None
        self.evaluator = dspy.Predict(ScoreRelevance)
        self.refiner = dspy.Predict(SelectStrips)
        self.rewriter = dspy.Predict(RewriteQuery)
        self.generator = (dspy.ChainOfThought if cfg.generator_reasoning else dspy.Predict)(GenerateAnswer)

    # ---- steps -------------------------------------------------------------------------------
    def _evaluate(self, q: str, passages: list[Passage], tr: Tracer) -> list[float | None]:
        scores = []
        for p in passages:
            score, step = graded_passage(
                tr, "retrieval_evaluator", self.evaluator, "score", as_score, None, q, p, self.config.passage_chars
            )
            step["passage_id"] = p.id
            scores.append(score)
        return scores

    def _refine(self, q: str, passages: list[Passage], tr: Tracer) -> list[Passage]:
        """Each passage cut to its relevant sentence strips (garbage from the filter keeps them all)."""
        strips = [(p, s) for p in passages for s in split_strips(p.text)][: self.config.max_strips]
        if not self.config.refine or not strips:
            return passages
        listing = "\n".join(f"[{i}] {p.title}: {s}" for i, (p, s) in enumerate(strips, 1))
        keep, step = graded(
            tr,
            "strip_filter",
            self.refiner,
            "relevant_strips",
            strip_numbers(len(strips)),
            list(range(1, len(strips) + 1)),
            "kept_strips",
            {"question": q[:200], "n_strips": len(strips)},
            question=q,
            strips=listing,
        )
        step["n_strips"] = len(strips)
        by_id: dict[str, list[str]] = {}
        for i in keep:
            p, s = strips[i - 1]
            by_id.setdefault(p.id, []).append(s)
        return [Passage(p.id, p.title, " ".join(by_id[p.id]), p.score) for p in passages if p.id in by_id]

    def _search_fallback(self, q: str, tr: Tracer) -> tuple[str, list[Passage]]:
        cfg = self.config
        query, _ = graded(
            tr,
            "query_rewriter",
            self.rewriter,
            "query",
            as_text,
            q,
            "query",
            {"question": q[:200]},
            question=q,
            previous_queries=[q],
        )
        if cfg.fallback == "none":
            return query, []
        if cfg.fallback == "lexical":
            return query, retrieve(
                self.fallback_retriever or self.retriever,
                query,
                cfg.fallback_k,
                tr,
                1,
                role="fallback",
                source="lexical",
            )
        step = tr.add("fallback", source="web", round=1, k=cfg.fallback_k, queries=[query], error=None)
        try:
            found = self.web.retrieve(query, cfg.fallback_k)
        except RetrievalError as exc:
            step.update(error=str(exc)[:300], retrieved_ids=[[]], new_ids=[])
            return query, []
        step.update(retrieved_ids=[[p.id for p in found]], new_ids=[p.id for p in found])
        return query, found

    # ---- control flow ------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            retrieved = retrieve(self.retriever, q, cfg.k, tr)
            scores = self._evaluate(q, retrieved, tr)
            grade = crag_grade(scores, cfg.upper, cfg.lower)
            tr.add("crag", grade=grade, scores=scores, upper=cfg.upper, lower=cfg.lower)
            internal: list[Passage] = []
            if grade in ("correct", "ambiguous"):
                useful = [p for p, s in zip(retrieved, scores) if s is None or s >= cfg.lower]
                internal = self._refine(q, useful, tr)
            queries, external = [q], []
            if grade in ("incorrect", "ambiguous"):
                rewritten, external = self._search_fallback(q, tr)
                queries.append(rewritten)
            evidence = unique_passages(internal + external)[: cfg.evidence_cap]
            if not evidence:
                tr.add("crag", note="no corrected evidence: answering from the retrieved passages")
                evidence = retrieved[: cfg.evidence_cap]
            answer, cited = answer_from_evidence(self.generator, q, evidence, cfg.passage_chars, tr)
        return answered(self.SYSTEM, tr, q, answer, evidence, cited, f"crag_{grade}", queries)
