"""Is the LM server there? One cheap HTTP request per endpoint before a command does expensive work.

A command pointed at a server that is down (or at a wrong port or host) would otherwise load an
index and an embedding model first, then fail every question. ``check_endpoints`` asks each
distinct ``api_base`` of the roles a command uses for ``GET {api_base}/models`` (what OpenAI-compatible
servers, ``sharp lm serve`` included, answer). Any HTTP answer, even 401 or 404, means something
listens there and the first real call will tell the rest (a 404 is logged as a likely wrong path: a
server without that route must still work, so it does not stop the command); no answer at all
(refused, unknown host, timeout, not HTTP, not a URL) is an :class:`LMUnavailableError` naming the URL and how
to start the server.
No key is sent: the probe needs none and so cannot leak one.
"""

from __future__ import annotations

import http.client
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Iterable

from program.errors import LMUnavailableError
from program.lm.failures import SERVE_HINT
from program.lm.roles import ROLES, LMConfig
from program.lm.specs import LMSpec

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0


def check_endpoint(api_base: str, timeout_s: float = PROBE_TIMEOUT_S, model: str | None = None) -> None:
    """Raise :class:`LMUnavailableError` when nothing answers HTTP at ``api_base``."""
    url = api_base.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout_s):
            pass
    except urllib.error.HTTPError as exc:  # an HTTP status: something is there (the route may need a key)
        if exc.code == 404:  # a server, but not OpenAI's API at this path: the calls will say more
            log.warning(
                "%s answers, but not as an OpenAI-compatible API (GET %s: HTTP 404); check that --api-base "
                "ends where the API does (usually /v1)",
                api_base,
                url,
            )
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:  # ValueError: not a URL
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, (socket.timeout, TimeoutError)):
            reason = f"no answer within {timeout_s:g}s"
        who = f" for {model}" if model else ""
        raise LMUnavailableError(
            f"no LM server answers at {api_base}{who} ({type(exc).__name__}: {reason}); nothing was run. "
            f"Check the URL (--api-base), or start the server: {SERVE_HINT}"
        ) from None
    log.debug("LM endpoint %s answers", api_base)


def endpoints(lm_config: LMConfig, roles: Iterable[str] = ROLES) -> dict[str, LMSpec]:
    """api_base -> the first spec using it, over ``roles`` (local and provider-hosted models have none)."""
    out: dict[str, LMSpec] = {}
    for role in roles:
        spec = lm_config.resolve(role)
        if spec.api_base and not spec.is_local:
            out.setdefault(spec.api_base, spec)
    return out


def check_endpoints(lm_config: LMConfig, roles: Iterable[str] = ROLES) -> None:
    """:func:`check_endpoint` for every server the ``roles`` of ``lm_config`` call."""
    for base, spec in endpoints(lm_config, roles).items():
        check_endpoint(base, min(PROBE_TIMEOUT_S, spec.timeout_s), spec.model)
