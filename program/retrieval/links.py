"""Title links: which passages of the corpus a text names by their title (Wikipedia's hyperlinks, recovered).

On a bridge question the first paragraph names the second entity, and in a Wikipedia-derived corpus that
name is the title of the second paragraph. :class:`TitleLinker` finds, in any text, the longest spans that
are some passage's title (case kept, punctuation ignored, a trailing "(disambiguation)" dropped), left to
right, so the evidence ranker can tell which pool passage the others point to. No model, no index: a dict
of the corpus titles' word sequences.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
MAX_WORDS = 8


def surface(title: str) -> tuple[str, ...]:
    """A title as the words a text would write it with: a trailing parenthetical dropped, punctuation gone."""
    return tuple(_NON_WORD.sub(" ", _PAREN.sub("", title)).split())


def _linkable(words: tuple[str, ...]) -> bool:
    """A name worth linking: up to MAX_WORDS words, starting with a capital or a digit, not one short word."""
    if not words or len(words) > MAX_WORDS:
        return False
    first = words[0][0]
    if not (first.isupper() or first.isdigit()):
        return False
    return len(words) > 1 or len(words[0]) >= 4


class TitleLinker:
    """Finds the corpus titles a text mentions. ``passages``: (id, title) pairs of the whole corpus."""

    def __init__(self, passages: Iterable[tuple[str, str]]) -> None:
        self._ids: dict[tuple[str, ...], list[str]] = {}
        for pid, title in passages:
            words = surface(title)
            if _linkable(words):
                self._ids.setdefault(words, []).append(str(pid))
        self._longest = max((len(w) for w in self._ids), default=0)

    def __len__(self) -> int:
        return len(self._ids)

    def mentioned(self, text: str, exclude: str | None = None, limit: int = 20) -> list[str]:
        """Ids of the passages whose titles ``text`` names, in order of first mention (longest match at
        each position; ``exclude``, e.g. the text's own passage, left out), at most ``limit``."""
        words = _NON_WORD.sub(" ", text).split()
        out: list[str] = []
        i = 0
        while i < len(words) and len(out) < limit:
            step = 1
            for n in range(min(self._longest, len(words) - i), 0, -1):
                ids = self._ids.get(tuple(words[i : i + n]))
                if ids:
                    out.extend(pid for pid in ids if pid != exclude and pid not in out)
                    step = n
                    break
            i += step
        return out[:limit]
