"""Fit the evidence ranker on train questions' gold paragraphs and judge it by all-gold@k.

A case is one question: its gold titles and its candidate pool (program.retrieval.ranked.CandidatePools:
each candidate's title and features). :func:`fit_ranker` fits a logistic regression "is this candidate a
gold paragraph" over every candidate of every training question; :func:`pool_scores` reports, on other
questions, how often the top k of a ranking holds every gold paragraph (all-gold@k) and the share of gold
found (recall@k), for the ranker and for the hybrid order it replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from optimize.linear import fit_linear
from optimize.metrics import evidence_complete
from program.retrieval.ranked import FEATURES, EvidenceRanker

KS = (3, 5, 7)


def _norm(title: str) -> str:
    return " ".join(title.lower().split())


def ranker_case(example: Any, pool: Mapping[str, tuple[Any, Mapping[str, float]]]) -> dict:
    """One question's case: id, gold titles, and (title, features) of each candidate."""
    return {
        "id": str(example.get("id")),
        "gold": list(example.get("gold_titles") or []),
        "candidates": [{"title": p.title, "features": dict(f)} for p, f in pool.values()],
    }


def labelled(cases: Iterable[Mapping[str, Any]]) -> tuple[list[Mapping[str, float]], list[bool]]:
    rows, labels = [], []
    for case in cases:
        gold = {_norm(t) for t in case["gold"]}
        for cand in case["candidates"]:
            rows.append(cand["features"])
            labels.append(_norm(cand["title"]) in gold)
    return rows, labels


def fit_ranker(
    cases: Sequence[Mapping[str, Any]],
    c: float = 1.0,
    features: Sequence[str] = FEATURES,
    fitted_on: Mapping[str, Any] | None = None,
) -> EvidenceRanker:
    """A logistic regression "gold paragraph or not" over every candidate of ``cases``."""
    rows, labels = labelled(cases)
    return fit_linear(EvidenceRanker, rows, labels, features, c, {"questions": len(cases), **dict(fitted_on or {})})


def pool_scores(
    cases: Sequence[Mapping[str, Any]], score: Callable[[Mapping[str, float]], float], ks: Sequence[int] = KS
) -> dict[str, float]:
    """all-gold@k and recall@k of the candidates ranked by ``score`` (ties: the order found), and the
    pool's own all-gold (what any ranking of it can reach), over the cases with gold titles."""
    scored = [c for c in cases if c["gold"]]
    out = {f"all_gold@{k}": 0.0 for k in ks} | {f"recall@{k}": 0.0 for k in ks} | {"pool_all_gold": 0.0}
    for case in scored:
        order = sorted(enumerate(case["candidates"]), key=lambda t: (-score(t[1]["features"]), t[0]))
        titles = [cand["title"] for _, cand in order]
        gold = {_norm(t) for t in case["gold"]}
        out["pool_all_gold"] += evidence_complete(case["gold"], titles)
        for k in ks:
            out[f"all_gold@{k}"] += evidence_complete(case["gold"], titles[:k])
            out[f"recall@{k}"] += len(gold & {_norm(t) for t in titles[:k]}) / len(gold)
    n = len(scored) or 1
    return {key: round(v / n, 4) for key, v in out.items()} | {"questions": len(scored)}


def hybrid_order(features: Mapping[str, float]) -> float:
    """The hybrid search's own order (what plain RAG reads), for comparison."""
    return features["q_hybrid"]
