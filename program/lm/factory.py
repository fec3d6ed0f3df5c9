"""Build DSPy LMs from specs. Every call is accounted; failures become the project's errors.

``SharpLM`` is a ``dspy.LM`` (so DSPy's cache, history, callbacks and adapters work unchanged)
that writes one :class:`CallRecord` per call, retries timeouts, server errors and empty replies with
back-off, and maps every failure to :mod:`program.errors`. An empty reply is a failure, never an
answer, and is not left in DSPy's cache; each call's cache key is noted so that a step that cannot
parse the reply drops it too (:mod:`program.lm.cache`). Local models run through a custom DSPy engine
(:class:`program.lm.local.LocalEngine`); everything else goes through DSPy's own engines
(lm15 or LiteLLM).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import dspy
from dspy.clients.execution import aexecute, execute, finalize, prepare
from dspy.utils.callback import with_callbacks

from program.errors import ConfigError, LMError
from program.lm.accounting import CallRecord, record
from program.lm.cache import forget, note_reply, reply_key
from program.lm.failures import (
    RETRYABLE,
    LMEmptyReplyError,
    classify,
    project_error,
    redact,
    to_project_error,
)
from program.lm.specs import SERVED_MODEL, LMSpec

log = logging.getLogger(__name__)

# A placeholder key for OpenAI-compatible servers that need none (llama.cpp, vLLM, ...).
NO_KEY = "sk-no-key-required"


class SharpLM(dspy.LM):
    """A ``dspy.LM`` bound to a role and a spec; see the module docstring."""

    def __init__(self, spec: LMSpec, role: str, **lm_kwargs: Any):
        self.spec = spec
        self.role = role
        super().__init__(
            spec.model,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
            cache=spec.cache,
            num_retries=0,
            **lm_kwargs,
        )

    # -- one accounted, retried, mapped call -------------------------------------------------
    def _endpoint(self) -> str:
        if self.spec.is_local:
            return "in-process llama.cpp"
        return self.spec.api_base or f"the {self.spec.ref.provider} API"

    def _secrets(self) -> list[str | None]:
        return [self.kwargs.get("api_key")]

    def _fail(self, exc: BaseException, kind: str, attempts: int, started: float) -> BaseException:
        secrets = self._secrets()
        error = to_project_error(
            exc,
            kind=kind,
            model=self.model,
            role=self.role,
            endpoint=self._endpoint(),
            attempts=attempts,
            timeout_s=self.spec.timeout_s,
            api_key_env=self.spec.api_key_env,
            secrets=secrets,
        )
        self._record_failure(error, started)
        return error

    def _record_failure(self, error: BaseException, started: float) -> None:
        message = redact(f"{type(error).__name__}: {error}", self._secrets())[:500]
        record(CallRecord(self.role, self.model, seconds=time.perf_counter() - started, error=message))

    def _done(self, result: Any, started: float) -> None:
        usage = result.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        record(
            CallRecord(
                self.role,
                self.model,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                seconds=time.perf_counter() - started,
                cached=bool(result.cache_hit),
                reused_prompt_tokens=int(details.get("cached_tokens") or 0),
            )
        )

    def _delay(self, attempt: int) -> float:
        return min(self.spec.retry_backoff_s * (2**attempt), 30.0)

    def _after_failure(self, exc: Exception, attempt: int, started: float) -> float:
        """The back-off before the next attempt, or raise the mapped error (recorded once)."""
        own = project_error(exc)
        if own is not None and not isinstance(own, LMError):  # e.g. ModelFileError: as is
            self._record_failure(own, started)
            raise own from None
        kind = classify(exc)
        if kind in RETRYABLE and attempt < self.spec.num_retries:
            delay = self._delay(attempt)
            log.warning(
                "%s call to %s failed (%s: %s); retry %d/%d in %.1fs",
                self.role,
                self.model,
                kind,
                redact(str(exc), self._secrets())[:200],
                attempt + 1,
                self.spec.num_retries,
                delay,
            )
            return delay
        error = self._fail(exc, kind, attempt + 1, started)
        if error is exc:
            raise exc
        raise error from None  # the cause may carry request details; the message says enough

    def _check_reply(self, result: Any, key: str | None) -> None:
        """An empty reply is a failure of the endpoint, not an answer: drop it from the cache (so a retry
        or a later run asks again) and raise, to be retried like a server error."""
        if not _has_text(result.outputs):
            forget([key])
            raise LMEmptyReplyError(f"{self.model}: the reply has no text")

    def _run(self, attempt_fn: Callable[[], Any], key: str | None) -> Any:
        started = time.perf_counter()
        for attempt in range(self.spec.num_retries + 1):
            try:
                result = attempt_fn()
                self._check_reply(result, key)
            except Exception as exc:
                time.sleep(self._after_failure(exc, attempt, started))
                continue
            self._done(result, started)
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _arun(self, attempt_fn: Callable[[], Any], key: str | None) -> Any:
        import asyncio

        started = time.perf_counter()
        for attempt in range(self.spec.num_retries + 1):
            try:
                result = await attempt_fn()
                self._check_reply(result, key)
            except Exception as exc:
                await asyncio.sleep(self._after_failure(exc, attempt, started))
                continue
            self._done(result, started)
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    @with_callbacks
    def __call__(self, prompt=None, *, messages=None, **kwargs):
        call = prepare(self, prompt, messages, kwargs)
        key = reply_key(self, call)
        note_reply(key)  # a step that cannot use the reply drops it from the cache (program.tracing)
        return finalize(self, call, self._run(lambda: execute(self, call), key))

    @with_callbacks
    async def acall(self, prompt=None, *, messages=None, **kwargs):
        import asyncio

        call = await asyncio.to_thread(prepare, self, prompt, messages, kwargs, asynchronous=True)
        key = reply_key(self, call, asynchronous=True)
        note_reply(key)
        return finalize(self, call, await self._arun(lambda: aexecute(self, call), key))

    # -- capabilities: a `sharp lm serve` server enforces JSON schemas like the in-process engine --
    @property
    def _served_local(self) -> bool:
        return self.spec.model == SERVED_MODEL and bool(self.spec.api_base)

    @property
    def supports_response_schema(self) -> bool:
        return True if self._served_local else super().supports_response_schema

    @property
    def supported_params(self) -> set[str]:
        params = set(super().supported_params)
        return params | {"response_format"} if self._served_local else params

    # -- copies and saved state ----------------------------------------------------------------
    def __deepcopy__(self, memo: dict) -> SharpLM:
        # Optimizers deep-copy programs; a copy must share the engine (a loaded local model).
        return self.copy()

    def dump_state(self) -> dict:
        return {
            "_dspy_lm_class": f"{type(self).__module__}.{type(self).__qualname__}",
            "model": self.model,
            "role": self.role,
            "spec": self.spec.model_dump(),
        }

    @classmethod
    def load_state(cls, state: dict, *, allow_custom_lm_class: bool = False) -> SharpLM:
        return build_lm(LMSpec.from_mapping(state["spec"]), state.get("role", "default"))


def _has_text(outputs: list) -> bool:
    """Whether any output carries text (or a tool call); an empty list has none."""
    for out in outputs or []:
        text = out.get("text") if isinstance(out, dict) else out
        if (isinstance(text, str) and text.strip()) or (isinstance(out, dict) and out.get("tool_calls")):
            return True
    return False


def _api_key(spec: LMSpec) -> str | None:
    if spec.api_key_env:
        key = os.environ.get(spec.api_key_env)
        if not key:
            raise ConfigError(f"{spec.model}: api_key_env names ${spec.api_key_env}, which is not set")
        return key
    return NO_KEY if spec.api_base else None


def build_lm(spec: LMSpec, role: str = "default") -> SharpLM:
    """A DSPy LM for ``spec``, recording every call under ``role``.

    Local models are located, assembled and hash-checked here (so a missing package fails now,
    with the pip command); the weights load on the first call, once per process.
    """
    if spec.is_local:
        from program.lm.local import AsyncLocalEngine, LocalEngine

        engine = LocalEngine.for_spec(spec)
        return SharpLM(spec, role, engine=engine, async_engine=AsyncLocalEngine(engine))
    kwargs: dict[str, Any] = {"timeout": spec.timeout_s}
    if spec.api_base:
        kwargs["api_base"] = spec.api_base
    key = _api_key(spec)
    if key:
        kwargs["api_key"] = key
    return SharpLM(spec, role, **kwargs)
