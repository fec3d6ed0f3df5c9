"""The retriever contract shared by dense, lexical and fused retrieval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from program.errors import QuestionError
from program.types import Passage

MAX_QUERY_CHARS = 2000


@runtime_checkable
class Retriever(Protocol):
    """Anything with ``retrieve(query, k)`` and ``retrieve_many(queries, k)``."""

    def retrieve(self, query: str, k: int) -> list[Passage]: ...

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


def check_query(query: str, k: int) -> str:
    """Validate a query and k; return the query stripped and truncated to MAX_QUERY_CHARS.

    An empty query or k < 1 is an error; an over-long query is truncated (the retrievers
    only use its start, and a 10,000-character query must not crash a batch).
    """
    if not isinstance(query, str) or not query.strip():
        raise QuestionError("empty query: give at least one non-space character")
    if not isinstance(k, int) or k < 1:
        raise QuestionError(f"k must be a positive integer, got {k!r}")
    return query.strip()[:MAX_QUERY_CHARS]
