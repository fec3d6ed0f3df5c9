"""Content words of a text: the one tokenizer for term overlap (SHARP's stale-query check, the evidence
ranker's question coverage). Lower-cased letters and digits, words of three characters or more, common
function words dropped."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "is",
        "was",
        "were",
        "are",
        "be",
        "been",
        "who",
        "what",
        "which",
        "when",
        "where",
        "how",
        "did",
        "does",
        "do",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "his",
        "her",
        "their",
        "as",
        "than",
        "also",
        "both",
        "one",
    ]
)


def content_terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS}
