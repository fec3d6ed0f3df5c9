"""Retrieval: one contract, ``retrieve(query, k) -> list[Passage]``, for every backend."""

from program.retrieval.base import Retriever, check_query

__all__ = ["Retriever", "check_query"]
