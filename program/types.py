"""Small value types shared by every layer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Passage:
    """One retrieved paragraph. ``id`` is stable across index rebuilds of the same corpus."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def with_score(self, score: float) -> Passage:
        return Passage(self.id, self.title, self.text, float(score))

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "text": self.text, "score": self.score}
