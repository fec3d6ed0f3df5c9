"""Every LM call accounted: role, model, tokens, seconds, cache hit.

A ``Ledger`` collects :class:`CallRecord` s. ``recording()`` opens one for the current
context (one question); every LM built by :func:`program.lm.build_lm` calls :func:`record`
after each call, which appends to every ledger open in the current context, so a system that
runs another system inside it (Adaptive-RAG routing to SHARP) is accounted at both levels.
Context variables follow the thread that opened them: open the ledger inside the worker.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class CallRecord:
    role: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cached: bool = False
    error: str | None = None
    # Prompt tokens the backend did not have to evaluate (KV-cache prefix reuse for local models,
    # provider-side prompt caching for remote ones); included in prompt_tokens.
    reused_prompt_tokens: int = 0

    def to_dict(self) -> dict:
        # what dataclasses.asdict gives (every field a scalar), without its deep copy: a replayed search asks it
        # for every call of every question it plays
        return {name: getattr(self, name) for name in _CALL_FIELDS}


_CALL_FIELDS = tuple(f.name for f in fields(CallRecord))


@dataclass
class Ledger:
    records: list[CallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, rec: CallRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def summary(self) -> dict:
        return summarize(self.records)


def summarize(records: list[CallRecord] | list[dict]) -> dict:
    """Sum records overall and per role: calls, tokens, seconds, cached calls, errors."""

    def blank() -> dict:
        return {
            "lm_calls": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "lm_seconds": 0.0,
            "cached_calls": 0,
            "lm_errors": 0,
            "reused_prompt_tokens": 0,
        }

    total, by_role = blank(), {}
    for r in records:
        r = r if isinstance(r, dict) else r.to_dict()
        for bucket in (total, by_role.setdefault(r["role"], blank())):
            bucket["lm_calls"] += 1
            bucket["prompt_tokens"] += int(r.get("prompt_tokens") or 0)
            bucket["completion_tokens"] += int(r.get("completion_tokens") or 0)
            bucket["lm_seconds"] += float(r.get("seconds") or 0.0)
            bucket["cached_calls"] += int(bool(r.get("cached")))
            bucket["lm_errors"] += int(r.get("error") is not None)
            bucket["reused_prompt_tokens"] += int(r.get("reused_prompt_tokens") or 0)
    total["lm_seconds"] = round(total["lm_seconds"], 4)
    total["by_role"] = by_role
    return total


_active: contextvars.ContextVar[tuple[Ledger, ...]] = contextvars.ContextVar("sharp_ledgers", default=())


@contextmanager
def recording() -> Iterator[Ledger]:
    """Open a ledger for the calls made inside this block (nested blocks see their own calls)."""
    ledger = Ledger()
    token = _active.set(_active.get() + (ledger,))
    try:
        yield ledger
    finally:
        _active.reset(token)


def record(rec: CallRecord) -> None:
    for ledger in _active.get():
        ledger.add(rec)
