"""Run one predictor call as a traced step: its own ledger slice, timing, and error capture.

Two kinds of failure, two outcomes (the rule every system follows):

* the *model* failed: its reply does not parse (a weak model's garbage), or the prompt does not fit
  its context window. The step records the error, the reply is dropped from DSPy's cache (so a
  later run asks again instead of replaying it), and the caller falls back (an unparseable critique
  is discarded and the gate's P(right) stands, an unparseable generator salvages what it can or
  answers "unknown").
* the *LM service* failed (:func:`program.lm.failures.is_service_failure`): unreachable, timed out,
  an HTTP error, a body that is not JSON, an empty reply, each after the LM's own retries. Then the
  question was not answered at all: the step is recorded and the error propagates, so the question
  is *failed* (an evaluation keeps it as an error row and a resumed run retries it; ``sharp ask``
  exits with the error) instead of being scored as the fallback's "unknown".

Anything else is a bug and propagates.
"""

from __future__ import annotations

import contextvars
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
from program.lm.accounting import Ledger, recording, summarize
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


StepCallback = Callable[[dict], None]
StartCallback = Callable[[str, dict], None]


@dataclass(frozen=True)
class StepObserver:
    """Who watches the steps of the questions answered in this context (``sharp ask`` shows them live).

    ``on_step(step)`` receives each step dict once it is complete (its caller has filled in the verdict,
    the sub-queries, the answer...), in the order the steps were taken: a step is complete when the next
    one starts or the question ends. ``on_start(role, inputs)``, if given, is told when an LM step begins
    (before its model is called), so a display can say what is running. Plain callables: the program
    knows nothing of how they show it. An observer that raises is a bug in the observer and propagates.
    """

    on_step: StepCallback
    on_start: StartCallback | None = None


_observer: contextvars.ContextVar[StepObserver | None] = contextvars.ContextVar("sharp_step_observer", default=None)


@contextmanager
def observing(on_step: StepCallback, on_start: StartCallback | None = None) -> Iterator[StepObserver]:
    """Send the steps of every question answered in this context (this thread) to ``on_step``."""
    obs = StepObserver(on_step, on_start)
    token = _observer.set(obs)
    try:
        yield obs
    finally:
        _observer.reset(token)


class Budget(StrictConfig):
    """Per-question limits. None means unlimited."""

    max_lm_calls: int | None = 12
    max_tokens: int | None = None
    max_seconds: float | None = None

    def spent(self, cost: dict, seconds: float) -> str | None:
        """The name of the limit that ``cost`` (a ledger summary) and ``seconds`` reach, or None: the one
        budget check, live (:meth:`Tracer.exhausted`) and in replay."""
        if self.max_lm_calls is not None and cost["lm_calls"] >= self.max_lm_calls:
            return "lm_calls"
        if self.max_tokens is not None and cost["prompt_tokens"] + cost["completion_tokens"] >= self.max_tokens:
            return "tokens"
        if self.max_seconds is not None and seconds >= self.max_seconds:
            return "seconds"
        return None


@dataclass
class Tracer:
    """Collects the steps of one question and enforces its budget."""

    budget: Budget
    ledger: Ledger
    started: float = field(default_factory=time.perf_counter)
    steps: list[dict] = field(default_factory=list)
    observer: StepObserver | None = field(default_factory=_observer.get)
    # steps added by add() and not yet sent to the observer (a system that copies another's steps into
    # its trace, as Adaptive-RAG does, copies steps that the inner Tracer has already sent)
    _unsent: list[dict] = field(default_factory=list, repr=False)

    def exhausted(self) -> str | None:
        """The name of the budget that is used up, or None."""
        return self.budget.spent(self.ledger.summary(), time.perf_counter() - self.started)

    def add(self, role: str, **info: Any) -> dict:
        self.flush()  # the steps before this one are complete
        step = {"step": len(self.steps), "role": role, **info}
        self.steps.append(step)
        if self.observer is not None:
            self._unsent.append(step)
        return step

    def flush(self) -> None:
        """Send the observer the steps it has not had yet (each is complete once another one starts)."""
        if self.observer is None:
            return
        while self._unsent:
            self.observer.on_step(self._unsent.pop(0))

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
        self.flush()
        if self.observer is not None and self.observer.on_start is not None:
            self.observer.on_start(role, summary)
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


_current: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar("sharp_tracer", default=None)


@contextmanager
def traced(question: Any, max_chars: int, budget: Budget | None = None) -> Iterator[tuple[str, Tracer]]:
    """One question's scope: the checked question and a Tracer whose ledger sees every LM call.

    Every system's ``forward`` starts here, so validation, truncation notes and accounting are
    the same for all of them.
    """
    q, truncated = check_question(question, max_chars)
    outer = _current.get()
    if outer is not None:  # a system running another inside it (Adaptive-RAG): its steps so far come first
        outer.flush()
    with recording() as ledger:
        tr = Tracer(budget or Budget(max_lm_calls=None), ledger)
        token = _current.set(tr)
        try:
            if truncated:
                tr.add("input", note=f"question truncated to {max_chars} characters")
            yield q, tr
        finally:  # the last steps, also of a question that failed
            _current.reset(token)
            tr.flush()


def finish(system: str, tr: Tracer, **fields: Any) -> dspy.Prediction:
    """The prediction every system returns (the same keys as SharpRAG's), from its tracer."""
    tr.flush()
    return prediction(system, tr.steps, [r.to_dict() for r in tr.ledger.records], **fields)


def prediction(
    system: str,
    steps: list[dict],
    calls: list[dict],
    *,
    answer: str,
    stop_reason: str,
    passages: Sequence[Passage] = (),
    cited: Sequence[str] = (),
    sub_queries: Sequence[str] = (),
    queries: Sequence[str] = (),
    retries: int = 0,
    **extra: Any,
) -> dspy.Prediction:
    """A prediction from its steps and LM calls (a live tracer's, or a replayed record's)."""
    return dspy.Prediction(
        answer=answer,
        passages=list(passages),
        cited_ids=list(cited),
        trace=steps,
        cost=summarize(calls),
        calls=calls,
        sub_queries=list(sub_queries),
        queries=list(dict.fromkeys(queries)),
        retries=retries,
        stop_reason=stop_reason,
        system=system,
        **extra,
    )
