"""Row formats of the supported benchmarks: detection, parsing into examples, paragraph extraction.

A parser turns one raw row into the keyword arguments of :func:`data.examples.make_example`
and raises :class:`FieldError` naming the offending field; the loader adds file and row.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from data.errors import DatasetError

Row = Mapping[str, Any]


class FieldError(DatasetError):
    """One field of one row is missing or has the wrong type."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field '{field}' {problem}")
        self.field = field


# ---------------------------------------------------------------- field helpers


def required_text(row: Row, field: str) -> str:
    """A non-empty string field."""
    if field not in row or row[field] is None:
        raise FieldError(field, "is missing")
    value = row[field]
    if not isinstance(value, str):
        raise FieldError(field, f"must be a string, got {type(value).__name__}")
    if not value.strip():
        raise FieldError(field, "is empty")
    return value


def optional_text(row: Row, field: str) -> str | None:
    """A string field that may be absent or null."""
    value = row.get(field)
    if value is None or isinstance(value, str):
        return value or None
    raise FieldError(field, f"must be a string or null, got {type(value).__name__}")


def text_list(row: Row, field: str) -> list[str]:
    """A list of strings that may be absent or null."""
    value = row.get(field)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FieldError(field, "must be a list of strings")
    return value


def row_id(row: Row, *fields: str) -> str:
    """The row's id from the first present field, else a stable hash of its question."""
    for field in fields:
        value = row.get(field)
        if isinstance(value, (str, int)) and str(value).strip():
            return str(value)
    return "q" + hashlib.sha1(str(row.get("question", "")).encode("utf-8")).hexdigest()[:16]


def join_sentences(sentences: Any, field: str = "text") -> str:
    """One paragraph string from a sentence list or a string: whitespace runs become one space."""
    if isinstance(sentences, str):
        text = sentences
    elif isinstance(sentences, list) and all(isinstance(s, str) for s in sentences):
        text = " ".join(sentences)
    else:
        raise FieldError(field, f"must be a string or a list of strings, got {type(sentences).__name__}")
    return re.sub(r"\s+", " ", text).strip()


def sent_id(value: Any, field: str) -> int | None:
    """A sentence index: a non-negative int, or None where the file does not know it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FieldError(field, f"has a bad sentence id {value!r} (want an int >= 0 or null)")
    return value


def fact_pairs(facts: Any) -> list[tuple[str, int | None]]:
    """``[[title, sent_id], ...]`` (official layout) as tuples."""
    if facts is None:
        return []
    pairs = []
    for fact in facts if isinstance(facts, list) else [None]:
        if not isinstance(fact, (list, tuple)) or len(fact) != 2 or not isinstance(fact[0], str):
            raise FieldError("supporting_facts", f"must be a list of [title, sent_id] pairs, got {fact!r}")
        pairs.append((fact[0], sent_id(fact[1], "supporting_facts")))
    return pairs


def _columns(row: Row, field: str, keys: tuple[str, str]) -> tuple[list, list]:
    """Two parallel lists from a Hugging Face struct column like ``{title: [...], sent_id: [...]}``."""
    value = row.get(field)
    if value is None:
        return [], []
    if not isinstance(value, Mapping) or not all(isinstance(value.get(k), list) for k in keys):
        raise FieldError(field, f"must be a mapping with list columns {list(keys)}")
    first, second = value[keys[0]], value[keys[1]]
    if len(first) != len(second):
        raise FieldError(field, f"has columns of different lengths ({len(first)} vs {len(second)})")
    return first, second


# ---------------------------------------------------------------- parsers


def parse_official(row: Row, dataset: str) -> dict[str, Any]:
    """HotpotQA / 2WikiMultihopQA official layout (also the open-retrieval 2Wiki variant)."""
    facts = fact_pairs(row.get("supporting_facts"))
    return {
        "id": row_id(row, "_id", "id"),
        "question": required_text(row, "question"),
        "answer": required_text(row, "answer"),
        "answer_aliases": text_list(row, "answer_aliases"),
        "type": optional_text(row, "type"),
        "level": optional_text(row, "level"),
        "gold_titles": [t for t, _ in facts],
        "gold_sentences": facts,
        "gold_hops": evidence_hops(row),
        "dataset": dataset,
    }


def evidence_hops(row: Row) -> list[tuple[str, str]]:
    """2WikiMultihopQA's ``evidences`` ([subject, relation, object] triples) as (hop, answer) pairs, a later
    hop's subject written "#n" where it is an earlier hop's answer; [] where the row has none."""
    triples = row.get("evidences") or []
    if not isinstance(triples, list) or not all(isinstance(t, list) and len(t) == 3 for t in triples):
        raise FieldError("evidences", "must be a list of [subject, relation, object] triples")
    hops: list[tuple[str, str]] = []
    for subject, relation, obj in triples:
        earlier = next((f"#{i}" for i, (_, a) in enumerate(hops, 1) if _same(a, subject)), subject)
        hops.append((f"{relation} of {earlier}", str(obj)))
    return hops


def _same(a: str, b: str) -> bool:
    words = lambda t: re.sub(r"[^\w\s]", " ", str(t).lower()).split()  # noqa: E731
    return words(a) == words(b) or (bool(words(a)) and words(a)[: len(words(b))] == words(b))


def parse_hotpot_hf(row: Row, dataset: str) -> dict[str, Any]:
    """HotpotQA in the Hugging Face column layout."""
    titles, ids = _columns(row, "supporting_facts", ("title", "sent_id"))
    if not all(isinstance(t, str) for t in titles):
        raise FieldError("supporting_facts", "has a non-string title")
    facts = [(t, sent_id(s, "supporting_facts")) for t, s in zip(titles, ids, strict=True)]
    return {
        **parse_official({k: v for k, v in row.items() if k != "supporting_facts"}, dataset),
        "gold_titles": [t for t, _ in facts],
        "gold_sentences": facts,
    }


MUSIQUE_HOPS = re.compile(r"^(\d+hop)")


def musique_gold_titles(row: Row) -> list[str]:
    """Supporting paragraph titles in hop order (question decomposition), then paragraph order."""
    paragraphs = row.get("paragraphs")
    if not isinstance(paragraphs, list) or not all(isinstance(p, Mapping) for p in paragraphs):
        raise FieldError("paragraphs", "must be a list of objects")
    by_idx = {p.get("idx", i): p for i, p in enumerate(paragraphs)}
    steps = row.get("question_decomposition") or []
    if not isinstance(steps, list):
        raise FieldError("question_decomposition", "must be a list of objects")
    support = [s.get("paragraph_support_idx") for s in steps if isinstance(s, Mapping)]
    hop_order = [by_idx[i] for i in support if isinstance(i, int) and i in by_idx]
    supporting = [p for p in paragraphs if p.get("is_supporting")]
    titles = [p.get("title") for p in hop_order + supporting]
    if not all(isinstance(t, str) for t in titles):
        raise FieldError("paragraphs", "has a supporting paragraph without a string 'title'")
    return titles


def musique_hops(row: Row) -> list[tuple[str, str]]:
    """MuSiQue's question decomposition as (hop, answer) pairs (a later hop names an earlier answer "#1")."""
    steps = row.get("question_decomposition") or []
    out = []
    for s in steps:
        if not isinstance(s, Mapping) or not isinstance(s.get("question"), str) or "answer" not in s:
            raise FieldError("question_decomposition", "has a step without a string 'question' and an 'answer'")
        out.append((" ".join(s["question"].split()), str(s["answer"])))
    return out


