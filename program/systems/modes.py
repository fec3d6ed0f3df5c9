"""Plain RAG over a chosen retrieval mode: the same VanillaRAG, a retriever opened in that mode.

The config's ``retrieval_mode`` (and ``second_hop``) tell the composition root (experiments.runtime)
which retriever to open (dense, BM25 or hybrid = BM25 + dense fused by reciprocal rank fusion; with or
without the no-LM second hop of program/retrieval/hop.py); the module only sees a Retriever.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from program.systems.vanilla import VanillaConfig, VanillaRAG

RetrievalMode = Literal["dense", "bm25", "hybrid"]


class DenseRAGConfig(VanillaConfig):
    retrieval_mode: RetrievalMode = "dense"


class HybridRAGConfig(VanillaConfig):
    retrieval_mode: RetrievalMode = "hybrid"


class HopRAGConfig(VanillaConfig):
    retrieval_mode: RetrievalMode = "hybrid"
    second_hop: bool = True


# what ``ranker`` means by default: the evidence ranker named after the dataset (experiments/rankers.py)
DATASET_RANKER = "dataset"


class RankedRAGConfig(VanillaConfig):
    """Plain RAG over the evidence ranker: three ranked passages read best (experiments/findings/reading.md,
    'Three ranked passages beat five')."""

    k: int = Field(3, ge=1, le=50)
    ranker: str = DATASET_RANKER


def retriever_overrides(config: Any) -> dict[str, Any] | None:
    """The retriever settings a system's config asks for (``retrieval_mode``, ``second_hop``, ``ranker``: a
    ranker's name, or "dataset" for the dataset's own), or None for the runtime's default retriever."""
    out: dict[str, Any] = {}
    if getattr(config, "retrieval_mode", None):
        out["mode"] = config.retrieval_mode
    if getattr(config, "second_hop", None) is not None:
        out["second_hop"] = config.second_hop
    if getattr(config, "ranker", None) is not None:
        out["ranker"] = config.ranker
    return out or None


class DenseRAG(VanillaRAG):
    """Plain RAG over dense retrieval (sentence-transformers embeddings)."""

    SYSTEM = "vanilla-dense"
    CONFIG = DenseRAGConfig


class HybridRAG(VanillaRAG):
    """Plain RAG over hybrid retrieval (BM25 + dense, reciprocal rank fusion)."""

    SYSTEM = "vanilla-hybrid"
    CONFIG = HybridRAGConfig


class RankedRAG(VanillaRAG):
    """Plain RAG over the evidence ranker (no LM call to rank): the strongest one-call system."""

    SYSTEM = "vanilla-ranked"
    CONFIG = RankedRAGConfig


class HopRAG(VanillaRAG):
    """Plain RAG over hybrid retrieval with a second hop from the top passage (no LM call)."""

    SYSTEM = "vanilla-hop"
    CONFIG = HopRAGConfig
