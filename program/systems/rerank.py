"""Plain RAG with a reranking stage: retrieve many candidates, score each against the question,
drop the weak ones (below a relevance threshold), keep the best k, generate once.

Two scorers: a sentence-transformers CrossEncoder (e.g. BAAI/bge-reranker-v2-m3; its weights
must be on disk, nothing is downloaded offline) and the configured LM scoring each passage
pointwise (runs wherever the LM runs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import dspy
from pydantic import Field, model_validator

from program.errors import ModelFileError
from program.reading.generation import answer_from_evidence
from program.retrieval.base import Retriever
from program.signatures import GenerateAnswer, ScoreRelevance
from program.systems.common import answered, as_score, graded_passage, retrieve
from program.systems.modes import RetrievalMode
from program.systems.vanilla import VanillaConfig
from program.tracing import Budget, Tracer, traced
from program.types import Passage

log = logging.getLogger(__name__)

DEFAULT_RERANKER = "BAAI/bge-reranker-v2-m3"


class RerankerUnavailableError(ModelFileError):
    """The cross-encoder's weights cannot be loaded (not on disk, and no download possible)."""


class RerankBaseConfig(VanillaConfig):
    """``k`` passages at most reach the generator, out of ``candidate_k`` retrieved."""

    retrieval_mode: RetrievalMode = "hybrid"
    candidate_k: int = Field(20, ge=1, le=200)
    threshold: float = Field(0.15, ge=0.0, le=1.0, description="Passages scoring below are dropped.")
    min_keep: int = Field(1, ge=0, le=50, description="Passages kept even below the threshold (best first).")

    @model_validator(mode="after")
    def _sizes(self) -> RerankBaseConfig:
        if self.candidate_k < self.k:
            raise ValueError(f"candidate_k ({self.candidate_k}) must be >= k ({self.k})")
        if self.min_keep > self.k:
            raise ValueError(f"min_keep ({self.min_keep}) must be <= k ({self.k})")
        return self


class RerankConfig(RerankBaseConfig):
    reranker_model: str = Field(DEFAULT_RERANKER, min_length=1, description="A CrossEncoder name or folder.")
    max_length: int = Field(512, ge=16, le=8192)
    batch_size: int = Field(16, ge=1, le=512)


class LMRerankConfig(RerankBaseConfig):
    candidate_k: int = Field(10, ge=1, le=50)
    budget: Budget = Budget(max_lm_calls=60)


def select(
    passages: Sequence[Passage], scores: Sequence[float | None], k: int, threshold: float, min_keep: int
) -> tuple[list[Passage], list[Passage]]:
    """(kept, dropped): scored passages >= threshold best first, then unscored ones in retrieval
    order, cut at k; topped up to ``min_keep`` with the best of the rest."""
    order = sorted(range(len(passages)), key=lambda i: (scores[i] is None, -(scores[i] or 0.0), i))
    strong = [i for i in order if scores[i] is None or scores[i] >= threshold][:k]
    for i in order:
        if len(strong) >= min_keep:
            break
        if i not in strong:
            strong.append(i)
    kept = [passages[i].with_score(scores[i]) if scores[i] is not None else passages[i] for i in strong]
    return kept, [passages[i] for i in order if i not in strong]


_MODELS: dict[tuple[str, int], Any] = {}
_LOCK = threading.Lock()


class CrossEncoderScorer:
    """Scores (question, passage) pairs with a CrossEncoder; sigmoid scores in [0, 1]."""

    def __init__(self, model: str, max_length: int = 512, batch_size: int = 16):
        self.model_name, self.batch_size = model, batch_size
        with _LOCK:
            if (model, max_length) not in _MODELS:
                _MODELS[(model, max_length)] = _load_cross_encoder(model, max_length)
        self.model = _MODELS[(model, max_length)]

    def __call__(self, query: str, passages: Sequence[Passage]) -> list[float]:
        if not passages:
            return []
        pairs = [(query, f"{p.title}: {p.text}") for p in passages]
        return [float(s) for s in self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)]


def _load_cross_encoder(model: str, max_length: int) -> Any:
    try:
        from sentence_transformers import CrossEncoder

        return CrossEncoder(model, max_length=max_length)
    except (OSError, ValueError, RuntimeError, ImportError) as exc:
        raise RerankerUnavailableError(
            f"cannot load the reranker model {model!r} ({type(exc).__name__}: {str(exc)[:200]}). Its weights are "
            f"not on this machine and cannot be downloaded here. Put a cross-encoder folder on disk and pass it "
            f"(--set reranker_model=/path/to/model), or run 'vanilla-lmrerank', where the configured LM scores "
            f"each passage."
        ) from None


class _Reranked(dspy.Module):
    """Retrieve candidate_k, score, select, generate. Subclasses define ``_score``."""

    SYSTEM = "vanilla-rerank"

    def __init__(self, retriever: Retriever, config: RerankBaseConfig):
        super().__init__()
        self.config = config
        self.retriever = retriever
        self.generator = (dspy.ChainOfThought if config.generator_reasoning else dspy.Predict)(GenerateAnswer)

    def _score(self, q: str, candidates: list[Passage], tr: Tracer) -> list[float | None]:
        raise NotImplementedError

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, getattr(cfg, "budget", Budget(max_lm_calls=None))) as (q, tr):
            candidates = retrieve(self.retriever, q, cfg.candidate_k, tr)
            t0 = time.perf_counter()
            scores = self._score(q, candidates, tr)
            kept, dropped = select(candidates, scores, cfg.k, cfg.threshold, cfg.min_keep)
            tr.add(
                "reranker",
                model=getattr(cfg, "reranker_model", "lm"),
                threshold=cfg.threshold,
                seconds=round(time.perf_counter() - t0, 3),
                scores={p.id: s for p, s in zip(candidates, scores)},
                kept_ids=[p.id for p in kept],
                dropped_ids=[p.id for p in dropped],
                kept_share=len(kept) / len(candidates) if candidates else None,
            )
            answer, cited = answer_from_evidence(self.generator, q, kept, cfg.passage_chars, tr)
        return answered(self.SYSTEM, tr, q, answer, kept, cited, "reranked")


class RerankRAG(_Reranked):
    """Plain RAG + a cross-encoder reranker with a relevance threshold. Predictor: generator."""

    SYSTEM = "vanilla-rerank"

    def __init__(self, retriever: Retriever, config: RerankConfig | None = None, scorer: Any = None):
        config = config or RerankConfig()
        super().__init__(retriever, config)
        self.scorer = scorer or CrossEncoderScorer(config.reranker_model, config.max_length, config.batch_size)

    def _score(self, q: str, candidates: list[Passage], tr: Tracer) -> list[float | None]:
        return list(self.scorer(q, candidates))


class LMRerankRAG(_Reranked):
    """Plain RAG + the LM scoring each candidate 0-1 (pointwise). Predictors: scorer, generator."""

    SYSTEM = "vanilla-lmrerank"
    ROLE_MAP = {"scorer": "critic"}

    def __init__(self, retriever: Retriever, config: LMRerankConfig | None = None):
        super().__init__(retriever, config or LMRerankConfig())
        self.scorer = dspy.Predict(ScoreRelevance)

    def _score(self, q: str, candidates: list[Passage], tr: Tracer) -> list[float | None]:
        scores = []
        for rank, p in enumerate(candidates):
            score, step = graded_passage(
                tr, "lm_reranker", self.scorer, "score", as_score, None, q, p, self.config.passage_chars, rank=rank
            )
            scores.append(score)
        return scores
