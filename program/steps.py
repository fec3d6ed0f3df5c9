"""Run one predictor call as a traced step: its own ledger slice, timing, and error capture.

Two kinds of failure, two outcomes (the rule every system follows):

* the *model* failed: its reply does not parse (a weak model's garbage), or the prompt does not fit
  its context window. The step records the error, the reply is dropped from DSPy's cache (so a
  later run asks again instead of replaying it), and the caller falls back (an unparseable critic
  reads as "insufficient", an unparseable generator salvages what it can or answers "unknown").
* the *LM service* failed (:func:`program.lm.failures.is_service_failure`): unreachable, timed out,
  an HTTP error, a body that is not JSON, an empty reply, each after the LM's own retries. Then the
  question was not answered at all: the step is recorded and the error propagates, so the question
  is *failed* (an evaluation keeps it as an error row and a resumed run retries it; ``sharp ask``
  exits with the error) instead of being scored as the fallback's "unknown".

Anything else is a bug and propagates.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError, DSPyError

from program.config import StrictConfig
from program.errors import LMError, QuestionError
from program.lm.accounting import Ledger, recording
from program.lm.cache import forget, noting_replies
from program.lm.failures import is_service_failure
from program.types import Passage

log = logging.getLogger(__name__)

RECOVERABLE = (AdapterParseError, DSPyError, LMError, ValueError, TypeError, KeyError)


def adapter_settings(name: str | None) -> dict:
    """``dspy.context`` settings for a named adapter ("json", "chat"; None: the configured default)."""
    if name == "json":
        return {"adapter": dspy.JSONAdapter()}
    if name == "chat":
        return {"adapter": dspy.ChatAdapter()}
    return {}


class Budget(StrictConfig):
    """Per-question limits. None means unlimited."""

    max_lm_calls: int | None = 12
    max_tokens: int | None = None
    max_seconds: float | None = None


@dataclass
class Tracer:
    """Collects the steps of one question and enforces its budget."""

    budget: Budget
    ledger: Ledger
    started: float = field(default_factory=time.perf_counter)
    steps: list[dict] = field(default_factory=list)

    def exhausted(self) -> str | None:
        """The name of the budget that is used up, or None."""
        s = self.ledger.summary()
        b = self.budget
        if b.max_lm_calls is not None and s["lm_calls"] >= b.max_lm_calls:
            return "lm_calls"
        if b.max_tokens is not None and s["prompt_tokens"] + s["completion_tokens"] >= b.max_tokens:
            return "tokens"
        if b.max_seconds is not None and time.perf_counter() - self.started >= b.max_seconds:
            return "seconds"
        return None

    def add(self, role: str, **info: Any) -> dict:
        step = {"step": len(self.steps), "role": role, **info}
        self.steps.append(step)
        return step

    def call(
        self,
        role: str,
        predictor: Callable[..., dspy.Prediction],
        summary: dict,
        adapter: str | None = None,
        **inputs: Any,
    ) -> tuple[dspy.Prediction | None, dict]:
        """Call ``predictor(**inputs)``; return (prediction or None on a recoverable error, step).

        A failure of the LM service is recorded in the step and raised (see the module docstring).
        ``adapter="json"`` asks for JSON output (grammar-constrained where the backend supports
        it), which small models follow far more reliably for structured fields than chat markers.
        """
        t0 = time.perf_counter()
        error, raw, pred, failed = None, None, None, None
        with recording() as calls, noting_replies() as replies, dspy.context(**adapter_settings(adapter)):
            try:
                pred = predictor(**inputs)
            except RECOVERABLE as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
                if is_service_failure(exc):
                    failed = exc
                else:
                    raw = getattr(exc, "lm_response", None)
                    forget(replies)  # not usable now, so not to be replayed to a later run
                log.warning("%s step failed: %s", role, error)
        cost = calls.summary()
        step = self.add(
            role,
            inputs=summary,
            seconds=round(time.perf_counter() - t0, 3),
            lm_calls=cost["lm_calls"],
            prompt_tokens=cost["prompt_tokens"],
            completion_tokens=cost["completion_tokens"],
            cached_calls=cost["cached_calls"],
            error=error,
        )
        if raw is not None:
            step["raw_output"] = str(raw)[:1000]
        if failed is not None:
            step["lm_failure"] = True
            raise failed
        return pred, step


def check_question(question: Any, max_chars: int) -> tuple[str, bool]:
    """Return the question stripped (and truncated when longer than max_chars) and whether it was."""
    if not isinstance(question, str) or not question.strip():
        raise QuestionError("empty question: ask something with at least one non-space character")
    q = " ".join(question.split())
    return (q[:max_chars], True) if len(q) > max_chars else (q, False)


@contextmanager
def traced(question: Any, max_chars: int, budget: Budget | None = None) -> Iterator[tuple[str, Tracer]]:
    """One question's scope: the checked question and a Tracer whose ledger sees every LM call.

    Every system's ``forward`` starts here, so validation, truncation notes and accounting are
    the same for all of them.
    """
    q, truncated = check_question(question, max_chars)
    with recording() as ledger:
        tr = Tracer(budget or Budget(max_lm_calls=None), ledger)
        if truncated:
            tr.add("input", note=f"question truncated to {max_chars} characters")
        yield q, tr


def finish(
    system: str,
    tr: Tracer,
    *,
    answer: str,
    stop_reason: str,
    passages: Sequence[Passage] = (),
    cited: Sequence[str] = (),
    sub_queries: Sequence[str] = (),
    queries: Sequence[str] = (),
    retries: int = 0,
) -> dspy.Prediction:
    """The prediction every system returns (the same keys as SharpRAG's)."""
    return dspy.Prediction(
        answer=answer,
        passages=list(passages),
        cited_ids=list(cited),
        trace=tr.steps,
        cost=tr.ledger.summary(),
        calls=[r.to_dict() for r in tr.ledger.records],
        sub_queries=list(sub_queries),
        queries=list(dict.fromkeys(queries)),
        retries=retries,
        stop_reason=stop_reason,
        system=system,
    )
