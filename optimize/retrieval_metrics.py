"""Retrieval quality by gold titles: recall@k, precision@k, all-gold@k; per question and aggregated.

Pure functions over titles (strings), no data or index access. Titles are compared after
Unicode NFC, stripping and lower-casing (as ``optimize.metrics`` does).

* recall@k     = |gold titles among the top-k titles| / |gold titles|
* precision@k  = |top-k passages whose title is gold| / k   (k, not the number returned)
* all_gold@k   = 1.0 when every gold title is in the top k, else 0.0
Questions without gold titles are not scored (they are counted as ``skipped``).
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

UNKNOWN_TYPE = "unknown"


def norm_title(title: str) -> str:
    return unicodedata.normalize("NFC", str(title)).strip().lower()


def _gold(gold_titles: Iterable[str]) -> set[str]:
    return {norm_title(t) for t in gold_titles if str(t).strip()}


def recall_at_k(retrieved_titles: Sequence[str], gold_titles: Iterable[str], k: int) -> float:
    gold = _gold(gold_titles)
    if not gold:
        raise ValueError("recall is undefined without gold titles")
    top = {norm_title(t) for t in retrieved_titles[:k]}
    return len(gold & top) / len(gold)


def precision_at_k(retrieved_titles: Sequence[str], gold_titles: Iterable[str], k: int) -> float:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gold = _gold(gold_titles)
    return sum(norm_title(t) in gold for t in retrieved_titles[:k]) / k


def all_gold_at_k(retrieved_titles: Sequence[str], gold_titles: Iterable[str], k: int) -> float:
    gold = _gold(gold_titles)
    if not gold:
        raise ValueError("all-gold is undefined without gold titles")
    return float(gold <= {norm_title(t) for t in retrieved_titles[:k]})


def question_metrics(
    retrieved_titles: Sequence[str], gold_titles: Iterable[str], ks: Sequence[int] = (5, 10)
) -> dict[str, float]:
    """``{"recall@5": .., "precision@5": .., "all_gold@5": .., ...}`` for one question."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"] = recall_at_k(retrieved_titles, gold_titles, k)
        out[f"precision@{k}"] = precision_at_k(retrieved_titles, gold_titles, k)
        out[f"all_gold@{k}"] = all_gold_at_k(retrieved_titles, gold_titles, k)
    return out


def _mean(rows: list[Mapping[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r})
    out: dict[str, float] = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    out["n"] = len(rows)
    return out


def aggregate(results: Iterable[tuple[str | None, Sequence[str], Iterable[str]]], ks: Sequence[int] = (5, 10)) -> dict:
    """Mean metrics overall and per question type.

    ``results``: ``(question_type, retrieved_titles, gold_titles)`` per question (type None is
    reported as "unknown"). Returns ``{"overall": {metric: mean, "n": N}, "by_type": {type:
    {...}}, "skipped": number of questions without gold titles}``; types are sorted by name.
    """
    per_type: dict[str, list[dict[str, float]]] = defaultdict(list)
    rows: list[dict[str, float]] = []
    skipped = 0
    for qtype, retrieved, gold in results:
        gold = list(gold)
        if not _gold(gold):
            skipped += 1
            continue
        m = question_metrics(list(retrieved), gold, ks)
        rows.append(m)
        per_type[qtype or UNKNOWN_TYPE].append(m)
    return {
        "overall": _mean(rows) if rows else {"n": 0},
        "by_type": {t: _mean(per_type[t]) for t in sorted(per_type)},
        "skipped": skipped,
    }
