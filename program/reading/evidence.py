"""The evidence pool: passages found by each query, deduplicated, selected fairly under a cap."""

from __future__ import annotations

from dataclasses import dataclass, field

from program.types import Passage


@dataclass
class EvidencePool:
    """Passages grouped by the query that found them, in the order queries were asked.

    ``select(cap)`` takes passages round-robin by rank across queries (rank 1 of every query,
    then rank 2, ...), skipping duplicates, so a later search is represented even when the first
    one already filled much of the cap (ReAct); ``select(cap, "score")`` ranks the whole pool
    (SHARP's retrieval repair re-reads it so).
    """

    by_query: dict[str, list[Passage]] = field(default_factory=dict)

    def add(self, query: str, passages: list[Passage]) -> list[Passage]:
        """Record a query's results; return the passages not seen before."""
        seen = self.ids()
        self.by_query.setdefault(query, [])
        known = {p.id for p in self.by_query[query]}
        self.by_query[query].extend(p for p in passages if p.id not in known)
        return [p for p in passages if p.id not in seen]

    def ids(self) -> set[str]:
        return {p.id for ps in self.by_query.values() for p in ps}

    def select(self, cap: int, order: str = "round_robin") -> list[Passage]:
        """At most ``cap`` passages: ``round_robin`` by rank across queries, or ``score``: the whole
        pool ranked by each passage's best score under any query that found it (the reranker's
        probability, comparable across queries), ties in the order found."""
        if order == "score":
            best: dict[str, Passage] = {}
            for ps in self.by_query.values():
                for p in ps:
                    if p.id not in best or p.score > best[p.id].score:
                        best[p.id] = p
            return sorted(best.values(), key=lambda p: -p.score)[:cap]
        chosen: list[Passage] = []
        seen: set[str] = set()
        depth = max((len(v) for v in self.by_query.values()), default=0)
        for rank in range(depth):
            for ps in self.by_query.values():
                if rank < len(ps) and ps[rank].id not in seen:
                    seen.add(ps[rank].id)
                    chosen.append(ps[rank])
                    if len(chosen) >= cap:
                        return chosen
        return chosen


def format_evidence(passages: list[Passage], max_chars: int) -> str:
    """Numbered passages for a prompt; each text cut to ``max_chars`` characters."""
    if not passages:
        return "(no passages found)"
    lines = []
    for i, p in enumerate(passages, 1):
        text = p.text if len(p.text) <= max_chars else p.text[:max_chars].rsplit(" ", 1)[0] + " ..."
        lines.append(f"[{i}] {p.title}: {text}")
    return "\n".join(lines)
