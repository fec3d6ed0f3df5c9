"""Retrieval corpora: read from ``corpus.jsonl`` files or built from the questions' contexts."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from data.errors import DatasetError
from data.formats import FieldError, detect_format, join_sentences
from data.readers import BadRow, read_rows
from program.types import Passage

logger = logging.getLogger(__name__)

Dedup = Literal["passage", "title"]
CORPUS_FILE = "corpus.jsonl"


def passage_id(title: str, text: str | None = None) -> str:
    """A stable id from the title (and the text, to tell apart paragraphs sharing a title)."""
    key = title if text is None else f"{title}\x00{text}"
    return "p" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


class _IdMaker:
    """Stable ids for id-less passages: from the title, or title and text when the title repeats."""

    def __init__(self) -> None:
        self.titles: set[str] = set()

    def __call__(self, title: str, text: str) -> str:
        pid = passage_id(title, text) if title in self.titles else passage_id(title)
        self.titles.add(title)
        return pid


def _corpus_passage(row: Any, make_id: _IdMaker) -> Passage | None:
    """One corpus line as a Passage (None if its text is empty)."""
    if isinstance(row, BadRow):
        raise row
    if not isinstance(row, Mapping):
        raise DatasetError(f"expected a JSON object, got {type(row).__name__}")
    title = row.get("title")
    if not isinstance(title, str) or not title.strip():
        raise FieldError("title", "is missing or not a non-empty string")
    title, text = title.strip(), join_sentences(row.get("text"), "text")
    if not text:
        return None
    raw_id = row.get("id")
    has_id = isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id).strip()
    return Passage(id=str(raw_id) if has_id else make_id(title, text), title=title, text=text)


def iter_corpus(path: str | Path) -> Iterator[Passage]:
    """Stream the passages of a corpus JSONL file (``id``, ``title``, ``text``), not deduplicated."""
    path = Path(path)
    empty, make_id = 0, _IdMaker()
    for location, row in read_rows(path):
        try:
            passage = _corpus_passage(row, make_id)
        except DatasetError as exc:
            raise DatasetError(f"{path}: {location}: {exc}") from None
        if passage is None:
            empty += 1
            continue
        yield passage
    if empty:
        logger.warning("%s: skipped %d passages with empty text", path, empty)


def dedupe(passages: Iterable[Passage], dedup: Dedup = "passage", source: str = "corpus") -> list[Passage]:
    """Drop repeated passages, first wins.

    ``passage``: same title and same text (paragraphs that only share a title are kept, as
    MuSiQue has many). ``title``: one passage per title.
    """
    if dedup not in ("passage", "title"):
        raise ValueError(f"dedup must be 'passage' or 'title', got {dedup!r}")
    kept: dict[tuple[str, str], Passage] = {}
    ids: dict[str, Passage] = {}
    titles: set[str] = set()
    dropped = 0
    for p in passages:
        key = (p.title, p.text if dedup == "passage" else "")
        if key in kept:
            dropped += 1
            continue
        if p.id in ids:
            raise DatasetError(
                f"{source}: passage id {p.id!r} is used by two different passages ({ids[p.id].title!r} and {p.title!r})"
            )
        kept[key], ids[p.id] = p, p
        titles.add(p.title)
    result = list(kept.values())
    if dropped:
        logger.info("%s: dropped %d duplicate passages (dedup by %s)", source, dropped, dedup)
    if len(titles) < len(result):
        logger.info("%s: %d passages share a title with another (kept)", source, len(result) - len(titles))
    if not result:
        raise DatasetError(f"{source}: the corpus is empty (no passage with a title and text)")
    return result


def load_corpus(path: str | Path, dedup: Dedup = "passage") -> list[Passage]:
    """All passages of a corpus JSONL file, deduplicated (see :func:`dedupe`)."""
    passages = dedupe(iter_corpus(path), dedup, str(path))
    logger.info("%s: %d passages", path, len(passages))
    return passages


def corpus_from_file(path: str | Path, dedup: Dedup = "passage", split: str | None = None) -> list[Passage]:
    """A corpus from the paragraphs (``context`` / ``paragraphs``) of a question file (JSON, JSONL or saved HF
    dataset), of any supported layout (detected from the first row). Ids come from the title; a later
    paragraph with the same title but other text gets an id from title and text."""
    make_id = _IdMaker()
    passages: list[Passage] = []
    row_format = None
    for location, row in read_rows(path, split):
        try:
            if isinstance(row, BadRow):
                raise row
            row_format = row_format or detect_format(row)
            pairs = list(row_format.paragraphs(row))
        except DatasetError as exc:
            raise DatasetError(f"{path}: {location}: {exc}") from None
        for title, text in pairs:
            title = title.strip()
            if title and text:
                passages.append(Passage(id=make_id(title, text), title=title, text=text))
    return dedupe(passages, dedup, f"corpus built from {path}")
