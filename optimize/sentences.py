"""Fit the sentence selector (program/sharp/sentences.py) on train questions' supporting-fact labels.

:func:`sentence_cases` turns one question's ranked passages into one case per sentence: the selector's
features and the label "this sentence is one of the question's supporting facts" (its text matches a gold
sentence of that passage). :func:`coverage` says how much of the gold the chosen sentences hold. Only plain
numbers leave here (program.sharp.sentences.SentenceSelector).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from optimize.linear import fit_linear
from program.sharp.sentences import (
    SENTENCE_FEATURES,
    SentenceSelector,
    select_sentences,
    sentence_features,
    split_sentences,
)
from program.text import content_terms
from program.types import Passage


def _matches(sentence: str, gold: str) -> bool:
    """Whether a split sentence is (most of) a gold sentence: 60% of either's content words shared."""
    a, b = content_terms(sentence), content_terms(gold)
    return bool(a and b) and len(a & b) >= 0.6 * min(len(a), len(b))


def sentence_cases(
    question: str, passages: Sequence[Passage], gold: Mapping[str, Sequence[str]], qid: Any = None
) -> list[dict]:
    """One case per sentence of ``passages``; ``gold``: title -> its supporting sentences' texts."""
    titles = [p.title for p in passages]
    cases = []
    for rank, p in enumerate(passages, 1):
        for position, sentence in enumerate(split_sentences(p.text)):
            features = sentence_features(question, sentence, position, p, rank, titles)
            label = any(_matches(sentence, g) for g in gold.get(p.title, ()))
            cases.append({"question_id": qid, "features": features, "label": label})
    return cases


def fit_selector(cases: Sequence[Mapping[str, Any]], fitted_on: Mapping[str, Any], c: float = 1.0) -> SentenceSelector:
    return fit_linear(
        SentenceSelector, [x["features"] for x in cases], [x["label"] for x in cases], SENTENCE_FEATURES, c, fitted_on
    )


def coverage(
    items: Iterable[tuple[str, Sequence[Passage], Mapping[str, Sequence[str]]]],
    selector: SentenceSelector | None,
    budget: int,
    whole: int,
    max_chars: int = 600,
) -> dict[str, float]:
    """Over (question, passages, gold) items: the share of gold sentences in what the reader is shown, the
    share of questions whose every gold sentence is shown, and the characters shown a question; the chosen
    sentences of all passages (``selector``), or the top ``whole`` passages whole (``selector`` None); each
    passage cut to ``max_chars`` as the reader's prompt cuts it (program.reading.evidence.format_evidence)."""
    found = total = complete = chars = n = 0
    for question, passages, gold in items:
        shown = select_sentences(question, passages, selector, budget) if selector else list(passages[:whole])
        shown = [Passage(p.id, p.title, p.text[:max_chars], p.score) for p in shown]
        texts = {p.title: split_sentences(p.text) for p in shown}
        wanted = [(t, g) for t, gs in gold.items() for g in gs]
        hit = [any(_matches(s, g) for s in texts.get(t, ())) for t, g in wanted]
        found, total = found + sum(hit), total + len(hit)
        complete += int(bool(hit) and all(hit))
        chars += sum(len(p.text) for p in shown)
        n += 1
    return {
        "questions": n,
        "gold_sentence_recall": round(found / total, 4) if total else 0.0,
        "all_gold_sentences": round(complete / n, 4) if n else 0.0,
        "chars_per_q": round(chars / n, 1) if n else 0.0,
    }
