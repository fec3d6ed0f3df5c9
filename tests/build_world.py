"""A tiny corpus of one's own for `sharp build` tests, and the rules an OpenAI-compatible server answers it by.

``write_folder(path, n)`` writes a dataset folder as a user would bring it: ``train.json`` (questions with their
answers and supporting paragraphs), ``corpus.jsonl`` and ``dev.json``. Each question asks a bridge, "In which city
was the author of BOOK born?"; the corpus holds each book's passage (its author), each author's (their city) and
each city's. The reader (:data:`RULES`, served by tests/live_servers.py RuleServer without log-probabilities)
answers the city where the author's passage is in its evidence, except for every third book, where it stops at
the author (as it does wherever only the book's passage is there): right and wrong drafts, and a focused read of
the author's passage (the question restated through the author) that mends the stopped ones, as does the chain
(the hop planner's plan: "Who wrote BOOK?", then "In which city was #1 born?"; the train rows' ``evidences``
are its gold plans, the planner's demos).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")


def _word(i: int, salt: int) -> str:
    """A made-up word, the same for the same (i, salt), distinct across i."""
    parts = []
    x = i * 7 + salt * 131 + 3
    for _ in range(3):
        parts.append(_ONSETS[x % len(_ONSETS)] + _VOWELS[(x // 14) % len(_VOWELS)])
        x = x // 5 + i + 11 * salt + 1
    return ("".join(parts) + f"{'rnst'[i % 4]}{i}").capitalize()


N = 24
BOOKS = [f"The {_word(i, 1)}" for i in range(N)]
AUTHORS = [f"{_word(i, 2)} {_word(i, 3)}" for i in range(N)]
CITIES = [_word(i, 4) for i in range(N)]


def question(i: int) -> str:
    return f"In which city was the author of {BOOKS[i]} born?"


def passages() -> list[dict]:
    rows = []
    for i in range(N):
        rows.append({"id": f"b{i}", "title": BOOKS[i], "text": f"{BOOKS[i]} is a novel written by {AUTHORS[i]}."})
        rows.append({"id": f"a{i}", "title": AUTHORS[i], "text": f"{AUTHORS[i]} is a writer born in {CITIES[i]}."})
        rows.append({"id": f"c{i}", "title": CITIES[i], "text": f"{CITIES[i]} is a small town by the sea."})
    return rows


def rows(labels: bool = True) -> list[dict]:
    out = []
    for i in range(N):
        row = {"id": f"q{i}", "question": question(i), "answer": CITIES[i]}
        if labels:
            row["supporting_facts"] = [[BOOKS[i], 0], [AUTHORS[i], 0]]
            row["evidences"] = [[BOOKS[i], "author", AUTHORS[i]], [AUTHORS[i], "place of birth", CITIES[i]]]
        out.append(row)
    return out


def write_folder(folder: Path, labels: bool = True, n: int = N) -> Path:
    """A dataset folder as a user brings one: train.json, corpus.jsonl, dev.json."""
    folder.mkdir(parents=True, exist_ok=True)
    questions = rows(labels)[:n]
    (folder / "train.json").write_text(json.dumps(questions))
    (folder / "dev.json").write_text(json.dumps(questions[:4]))
    with open(folder / "corpus.jsonl", "w") as fh:
        for p in passages():
            fh.write(json.dumps(p) + "\n")
    return folder


_TITLE = re.compile(r"^\[\d+\] (.*?): ", re.M)


def _index(text: str) -> tuple[int | None, bool]:
    """The book (True) or the author (False) a question names, by its index."""
    for i in range(N):
        if BOOKS[i] in text:
            return i, True
        if AUTHORS[i] in text:
            return i, False
    return None, False


def reader(f: dict) -> dict:
    """The generator and the focused reader: see the module docstring."""
    i, of_book = _index(f.get("question", ""))
    if i is not None and AUTHORS[i] in (f.get("intermediate") or ""):  # the focused read: through the author
        of_book = False
    titles = _TITLE.findall(f.get("evidence", "") or f.get("passages", "") or "")
    if i is None:
        return {"answer": "unknown", "supporting_passages": []}
    if f.get("question", "").startswith("Who wrote"):  # a chain's first hop
        found = BOOKS[i] in titles
        return {
            "answer": AUTHORS[i] if found else "unknown",
            "supporting_passages": [titles.index(BOOKS[i]) + 1] if found else [],
        }
    if AUTHORS[i] in titles and not (of_book and i % 3 == 0):
        return {"answer": CITIES[i], "supporting_passages": [titles.index(AUTHORS[i]) + 1]}
    if BOOKS[i] in titles or AUTHORS[i] in titles:
        return {"answer": AUTHORS[i], "supporting_passages": [1]}
    return {"answer": "unknown", "supporting_passages": []}


def plan(question: str) -> dict:
    """The hop planner: the book's author, then where #1 was born."""
    i, of_book = _index(question)
    if i is None or not of_book:
        return {"hops": []}
    return {"hops": [f"Who wrote {BOOKS[i]}?", "In which city was #1 born?"]}


RULES = {
    "generator": reader,
    "focuser": reader,
    "planner": lambda f: {"entities": [], "sub_questions": []},
    "hop_planner": lambda f: plan(f.get("question", "")),
    "composer": lambda f: {"answer": "unknown"},
    "critic": lambda f: {"verdict": "supported", "confidence": 0.5},
}
