"""Retrieval: one contract, ``retrieve(query, k) -> list[Passage]``, for every backend.

Light to import: the dense/BM25 backends load chromadb, bm25s and the embedding model lazily.
"""

from program.retrieval.base import Retriever, check_query
from program.retrieval.config import DEFAULT_EMBEDDING_MODEL, RetrieverConfig
from program.retrieval.factory import open_retriever
from program.retrieval.hybrid import HybridRetriever, rrf_fuse

__all__ = [
    "DEFAULT_EMBEDDING_MODEL",
    "HybridRetriever",
    "Retriever",
    "RetrieverConfig",
    "check_query",
    "open_retriever",
    "rrf_fuse",
]
