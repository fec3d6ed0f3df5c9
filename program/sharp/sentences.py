"""Sentence evidence: the sentences of the ranked passages that matter, under their titles (no LM call).

The 1.5B reader is distracted by passages it does not need (three ranked passages read better than five:
experiments/RESULTS.md, 'Reading'). A :class:`SentenceSelector`, a logistic regression over what a sentence
shares with the question and where it stands (:data:`SENTENCE_FEATURES`), fitted on train questions'
supporting-fact labels (``sharp fit-selector``), scores every sentence of
the top passages; :func:`select_sentences` keeps each passage's first sentence (it names the passage's
subject) and the best-scored others up to a budget, in their passage's order. The reader then reads more
passages in fewer tokens. Like the answer critic's calibrators, the selector is plain numbers in the program's
config (program/linear.py), refused on another corpus than the one it was fitted on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from program.linear import LinearModel, LinearModelError, refuse_other_corpus
from program.sharp.spans import words
from program.text import content_terms
from program.types import Passage

_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"“(\[]?[A-Z0-9])")

SENTENCE_FEATURES = (
    "overlap",  # content words of the question the sentence holds
    "overlap_share",  # ... as a share of the question's content words
    "title_in_question",  # the passage's title is named by the question
    "names_other",  # the sentence names another evidence passage's title (the bridge to the next hop)
    "first",  # the passage's first sentence
    "position",  # its place in the passage (0, 1, ...), capped
    "rank",  # its passage's rank in the evidence (1, 2, ...)
    "passage_score",  # its passage's score (the evidence ranker's probability)
    "has_number",  # it states a number or a year
    "length",  # its length in words, capped
)


class SelectorError(LinearModelError):
    """A sentence selector whose numbers do not match its digest, or fitted on another corpus."""


class SentenceSelector(LinearModel):
    """P(a sentence is a supporting fact) from its :data:`SENTENCE_FEATURES`: a fitted logistic regression."""

    KNOWN = SENTENCE_FEATURES
    KIND = "sentence selector"
    REFIT = "sharp fit-selector --dataset DATASET --n-train N"
    ERROR = SelectorError

    def check_fits(self, corpus_sha256: str | None, dataset: str | None = None) -> None:
        remedy = (
            f"Fit one for this index's dataset with `{self.REFIT}`, or read whole passages (--set evidence=passages)"
        )
        refuse_other_corpus(self, corpus_sha256, dataset, remedy)


def split_sentences(text: str) -> list[str]:
    """A passage's text cut into sentences (at a stop followed by a capital or a digit)."""
    return [s.strip() for s in _SPLIT.split(text or "") if s.strip()]


def sentence_features(
    question: str, sentence: str, position: int, passage: Passage, rank: int, titles: Sequence[str]
) -> dict[str, float]:
    """The selector's features of one sentence (see :data:`SENTENCE_FEATURES`)."""
    asked = content_terms(question)
    held = content_terms(sentence)
    own = " ".join(words(passage.title))
    q = f" {' '.join(words(question))} "
    text = f" {' '.join(words(sentence))} "
    others = [" ".join(words(t)) for t in titles if t != passage.title]
    return {
        "overlap": float(len(asked & held)),
        "overlap_share": len(asked & held) / len(asked) if asked else 0.0,
        "title_in_question": float(bool(own) and f" {own} " in q),
        "names_other": float(any(o and f" {o} " in text for o in others)),
        "first": float(position == 0),
        "position": float(min(position, 10)),
        "rank": float(rank),
        "passage_score": float(passage.score),
        "has_number": float(bool(re.search(r"\d", sentence))),
        "length": float(min(len(sentence.split()), 60)),
    }


def scored_sentences(question: str, passages: Sequence[Passage], selector: SentenceSelector) -> list[tuple]:
    """(P, passage index, position, sentence) of every sentence of ``passages``."""
    titles = [p.title for p in passages]
    out = []
    for i, p in enumerate(passages):
        for j, sentence in enumerate(split_sentences(p.text)):
            f = sentence_features(question, sentence, j, p, i + 1, titles)
            out.append((selector.probability(f), i, j, sentence))
    return out


def select_sentences(
    question: str, passages: Sequence[Passage], selector: SentenceSelector, budget: int
) -> list[Passage]:
    """``passages`` with only their chosen sentences as text: each passage's first sentence (it names the
    passage's subject), then the best-scored other sentences up to ``budget`` sentences in all, each kept in
    its passage's order."""
    scored = scored_sentences(question, passages, selector)
    keep = {(i, 0) for i in range(len(passages))}
    for _, i, j, _ in sorted((s for s in scored if s[2] > 0), key=lambda s: (-s[0], s[1], s[2])):
        if len(keep) >= max(budget, len(passages)):
            break
        keep.add((i, j))
    return [
        Passage(p.id, p.title, " ".join(s for _, pi, j, s in scored if pi == i and (pi, j) in keep), p.score)
        for i, p in enumerate(passages)
    ]
