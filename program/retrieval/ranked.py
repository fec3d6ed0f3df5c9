"""The evidence ranker: a learned score over a query's candidate pool, no LM call.

One hybrid search finds a two-hop question's first paragraph; its second is often ranked low or not at
all. :class:`RankedRetriever` gathers a wider pool for each query (the hybrid top ``depth``, the second
hop's top ``depth`` from the best passage, and the passages whose titles the top passages name, i.e.
Wikipedia's links, recovered by :class:`~program.retrieval.links.TitleLinker`), describes each candidate
by what the searches and the texts say about it (:data:`FEATURES`), and ranks the pool by an
:class:`EvidenceRanker`, a logistic regression fitted on the train split's gold paragraphs
(``sharp fit-ranker``) and kept as plain numbers (program/linear.py). The returned passages' ``score``
is the ranker's probability that the passage is gold, comparable across queries, so SHARP can rank its
whole pool by it (``evidence_order=score``). Measurements: experiments/RESULTS.md, 'Evidence ranker'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from program.linear import LinearModel, LinearModelError, refuse_other_corpus
from program.retrieval.base import check_query
from program.retrieval.hop import hop_query
from program.retrieval.links import TitleLinker, surface
from program.text import content_terms
from program.types import Passage

FEATURES = (
    "q_hybrid",  # 1 / rank in the query's hybrid hits (0 when not in the top depth)
    "q_dense",  # 1 / rank in the query's dense hits
    "q_bm25",  # 1 / rank in the query's BM25 hits
    "dense_score",  # cosine similarity to the query (0 when not a dense hit)
    "bm25_score",  # BM25 score over the query's best BM25 score
    "hop",  # 1 / rank in the second hop's hits (query + the top passage)
    "hop_top10",  # 1 when among the second hop's first ten
    "title_in_query",  # the passage's title is written in the query
    "title_overlap",  # share of the title's content words in the query
    "query_coverage",  # share of the query's content words in the passage
    "linked",  # 1 / rank of the first top passage whose text names this passage's title
    "linked_count",  # how many of the top passages name it
    "links_top",  # 1 / rank of the first top-3 passage whose title this passage's text names
)

# CandidatePools' settings: hits per search, top hits whose title links join, seed characters of the hop query
POOL_DEFAULTS = {"depth": 20, "link_from": 5, "seed_chars": 300}


class RankerError(LinearModelError):
    """An evidence ranker that cannot be used: edited, unknown features, or fitted on another corpus."""


class EvidenceRanker(LinearModel):
    """P(gold paragraph) of a candidate from its :data:`FEATURES`: a fitted logistic regression."""

    KNOWN = FEATURES
    KIND = "evidence ranker"
    REFIT = "sharp fit-ranker --dataset DATASET"
    ERROR = RankerError

    def pool_settings(self) -> dict[str, int]:
        """How the candidate pool it was fitted on was gathered (CandidatePools' settings): scored alike."""
        return {**POOL_DEFAULTS, **{k: int(v) for k, v in (self.fitted_on.get("pool") or {}).items()}}

    def check_fits(
        self,
        corpus_sha256: str | None,
        fit_command: str = "sharp fit-ranker --dataset DATASET",
        dataset: str | None = None,
    ) -> None:
        remedy = f"Fit one for this index's dataset with `{fit_command}`, or drop it (--retriever-set ranker=null)"
        refuse_other_corpus(self, corpus_sha256, dataset, remedy)


def _rr(ids: Sequence[str], pid: str) -> float:
    try:
        return 1.0 / (ids.index(pid) + 1)
    except ValueError:
        return 0.0


def _phrase(words: Sequence[str]) -> str:
    return " " + " ".join(w.lower() for w in words) + " "


def candidate_features(
    query: str,
    hybrid: Sequence[Passage],
    dense: Sequence[Passage],
    bm25: Sequence[Passage],
    hop: Sequence[Passage],
    linked: Sequence[Sequence[Passage]],
    linker: TitleLinker,
) -> dict[str, tuple[Passage, dict[str, float]]]:
    """Every candidate of one query (hybrid hits, hop hits, linked passages; in that order, no repeats)
    with its :data:`FEATURES`. ``linked[j]``: the passages the ``j``-th hybrid hit names."""
    ids = {name: [p.id for p in hits] for name, hits in (("h", hybrid), ("d", dense), ("b", bm25), ("o", hop))}
    dense_score = {p.id: float(p.score) for p in dense}
    bm25_score = {p.id: float(p.score) for p in bm25}
    bm25_top = max(bm25_score.values(), default=0.0) or 1.0
    linked_ids = [[p.id for p in ps] for ps in linked]
    top3 = ids["h"][:3]
    q_words = _phrase(surface(query))
    q_terms = content_terms(query)
    out: dict[str, tuple[Passage, dict[str, float]]] = {}
    for p in [*hybrid, *hop, *(p for ps in linked for p in ps)]:
        if p.id in out:
            continue
        title_words = surface(p.title)
        title_terms = content_terms(p.title)
        passage_terms = title_terms | content_terms(p.text)
        names = linker.mentioned(p.text, exclude=p.id)
        out[p.id] = (
            p,
            {
                "q_hybrid": _rr(ids["h"], p.id),
                "q_dense": _rr(ids["d"], p.id),
                "q_bm25": _rr(ids["b"], p.id),
                "dense_score": dense_score.get(p.id, 0.0),
                "bm25_score": bm25_score.get(p.id, 0.0) / bm25_top,
                "hop": _rr(ids["o"], p.id),
                "hop_top10": float(p.id in ids["o"][:10]),
                "title_in_query": float(bool(title_words) and _phrase(title_words) in q_words),
                "title_overlap": len(title_terms & q_terms) / len(title_terms) if title_terms else 0.0,
                "query_coverage": len(q_terms & passage_terms) / len(q_terms) if q_terms else 0.0,
                "linked": max((1.0 / (j + 1) for j, ls in enumerate(linked_ids) if p.id in ls), default=0.0),
                "linked_count": float(sum(p.id in ls for ls in linked_ids)),
                "links_top": max((1.0 / (j + 1) for j, t in enumerate(top3) if t != p.id and t in names), default=0.0),
            },
        )
    return out


class CandidatePools:
    """Each query's candidate pool with its features, over a :class:`~program.retrieval.hybrid.HybridRetriever`;
    ``passages`` is the corpus (for the title links)."""

    def __init__(
        self, hybrid: Any, passages: Sequence[Passage], depth: int = 20, link_from: int = 5, seed_chars: int = 300
    ) -> None:
        self.hybrid, self.depth, self.link_from, self.seed_chars = hybrid, depth, link_from, seed_chars
        self._by_id = {p.id: p for p in passages}
        self.linker = TitleLinker((p.id, p.title) for p in passages)
        self._by_title: dict[tuple[str, ...], list[str]] = {}
        for p in passages:
            self._by_title.setdefault(_folded(p.title), []).append(p.id)

    def titled(self, name: str) -> list[Passage]:
        """The passages whose title is ``name`` (case, punctuation and a trailing parenthetical aside:
        "Max Mack" finds "Max Mack (director)"), in corpus order."""
        return [self._by_id[pid] for pid in self._by_title.get(_folded(name), ())]

    def pools(self, queries: Sequence[str]) -> list[dict[str, tuple[Passage, dict[str, float]]]]:
        """Per query: candidate id -> (passage, features), in the order found."""
        cleaned = [check_query(q, 1) for q in queries]
        lists = self.hybrid.ranked_lists(cleaned, self.depth)
        seeds = [
            (i, hop_query(q, hits[0][0], self.seed_chars)) for i, (q, hits) in enumerate(zip(cleaned, lists)) if hits[0]
        ]
        hops = dict(zip((i for i, _ in seeds), self.hybrid.retrieve_many([h for _, h in seeds], self.depth)))
        out = []
        for i, (q, (fused, dense, bm25)) in enumerate(zip(cleaned, lists)):
            linked = [
                [self._by_id[pid] for pid in self.linker.mentioned(p.text, exclude=p.id) if pid in self._by_id]
                for p in fused[: self.link_from]
            ]
            out.append(candidate_features(q, fused, dense, bm25, hops.get(i, []), linked, self.linker))
        return out


class RankedRetriever:
    """The Retriever contract over :class:`CandidatePools` ranked by an :class:`EvidenceRanker`."""

    def __init__(self, pools: CandidatePools, ranker: EvidenceRanker) -> None:
        self.candidates, self.ranker = pools, ranker

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return self.retrieve_many([query], k)[0]

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        for q in queries:
            check_query(q, k)
        return [rank(pool, self.ranker)[:k] for pool in self.candidates.pools(queries)]

    def with_titles(self, query: str, k: int, names: Sequence[str]) -> tuple[list[Passage], list[str]]:
        """The top ``k`` of ``query``'s pool joined by the passages titled by one of ``names`` (a chain's
        earlier answer: the entity's own passage), the best-ranked titled passage always among them, first
        when the ranking leaves it out; and the titled passages' ids. A titled passage joins the pool as a
        passage the top hit links to (the earlier hop's passage named it)."""
        check_query(query, k)
        pool = dict(self.candidates.pools([query])[0])
        titled = [p for name in names for p in self.candidates.titled(name)]
        extra = [p for p in titled if p.id not in pool]
        if extra:
            q = check_query(query, 1)
            pool.update(candidate_features(q, [], [], [], [], [extra], self.candidates.linker))
        ranked = rank(pool, self.ranker)
        ids = {p.id for p in titled}
        top = ranked[:k]
        best = next((p for p in ranked if p.id in ids), None)
        if best is not None and all(p.id != best.id for p in top):
            top = [best, *top[: k - 1]]
        return top, [p.id for p in titled]


def _folded(title: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in surface(title))


def rank(pool: Mapping[str, tuple[Passage, Mapping[str, float]]], ranker: EvidenceRanker) -> list[Passage]:
    """The pool's passages by the ranker's probability (ties: the order the pool found them), each with that
    probability as its ``score``."""
    scored = [(ranker.probability(f), n, p) for n, (p, f) in enumerate(pool.values())]
    return [p.with_score(s) for s, _, p in sorted(scored, key=lambda t: (-t[0], t[1]))]
