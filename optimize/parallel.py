"""Run a function over items, one at a time in the calling thread or on a thread pool, and stop at once
when interrupted.

A ``with ThreadPoolExecutor()`` block that submits every item up front does not stop on Ctrl-C or
SIGTERM: the interrupt leaves the ``for``, and the block's exit then waits for *every* queued item
to run (a 100-question arena kept going for the next hour; the second signal ended it). Here one
thread runs the items in the caller's thread, so the interrupt lands in the running item; with more
threads an interrupt cancels the queued items and returns without waiting for the running ones
(each writes its own finished result, so nothing that completed is lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


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
