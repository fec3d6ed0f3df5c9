"""Seeded, reproducible sampling of examples (optionally balanced across question types)."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import TypeVar

import dspy

E = TypeVar("E", bound=dspy.Example)


def sample_key(example_id: str, seed: int) -> str:
    """A seeded pseudo-random sort key that is the same in every Python process (no ``hash()``)."""
    return hashlib.sha256(f"{seed}\x00{example_id}".encode()).hexdigest()


def seeded_order(examples: Sequence[E], seed: int) -> list[E]:
    """Examples in a seeded order that depends on their ids, not on the file order."""
    keyed = [(sample_key(str(ex.get("id")), seed), i, ex) for i, ex in enumerate(examples)]
    return [ex for _, _, ex in sorted(keyed, key=lambda t: (t[0], t[1]))]


def round_robin(examples: Sequence[E], seed: int) -> list[E]:
    """Seeded order interleaved across ``type`` groups (None is a group of its own)."""
    groups: dict[str, list[E]] = defaultdict(list)
    for ex in seeded_order(examples, seed):
        groups["\x00none" if ex.get("type") is None else str(ex.get("type"))].append(ex)
    queues = [groups[name] for name in sorted(groups)]
    out: list[E] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        out.extend(q[rank] for q in queues if rank < len(q))
    return out


def sample(examples: Sequence[E], limit: int | None = None, seed: int = 0, balanced: bool = False) -> list[E]:
    """Up to ``limit`` examples chosen by ``seed``.

    Without a limit and unbalanced, the examples come back in their original order. The choice
    depends only on the seed and the example ids, so it is the same across runs and processes,
    and a larger limit extends a smaller one. ``balanced`` takes the types in turn (round-robin).
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
    if balanced:
        ordered = round_robin(examples, seed)
    elif limit is None:
        ordered = list(examples)
    else:
        ordered = seeded_order(examples, seed)
    return ordered if limit is None else ordered[:limit]
