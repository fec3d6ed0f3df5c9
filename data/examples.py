"""The one example shape every loader produces, and its JSON round-trip."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import dspy

EXAMPLE_FIELDS = (
    "id",
    "question",
    "answer",
    "answer_aliases",
    "type",
    "level",
    "gold_titles",
    "gold_sentences",
    "gold_hops",
    "dataset",
)


def unique(items: Iterable[str]) -> list[str]:
    """Items in first-seen order, without repeats or empty strings."""
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return list(seen)


def make_example(
    *,
    id: str,
    question: str,
    answer: str,
    dataset: str,
    answer_aliases: Sequence[str] = (),
    type: str | None = None,
    level: str | None = None,
    gold_titles: Sequence[str] = (),
    gold_sentences: Sequence[Sequence[Any]] = (),
    gold_hops: Sequence[Sequence[str]] = (),
) -> dspy.Example:
    """Build the canonical example; ``question`` is its only input.

    Aliases equal to the answer are dropped; gold titles keep their order, without repeats;
    gold sentences are ``(title, sent_id)`` tuples whose sent_id may be None (unknown); gold hops are
    ``(hop, answer)`` pairs in order where the dataset gives them (MuSiQue's question decomposition, a later hop
    naming an earlier answer as "#1"; 2WikiMultihopQA's evidence triples as "relation of subject"): read by
    scoring and train-side compiling alone, never by the program (its only input is the question).
    """
    return dspy.Example(
        id=str(id),
        question=question.strip(),
        answer=answer.strip(),
        answer_aliases=[a for a in unique(a.strip() for a in answer_aliases) if a != answer.strip()],
        type=type,
        level=level,
        gold_titles=unique(gold_titles),
        gold_sentences=[(str(t), None if s is None else int(s)) for t, s in gold_sentences],
        gold_hops=[(str(h), str(a)) for h, a in gold_hops],
        dataset=dataset,
    ).with_inputs("question")
