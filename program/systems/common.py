"""What the arena's systems share: the uniform prediction, traced retrieval, defensive grading.

Every grader output goes through :func:`graded`: an unparseable or invalid value is recorded in
the step (``problem``) and replaced by the caller's safe default, and a spent budget skips the
call (recorded too), so a weak model can never crash a question or loop without end.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import dspy

from program.reading.parsing import as_bool, as_choice, as_score, as_text, items  # noqa: F401 - re-exported
from program.retrieval.base import Retriever
from program.tracing import Tracer, finish
from program.types import Passage

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def retrieve(
    retriever: Retriever, query: str, k: int, tr: Tracer, round_no: int = 0, role: str = "retriever", **info: Any
) -> list[Passage]:
    """One traced retrieval (the step has SharpRAG's retriever keys)."""
    found = retriever.retrieve(query, k)
    ids = [p.id for p in found]
    tr.add(role, round=round_no, k=k, queries=[query], retrieved_ids=[ids], new_ids=ids, **info)
    return found


def answered(
    system: str,
    tr: Tracer,
    question: str,
    answer: str,
    evidence: Sequence[Passage],
    cited: Sequence[str],
    stop_reason: str,
    queries: Sequence[str] = (),
    retries: int | None = None,
) -> dspy.Prediction:
    """The prediction of a system that answered ``question`` from ``evidence``: its one sub-query is the
    question; ``queries`` are the searches it made (the question alone when empty) and ``retries`` the searches
    after the first unless given."""
    queries = list(queries) or [question]
    return finish(
        system,
        tr,
        answer=answer,
        passages=evidence,
        cited=cited,
        sub_queries=[question],
        queries=queries,
        retries=len(queries) - 1 if retries is None else retries,
        stop_reason=stop_reason,
    )


def passage_text(p: Passage, chars: int) -> str:
    text = p.text if len(p.text) <= chars else p.text[:chars].rsplit(" ", 1)[0] + " ..."
    return f"{p.title}: {text}"


def unique_passages(passages: Iterable[Passage]) -> list[Passage]:
    seen: set[str] = set()
    return [p for p in passages if not (p.id in seen or seen.add(p.id))]


def split_strips(text: str, max_chars: int = 400) -> list[str]:
    """Sentence-level knowledge strips of a passage (rule-based, no LM)."""
    return [s.strip()[:max_chars] for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def graded(
    tr: Tracer,
    role: str,
    predictor: Callable[..., dspy.Prediction],
    field: str,
    parse: Callable[[Any], Any],
    default: Any,
    key: str,
    summary: dict,
    **inputs: Any,
) -> tuple[Any, dict]:
    """Call a grader and read ``field`` with ``parse``; garbage or a spent budget -> ``default``.

    The step gets ``key`` (the value used) and ``problem`` (None, or why the default was used).
    """
    if (spent := tr.exhausted()) is not None:
        step = tr.add(role, inputs=summary, lm_calls=0, error=None)
        step.update({key: default, "problem": f"skipped: budget_{spent}"})
        return default, step
    pred, step = tr.call(role, predictor, summary, **inputs)
    raw = getattr(pred, field, None) if pred is not None else None
    value = parse(raw) if pred is not None else None
    problem = None
    if pred is None:
        problem = "unparseable"
    elif value is None:
        problem = f"invalid {field}: {raw!r}"[:200]
    step[key] = default if value is None else value
    step["problem"] = problem
    return step[key], step


def graded_passage(
    tr: Tracer,
    role: str,
    predictor: Callable[..., dspy.Prediction],
    field: str,
    parse: Callable[[Any], Any],
    default: Any,
    q: str,
    p: Passage,
    chars: int,
    **summary: Any,
) -> tuple[Any, dict]:
    """A grader's verdict on passage ``p`` for question ``q`` (see graded): the step keeps the value
    under ``field``, and summarizes the question's start, the passage id and ``summary``."""
    return graded(
        tr,
        role,
        predictor,
        field,
        parse,
        default,
        field,
        {"question": q[:200], "passage_id": p.id, **summary},
        question=q,
        passage=passage_text(p, chars),
    )
