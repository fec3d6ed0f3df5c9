"""Answers written as the passage writes them (no LM call).

A third of the reader's misses with complete evidence are the right entity in another surface form: the
gold answer is the passage's own span, often the full name its first sentence gives ("Norman Alfred
William Lindsay (22 February 1879 - 21 November 1969) was ..." for the reader's "Norman Lindsay"). Two
rules, each a policy choice that `sharp tune` keeps only where it pays on train:

* :func:`passage_name`: an answer that names an evidence passage's subject is written as that passage's
  first sentence names it.
* :func:`closest_span`: an answer that is not a span of the evidence becomes the evidence span closest to
  it (token F1), when one is close enough.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from program.types import Passage

_SUBJECT = re.compile(r"^\s*(.{2,90}?)\s*(?:\(|,| is | was | are | were | has | had | became )")
_CLEAN = re.compile(r"^[\w .'\-]+$")


def words(text: str) -> list[str]:
    """Lowercase words, punctuation and articles aside (the words exact match compares)."""
    return list(_words(str(text)))


# replay reads the same answers, titles and passages under every policy a search tries: pure functions of
# strings, memoized (bounded: an LRU of the recent ones)
@lru_cache(maxsize=65536)
def _words(text: str) -> tuple[str, ...]:
    return tuple(w for w in re.sub(r"[^\w\s]", " ", text.lower()).split() if w not in ("a", "an", "the"))


@lru_cache(maxsize=65536)
def _title_words(title: str) -> tuple[str, ...]:
    """A title's words, its parenthesised qualifier aside."""
    return _words(re.sub(r"\(.*?\)", "", title))


@lru_cache(maxsize=16384)  # whole passages: a replayed corpus reads a few thousand (~1 KB each)
def _padded(title: str, text: str) -> str:
    """A passage's words (title and text), joined and padded with spaces: what a span is looked up in."""
    return f" {' '.join(_words(title + ' ' + text))} "


def lead_name(passage: Passage) -> str | None:
    """The name a passage's first sentence gives its subject (the text before "(", ",", " is ", " was "),
    when it is a clean name of at most eight words that shares a word with the title; else None."""
    m = _SUBJECT.match(passage.text or "")
    if not m:
        return None
    name = m.group(1).strip()
    if not _CLEAN.match(name) or len(name.split()) > 8:
        return None
    if not set(_words(name)) & set(_title_words(passage.title)):
        return None
    return name


def names_title(answer: str, passage: Passage) -> bool:
    """Whether ``answer`` names ``passage``'s subject: its title, a parenthesised qualifier aside."""
    a = _words(str(answer))
    return bool(a) and a == _title_words(passage.title)


def passage_name(answer: str, evidence: Sequence[Passage]) -> str | None:
    """``answer`` as the first sentence of the evidence passage it names writes it, when that is longer
    and holds every word of the answer in order (a full name for a short one); else None."""
    for p in evidence:
        if not names_title(answer, p):
            continue
        name = lead_name(p)
        if name and _in_order(words(answer), words(name)) and len(words(name)) > len(words(answer)):
            return name
    return None


def _in_order(needle: list[str], hay: list[str]) -> bool:
    it = iter(hay)
    return all(w in it for w in needle)


def is_span(answer: str, evidence: Sequence[Passage]) -> bool:
    """Whether ``answer``'s words occur together in one evidence passage (title or text)."""
    return _within(words(answer), [(p.title, p.text) for p in evidence])


def _within(target: list[str], evidence: Sequence[tuple[str, str]]) -> bool:
    a = " ".join(target)
    return bool(a) and any(f" {a} " in _padded(title, text) for title, text in evidence)


def token_f1(pred: list[str], gold: list[str]) -> float:
    common = sum((Counter(pred) & Counter(gold)).values())
    if not common:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def closest_span(answer: str, evidence: Sequence[Passage], min_f1: float = 0.5) -> str | None:
    """The evidence span (as the passage writes it) closest to ``answer`` by token F1, when ``answer`` is not
    a span already and the closest reaches ``min_f1``; else None. Spans run within a sentence, up to two words
    longer than the answer; the shorter wins a tie. (Memoized: a replayed policy search settles the same
    recorded reads thousands of times.)"""
    return _closest_span(answer, tuple((p.title, p.text) for p in evidence), min_f1)


@lru_cache(maxsize=32768)
def _closest_span(answer: str, evidence: tuple[tuple[str, str], ...], min_f1: float) -> str | None:
    target = words(answer)
    if not target or len(target) > 12:
        return None
    if _within(target, evidence):
        return None  # a span already
    wanted = Counter(target)
    best: tuple[float, int, str] | None = None
    for title, text in evidence:
        for sentence in re.split(r"(?<=[.!?])\s+", f"{title}. {text}"):
            tokens = sentence.split()
            # a span's words are its tokens' words, in order (words() drops punctuation and articles alike)
            parts = [words(t) for t in tokens]
            hits = [any(w in wanted for w in ws) for ws in parts]
            for n in range(1, len(target) + 3):
                for i in range(0, max(0, len(tokens) - n) + 1):
                    if not any(hits[i : i + n]):
                        continue  # no word in common: F1 0
                    span_words = [w for ws in parts[i : i + n] for w in ws]
                    score = token_f1(span_words, target)
                    if score >= min_f1:
                        span = " ".join(tokens[i : i + n]).strip(" ,.;:()\"'")
                        if best is None or (score, -len(span)) > (best[0], -best[1]):
                            best = (score, len(span), span)
    return best[2] if best else None
