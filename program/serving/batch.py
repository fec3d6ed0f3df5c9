"""Many questions through one program: the rules `sharp eval` and ``LoadedProgram.batch`` share.

* A question whose program raised (a failure of the LM service, a bad question, ...) is an *error row*,
  never an answer: :func:`error_prediction` (``answer`` empty, ``stop_reason`` "error", ``error`` the cause).
* When :data:`MAX_FAILED_IN_A_ROW` questions fail one after another, the run stops (the LM is down, most
  likely) instead of failing the rest one by one (:class:`FailureStreak`).
* :func:`run_each` runs the questions one at a time in the calling thread, or on a thread pool, and stops
  at once when interrupted. A ``with ThreadPoolExecutor()`` block that submits every item up front does not
  stop on Ctrl-C or SIGTERM: the interrupt leaves the ``for``, and the block's exit then waits for *every*
  queued item to run (a 100-question arena kept going for the next hour; the second signal ended it). Here
  one thread runs the items in the caller's thread, so the interrupt lands in the running item; with more
  threads an interrupt cancels the queued items and returns without waiting for the running ones (each
  writes its own finished result, so nothing that completed is lost).

The budget of each question is its program's own (its config's ``budget``), the same in every path.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

from program.errors import RunAbortedError, SharpWarning

__all__ = ["MAX_FAILED_IN_A_ROW", "FailureStreak", "answer_all", "error_prediction", "failure_text", "run_each"]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# a dead endpoint fails every question, each after its retries and back-offs; a few in a row is the signal to
# stop and say why
MAX_FAILED_IN_A_ROW = 5


def run_each(fn: Callable[[T], R], items: Iterable[T], threads: int = 1) -> Iterator[R]:
    """Yield ``fn(item)`` for every item: in order with one thread, in completion order with more."""
    items = list(items)
    if threads <= 1:
        for item in items:
            yield fn(item)
        return
    pool = ThreadPoolExecutor(max_workers=threads)
    try:
        for fut in as_completed([pool.submit(fn, item) for item in items]):
            yield fut.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


@dataclass
class FailureStreak:
    """Counts questions that failed one after another; past ``limit`` (None: never), stops the run."""

    limit: int | None
    where: str = "the results so far"
    then: str = "fix the cause and rerun the same command to resume (failed questions are retried)"
    count: int = 0

    def see(self, failed: bool, error: str | None = None) -> None:
        if not failed:
            self.count = 0
            return
        self.count += 1
        if self.limit is not None and self.count >= self.limit:
            raise RunAbortedError(
                f"stopped after {self.count} questions in a row failed; the last one: {error}. "
                f"{self.where} are kept: {self.then}"
            )


def failure_text(exc: BaseException) -> str:
    """How a failed question's error is written in its row: the exception's type and message."""
    return f"{type(exc).__name__}: {exc}"[:1000]


def error_prediction(system: str, error: str) -> Any:
    """The prediction of a question that failed: every key of an answer's, the answer empty, ``error`` set."""
    from program.tracing import prediction

    return prediction(system, [], [], answer="", stop_reason="error", error=error)


def answer_all(
    module: Callable[..., Any],
    questions: Sequence[str],
    threads: int = 1,
    max_failed_in_a_row: int | None = MAX_FAILED_IN_A_ROW,
    system: str = "",
) -> list[Any]:
    """``module(question=q)`` for every question, in the order given: each answer's prediction with ``error``
    None, or the :func:`error_prediction` of a question that raised. After ``max_failed_in_a_row`` failures
    one after another (None: never) the questions not yet asked are not asked: their rows say so, and a
    :class:`~program.errors.SharpWarning` tells the caller why."""
    out: list[Any] = [None] * len(questions)

    def one(i: int) -> tuple[int, Any]:
        try:
            pred = module(question=questions[i])
        except Exception as exc:  # as `sharp eval`: whatever a question raised fails that question only
            log.warning("question %d failed: %s", i + 1, exc)
            return i, error_prediction(system, failure_text(exc))
        pred.error = None
        return i, pred

    streak = FailureStreak(max_failed_in_a_row, "the answers so far", "fix the cause and ask the failed ones again")
    results = run_each(one, range(len(questions)), threads)
    try:
        for i, pred in results:
            out[i] = pred
            streak.see(pred.error is not None, pred.error)
    except RunAbortedError as exc:
        warnings.warn(str(exc), SharpWarning, stacklevel=3)
        skipped = error_prediction(system, f"not asked: {exc}")
        out = [p if p is not None else skipped.copy() for p in out]
    finally:
        results.close()  # a stopped run cancels the questions queued on the pool
    return out
