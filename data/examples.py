"""The one example shape every loader produces, and its JSON round-trip."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import dspy

from data.errors import DatasetError

EXAMPLE_FIELDS = (
    "id",
    "question",
    "answer",
    "answer_aliases",
    "type",
    "level",
    "gold_titles",
    "gold_sentences",
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
) -> dspy.Example:
    """Build the canonical example; ``question`` is its only input.

    Aliases equal to the answer are dropped; gold titles keep their order, without repeats;
    gold sentences are ``(title, sent_id)`` tuples whose sent_id may be None (unknown).
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
        dataset=dataset,
    ).with_inputs("question")


def example_to_dict(example: dspy.Example) -> dict[str, Any]:
    """A JSON-ready dict of the example's fields (gold sentences as ``[title, sent_id]`` lists)."""
    data = {name: example.get(name) for name in EXAMPLE_FIELDS}
    data["answer_aliases"] = list(data["answer_aliases"] or [])
    data["gold_titles"] = list(data["gold_titles"] or [])
    data["gold_sentences"] = [[t, s] for t, s in data["gold_sentences"] or []]
    return data


def example_from_dict(data: Mapping[str, Any]) -> dspy.Example:
    """Inverse of :func:`example_to_dict`; unknown or missing keys are a DatasetError."""
    unknown = sorted(set(data) - set(EXAMPLE_FIELDS))
    missing = [k for k in ("id", "question", "answer", "dataset") if k not in data]
    if unknown or missing:
        raise DatasetError(
            f"not a saved example: unknown keys {unknown}, missing keys {missing} "
            f"(expected keys: {', '.join(EXAMPLE_FIELDS)})"
        )
    optional = {k: data[k] for k in EXAMPLE_FIELDS if k in data and data[k] is not None}
    return make_example(**optional)
