"""Turn whatever an LM call raised into one of the project's errors, with a message a user can act on.

DSPy 3.4 reports failures as ``dspy.utils.exceptions`` classes whose causes are lm15/LiteLLM/socket
errors. We classify by walking the cause chain (a socket timeout is a timeout whatever wraps it),
then by DSPy's class. Secrets are redacted from every message we build.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Iterator

from dspy.utils import exceptions as dx

from program.errors import (
    LMError,
    LMProviderError,
    LMTimeoutError,
    LMUnavailableError,
    SharpError,
)


class LMContextOverflowError(LMProviderError):
    """The prompt plus max_tokens does not fit the model's context window."""


class LMEmptyReplyError(LMProviderError):
    """The endpoint answered with no text at all (empty or null content, no tool call)."""


# Kinds worth retrying with back-off: the same request may succeed in a moment.
RETRYABLE = frozenset({"timeout", "server", "empty"})


def is_service_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the LM *service* rather than of the model's reply.

    The rule every system follows (program.tracing.Tracer.call): an LM call that raised one of the
    project's LMErrors after its retries (unreachable, timeout, HTTP 4xx/5xx, a body that is not
    JSON, an empty reply), or a DSPy LM error we could not map, means the question was not answered
    and fails it. Two kinds are not: a reply that does not parse (AdapterParseError, a weak model's
    garbage) and a prompt too long for the context window (the same prompt fails every time), which
    the program answers around with its fallbacks.
    """
    if isinstance(exc, (LMContextOverflowError, dx.ContextWindowExceededError)):
        return False
    return isinstance(exc, (LMError, dx.LMError))


SERVE_HINT = (
    "if this is the local model server, start it with `sharp lm serve --model local/qwen2.5-coder-1.5b "
    "--port 8008` and pass `--lm openai/local --api-base http://127.0.0.1:8008/v1`; or run the model "
    "in-process with `--lm local/qwen2.5-coder-1.5b`"
)

_KEEP_PREFIX = (
    re.compile(r"(?i)(bearer\s+)[^\s'\"]+"),
    re.compile(r"(?i)((?:api[_-]?key|authorization|x-api-key)['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+"),
)
_KEY_LIKE = re.compile(r"\b(?:sk|gsk|pk|rk)[-_][A-Za-z0-9_\-]{8,}")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Replace known secret values and key-looking tokens with ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    for pat in _KEEP_PREFIX:
        text = pat.sub(lambda m: m.group(1) + "***", text)
    return _KEY_LIKE.sub("***", text)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def project_error(exc: BaseException) -> SharpError | None:
    """A project error somewhere in the chain (e.g. ModelFileError raised inside an engine)."""
    return next((e for e in _chain(exc) if isinstance(e, SharpError)), None)


def classify(exc: BaseException) -> str:
    """One of: timeout, unavailable, server, empty, rate_limit, auth, not_found, context, invalid, provider, other."""
    for e in _chain(exc):
        if isinstance(e, LMEmptyReplyError):
            return "empty"
        if isinstance(e, (LMContextOverflowError, dx.ContextWindowExceededError)):
            return "context"
        if isinstance(e, (ConnectionRefusedError, LMUnavailableError)) or type(e).__name__ == "ConnectError":
            return "unavailable"
        if isinstance(e, (builtins.TimeoutError, dx.LMTimeoutError)):
            return "timeout"
    if isinstance(exc, dx.LMRateLimitError):
        return "rate_limit"
    if isinstance(exc, (dx.LMAuthError, dx.LMBillingError)):
        return "auth"
    if isinstance(exc, dx.LMUnsupportedModelError) or getattr(exc, "status", None) == 404:
        return "not_found"
    if isinstance(exc, dx.LMInvalidRequestError):
        return "invalid"
    if isinstance(exc, dx.LMServerError):
        return "server"
    if isinstance(exc, dx.LMTransportError):
        return "unavailable"
    if isinstance(exc, (dx.LMError, LMError)):
        return "provider"
    return "other"


def _first_line(exc: BaseException, secrets: Iterable[str | None]) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return redact(text, secrets)[:300]


def to_project_error(
    exc: BaseException,
    *,
    kind: str,
    model: str,
    role: str,
    endpoint: str,
    attempts: int,
    timeout_s: float,
    api_key_env: str | None,
    secrets: Iterable[str | None] = (),
) -> BaseException:
    """The project's exception for ``exc`` (already classified as ``kind``)."""
    secrets = list(secrets)
    detail = f"{type(exc).__name__}: {_first_line(exc, secrets)}"
    where = f"{model} (role {role}) at {endpoint}"
    made = _service_error(kind, where, detail, attempts, timeout_s) or _call_error(kind, where, detail, api_key_env)
    return made if made is not None else exc


def _attempts(n: int) -> str:
    return f"{n} attempt{'s' if n != 1 else ''}"


def _service_error(kind: str, where: str, detail: str, attempts: int, timeout_s: float) -> BaseException | None:
    """The error of a service that did not answer (unreachable, too slow, empty, failing); None for another kind."""
    if kind == "unavailable":
        return LMUnavailableError(f"cannot reach {where}: {detail}. {SERVE_HINT}")
    if kind == "timeout":
        return LMTimeoutError(
            f"{where} did not answer within {timeout_s:g}s ({_attempts(attempts)}); raise timeout_s or check the "
            f"server's load. [{detail}]"
        )
    if kind == "empty":
        return LMEmptyReplyError(
            f"{where} returned an empty reply (no text) after {_attempts(attempts)}; "
            "check the server's log and that it serves this model"
        )
    if kind == "server":
        return LMProviderError(f"{where} failed with a server error after {_attempts(attempts)}: {detail}")
    return None


def _call_error(kind: str, where: str, detail: str, api_key_env: str | None) -> BaseException | None:
    """The error of a call the service refused (context, rate limit, credentials, model, request); None for
    another kind."""
    if kind == "context":
        return LMContextOverflowError(
            f"{where}: the prompt does not fit the context window: {detail}. "
            "Shorten the input (fewer passages/demos) or raise n_ctx."
        )
    if kind == "rate_limit":
        return LMProviderError(
            f"{where} is rate limited: {detail}. Wait, lower parallelism (num_threads), or use another model."
        )
    if kind == "auth":
        source = f"the key in ${api_key_env}" if api_key_env else "the API key (set api_key_env to its variable)"
        return LMProviderError(f"{where} refused the credentials: {detail}. Check {source}.")
    if kind == "not_found":
        return LMProviderError(
            f"{where} does not know this model or route: {detail}. Check the model name "
            "(a `sharp lm serve` server answers to openai/local)."
        )
    if kind in ("invalid", "provider"):
        return LMProviderError(f"{where} rejected or garbled the call: {detail}")
    return None