def parse_musique(row: Row, dataset: str) -> dict[str, Any]:
    """MuSiQue official layout; ``type`` is the hop count from the id prefix ('2hop', ...)."""
    qid = row_id(row, "id", "_id")
    hops = MUSIQUE_HOPS.match(qid)
    return {
        "id": qid,
        "question": required_text(row, "question"),
        "answer": required_text(row, "answer"),
        "answer_aliases": text_list(row, "answer_aliases"),
        "type": hops.group(1) if hops else None,
        "level": None,
        "gold_titles": musique_gold_titles(row),
        "gold_sentences": [],
        "gold_hops": musique_hops(row),
        "dataset": dataset,
    }


# ---------------------------------------------------------------- paragraphs (for corpora)


def official_paragraphs(row: Row) -> Iterator[tuple[str, str]]:
    """``context: [[title, [sentences]], ...]`` as (title, text) pairs."""
    context = row.get("context") or []
    for item in context if isinstance(context, list) else [context]:
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str):
            raise FieldError("context", f"must be a list of [title, sentences] pairs, got {item!r:.80}")
        yield item[0], join_sentences(item[1], "context")


def hf_paragraphs(row: Row) -> Iterator[tuple[str, str]]:
    """``context: {title: [...], sentences: [[...]]}`` as (title, text) pairs."""
    titles, sentences = _columns(row, "context", ("title", "sentences"))
    for title, sents in zip(titles, sentences, strict=True):
        if not isinstance(title, str):
            raise FieldError("context", f"has a non-string title {title!r}")
        yield title, join_sentences(sents, "context.sentences")


def musique_paragraphs(row: Row) -> Iterator[tuple[str, str]]:
    """``paragraphs: [{title, paragraph_text, ...}]`` as (title, text) pairs."""
    for p in row.get("paragraphs") or []:
        if not isinstance(p, Mapping) or not isinstance(p.get("title"), str):
            raise FieldError("paragraphs", "must be objects with 'title' and 'paragraph_text'")
        yield p["title"], join_sentences(p.get("paragraph_text"), "paragraphs.paragraph_text")


# ---------------------------------------------------------------- registry and detection


@dataclass(frozen=True)
class RowFormat:
    """How to read one benchmark's rows."""

    name: str
    dataset: str
    parse: Callable[[Row, str], dict[str, Any]]
    paragraphs: Callable[[Row], Iterator[tuple[str, str]]]


FORMATS = {
    f.name: f
    for f in (
        RowFormat("hotpotqa", "hotpotqa", parse_official, official_paragraphs),
        RowFormat("hotpotqa-hf", "hotpotqa", parse_hotpot_hf, hf_paragraphs),
        RowFormat("2wikimultihopqa", "2wikimultihopqa", parse_official, official_paragraphs),
        RowFormat("musique", "musique", parse_musique, musique_paragraphs),
        RowFormat("generic", "custom", parse_official, official_paragraphs),
    )
}


def detect_format(row: Any) -> RowFormat:
    """The format of a file from the keys of its first row."""
    keys = set(row) if isinstance(row, Mapping) else set()
    if "paragraphs" in keys:
        name = "musique"
    elif isinstance(row.get("context") if keys else None, Mapping) or isinstance(
        row.get("supporting_facts") if keys else None, Mapping
    ):
        name = "hotpotqa-hf"
    elif "evidences" in keys or ("_id" in keys and "answer_aliases" in keys):
        name = "2wikimultihopqa"
    elif "question" in keys and ("context" in keys or "supporting_facts" in keys or "level" in keys):
        name = "hotpotqa"
    elif "question" in keys and "answer" in keys:
        name = "generic"
    else:
        raise DatasetError(
            f"unrecognised row layout (keys: {sorted(keys) if keys else type(row).__name__}); "
            "expected HotpotQA (official or Hugging Face), 2WikiMultihopQA, MuSiQue, "
            "or at least 'question' and 'answer'"
        )
    return FORMATS[name]
