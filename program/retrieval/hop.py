"""Second-hop retrieval without a model call: search again with the question plus the top passage.

On a two-hop question the question names the first entity; the passage about it names the second
(the bridge). Searching ``question + top passage`` finds the bridge passage far more often than the
question alone, which is how multi-hop dense retrieval chains its hops, here with no LM in the loop.
Of the ``k`` passages returned, the first ``round(k * keep)`` are the question's own top hits; the
rest are the best new hits of the hop queries (fused by RRF), then the question's next hits if the
hops found too few. On HotpotQA (settings chosen on the train split) it raises all-gold@5 on train and
dev, and plain RAG's EM / F1 over it (the vanilla-hop arena system), for one extra search per query and
no LM call (experiments/findings/retrieval.md, 'Second hop').
"""

from __future__ import annotations

from collections.abc import Sequence

from program.retrieval.base import MAX_QUERY_CHARS, Retriever, check_query
from program.retrieval.hybrid import rrf_fuse
from program.types import Passage


def hop_query(query: str, seed: Passage, seed_chars: int) -> str:
    """The second-hop query: the query, then the seed passage's title and the start of its text (the
    query cut first when the whole would pass MAX_QUERY_CHARS, so the seed is never cut away)."""
    tail = f" {seed.title}. {seed.text[:seed_chars]}"[: MAX_QUERY_CHARS // 2]
    return query[: MAX_QUERY_CHARS - len(tail)] + tail


def kept_count(k: int, keep: float) -> int:
    """How many of ``k`` slots go to the query's own hits: round(k * keep), at least 1, at most k."""
    return max(1, min(k, int(k * keep + 0.5)))


def fuse_hops(hop_lists: Sequence[Sequence[Passage]], rrf_k: float, depth: int) -> list[Passage]:
    """The hop searches' hits as one ranked list (equal-weight RRF; a single list keeps its order)."""
    return rrf_fuse(hop_lists, [1.0] * len(hop_lists), rrf_k, depth) if hop_lists else []


def combine(hits: Sequence[Passage], hop_hits: Sequence[Passage], k: int, keep: float) -> list[Passage]:
    """The query's first ``kept_count(k, keep)`` hits, then the hops' new passages, then the query's next
    hits as filler when the hops found too few; no passage twice, at most ``k``."""
    chosen = list(hits[: kept_count(k, keep)])
    seen = {p.id for p in chosen}
    for p in [*hop_hits, *hits]:
        if len(chosen) >= k:
            break
        if p.id not in seen:
            seen.add(p.id)
            chosen.append(p)
    return chosen


class HopRetriever:
    """Wraps any Retriever: the query's top hits, then new passages found from its top ``seeds`` hits."""

    depends_on_k = True  # the top k is not the prefix of the top K: the hop's share of the slots moves with k

    def __init__(
        self,
        base: Retriever,
        keep: float = 0.6,
        seeds: int = 1,
        seed_chars: int = 300,
        depth: int = 20,
        rrf_k: float = 5,
    ) -> None:
        self.base, self.keep, self.seeds = base, keep, seeds
        self.seed_chars, self.depth, self.rrf_k = seed_chars, depth, rrf_k

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return self.retrieve_many([query], k)[0]

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        cleaned = [check_query(q, k) for q in queries]
        depth = max(k, self.depth)
        first = self.base.retrieve_many(cleaned, depth)
        seeds = self.seeds if kept_count(k, self.keep) < k else 0  # no slot for a hop passage: no hop search
        hop_queries = [[hop_query(q, p, self.seed_chars) for p in hits[:seeds]] for q, hits in zip(cleaned, first)]
        flat = [hq for hqs in hop_queries for hq in hqs]
        hop_hits = iter(self.base.retrieve_many(flat, depth) if flat else [])
        out = []
        for hits, hqs in zip(first, hop_queries):
            lists = [next(hop_hits) for _ in hqs]
            out.append(combine(hits, fuse_hops(lists, self.rrf_k, depth), k, self.keep))
        return out
