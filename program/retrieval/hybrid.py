"""Hybrid retrieval: weighted reciprocal rank fusion (RRF) of ranked lists, per query.

score(p) = sum over lists i that contain p of  weight_i / (rrf_k + rank_i(p)),  rank from 1.
Ties are broken by the best (lowest) rank p reached in any list, then by id: deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from program.errors import ConfigError
from program.retrieval.base import Retriever, check_query
from program.types import Passage


def rrf_fuse(
    ranked_lists: Sequence[Sequence[Passage]], weights: Sequence[float], rrf_k: float, k: int
) -> list[Passage]:
    """Fuse ranked lists (best first) into the top ``k`` passages, scored by weighted RRF."""
    if len(ranked_lists) != len(weights):
        raise ConfigError(f"{len(ranked_lists)} ranked lists but {len(weights)} weights")
    score: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    first: dict[str, Passage] = {}
    for hits, weight in zip(ranked_lists, weights):
        seen: set[str] = set()
        for rank, p in enumerate(hits, start=1):
            if p.id in seen:  # a list that repeats a passage counts it once, at its best rank
                continue
            seen.add(p.id)
            score[p.id] = score.get(p.id, 0.0) + weight / (rrf_k + rank)
            best_rank[p.id] = min(best_rank.get(p.id, rank), rank)
            first.setdefault(p.id, p)
    order = sorted(score, key=lambda pid: (-score[pid], best_rank[pid], pid))
    return [first[pid].with_score(score[pid]) for pid in order[:k]]


class HybridRetriever:
    """Dense + BM25, fused by weighted RRF over the top ``candidate_depth`` of each."""

    def __init__(
        self,
        dense: Retriever,
        bm25: Retriever,
        dense_weight: float = 1.0,
        bm25_weight: float = 1.0,
        rrf_k: float = 60,
        candidate_depth: int = 100,
    ) -> None:
        self.dense, self.bm25 = dense, bm25
        self.weights = (dense_weight, bm25_weight)
        self.rrf_k = rrf_k
        self.candidate_depth = candidate_depth

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return self.retrieve_many([query], k)[0]

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [fused for fused, _, _ in self.ranked_lists(queries, k)]

    def ranked_lists(self, queries: Sequence[str], k: int) -> list[tuple[list[Passage], list[Passage], list[Passage]]]:
        """Per query: the fused top ``k``, and the dense and BM25 top ``k`` of the lists it was fused from
        (the evidence ranker reads all three)."""
        cleaned = [check_query(q, k) for q in queries]
        depth = max(k, self.candidate_depth)
        dense_hits = self.dense.retrieve_many(cleaned, depth) if self.weights[0] > 0 else [[] for _ in cleaned]
        bm25_hits = self.bm25.retrieve_many(cleaned, depth) if self.weights[1] > 0 else [[] for _ in cleaned]
        return [
            (rrf_fuse([d, b], self.weights, self.rrf_k, k), list(d[:k]), list(b[:k]))
            for d, b in zip(dense_hits, bm25_hits)
        ]
