"""What the arena's systems share: the uniform prediction, traced retrieval, defensive grading.

Every grader output goes through :func:`graded`: an unparseable or invalid value is recorded in
the step (``problem``) and replaced by the caller's safe default, and a spent budget skips the
call (recorded too), so a weak model can never crash a question or loop without end.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterable, Sequence

import dspy

from program.retrieval.base import Retriever
from program.steps import Tracer
from program.types import Passage

_TRIVIAL = {"", "none", "n/a", "na", "nothing", "null", "-", "[]"}
_TRUE = {"true", "yes", "y", "1", "relevant", "supported"}
_FALSE = {"false", "no", "n", "0", "irrelevant", "not relevant", "unsupported", "not supported"}
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def finish(system: str, tr: Tracer, *, answer: str, stop_reason: str,
           passages: Sequence[Passage] = (), cited: Sequence[str] = (), sub_queries: Sequence[str] = (),
           queries: Sequence[str] = (), retries: int = 0) -> dspy.Prediction:
    """The prediction every system returns (the same keys as SharpRAG's)."""
    return dspy.Prediction(
        answer=answer, passages=list(passages), cited_ids=list(cited), trace=tr.steps,
        cost=tr.ledger.summary(), calls=[r.to_dict() for r in tr.ledger.records],
        sub_queries=list(sub_queries), queries=list(dict.fromkeys(queries)), retries=retries,
        stop_reason=stop_reason, system=system,
    )


def retrieve(retriever: Retriever, query: str, k: int, tr: Tracer, round_no: int = 0,
             role: str = "retriever", **info: Any) -> list[Passage]:
    """One traced retrieval (the step has SharpRAG's retriever keys)."""
    found = retriever.retrieve(query, k)
    ids = [p.id for p in found]
    tr.add(role, round=round_no, k=k, queries=[query], retrieved_ids=[ids], new_ids=ids, **info)
    return found


def passage_text(p: Passage, chars: int) -> str:
    text = p.text if len(p.text) <= chars else p.text[:chars].rsplit(" ", 1)[0] + " ..."
    return f"{p.title}: {text}"


def unique_passages(passages: Iterable[Passage]) -> list[Passage]:
    seen: set[str] = set()
    return [p for p in passages if not (p.id in seen or seen.add(p.id))]


def split_strips(text: str, max_chars: int = 400) -> list[str]:
    """Sentence-level knowledge strips of a passage (rule-based, no LM)."""
    return [s.strip()[:max_chars] for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


# ---- defensive parsing: each returns None for anything it cannot read -----------------------
def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().strip(".\"'").lower() if value is not None else ""
    return True if text in _TRUE else False if text in _FALSE else None


def as_score(value: Any) -> float | None:
    """A probability in [0, 1]; a percentage (1 < x <= 100) is divided by 100."""
    if isinstance(value, bool):
        return None
    try:
        x = float(str(value).strip().rstrip("%"))
    except (TypeError, ValueError):
        return None
    if math.isnan(x) or x < 0:
        return None
    if 1.0 < x <= 100.0:
        x /= 100.0
    return x if x <= 1.0 else None


def as_choice(allowed: Sequence[str]) -> Callable[[Any], str | None]:
    def parse(value: Any) -> str | None:
        text = str(value).strip().strip(".\"'").lower().replace(" ", "_") if value is not None else ""
        return text if text in allowed else None

    return parse


def as_text(value: Any) -> str | None:
    text = " ".join(str(value).split()) if value is not None else ""
    return text if text.lower() not in _TRIVIAL else None


def items(values: Any) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [str(v).strip() for v in values if str(v).strip().lower() not in _TRIVIAL]


def graded(tr: Tracer, role: str, predictor: Callable[..., dspy.Prediction], field: str,
           parse: Callable[[Any], Any], default: Any, key: str, summary: dict, **inputs: Any) -> tuple[Any, dict]:
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
