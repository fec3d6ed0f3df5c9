"""Plain RAG over a chosen retrieval mode: the same VanillaRAG, a retriever opened in that mode.

The config's ``retrieval_mode`` tells the composition root (experiments.runtime) which retriever
to open (dense, BM25 or hybrid = BM25 + dense fused by reciprocal rank fusion); the module only
sees a Retriever.
"""

from __future__ import annotations

from typing import Literal

from program.baselines import VanillaConfig, VanillaRAG
from program.retrieval.base import Retriever

RetrievalMode = Literal["dense", "bm25", "hybrid"]


class DenseRAGConfig(VanillaConfig):
    retrieval_mode: RetrievalMode = "dense"


class HybridRAGConfig(VanillaConfig):
    retrieval_mode: RetrievalMode = "hybrid"


class DenseRAG(VanillaRAG):
    """Plain RAG over dense retrieval (sentence-transformers embeddings)."""

    SYSTEM = "vanilla-dense"

    def __init__(self, retriever: Retriever, config: DenseRAGConfig | None = None):
        super().__init__(retriever, config or DenseRAGConfig())


class HybridRAG(VanillaRAG):
    """Plain RAG over hybrid retrieval (BM25 + dense, reciprocal rank fusion)."""

    SYSTEM = "vanilla-hybrid"

    def __init__(self, retriever: Retriever, config: HybridRAGConfig | None = None):
        super().__init__(retriever, config or HybridRAGConfig())
