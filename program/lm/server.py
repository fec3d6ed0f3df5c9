"""A small OpenAI-compatible server for a local model, so several processes share one loaded model.

It runs the same :class:`~program.lm.local.LocalSession` as the in-process backend (same chat
template, sampling, grammar-constrained ``response_format`` and prefix reuse), so answers match
the in-process ones. Endpoints: ``POST /v1/chat/completions`` (no streaming), ``GET /v1/models``,
``GET /health``. Clients use ``--lm openai/local --api-base http://HOST:PORT/v1``.

With several sessions (``sharp lm serve --parallel N``: N copies of the model) requests are answered side by
side, each by a free session; with one, they queue on it.
"""

from __future__ import annotations

import json
import logging
import queue
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dspy.lm15 import ContextLengthError

from program.lm.local import LocalSession

log = logging.getLogger(__name__)
SERVED_ALIAS = "local"


def _messages(body: dict) -> list[dict]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("'messages' must be a non-empty list")
    out = []
    for m in msgs:
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        role = "system" if m.get("role") == "developer" else m.get("role")
        out.append({"role": role, "content": content or ""})
    return out


def chat_completion(session: LocalSession, body: dict, *, alias: str = SERVED_ALIAS) -> dict:
    """Answer one OpenAI chat-completions request body with ``session``."""
    if body.get("stream"):
        raise ValueError("streaming is not supported by this server")
    if body.get("n", 1) != 1:
        raise ValueError("only n=1 is supported")
    stop = body.get("stop")
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 1024
    logprobs = int(body.get("top_logprobs") or 0) if body.get("logprobs") else None
    result = session.chat(
        _messages(body),
        max_tokens=int(max_tokens),
        temperature=float(body.get("temperature") or 0.0),
        top_p=body.get("top_p"),
        stop=[stop] if isinstance(stop, str) else list(stop or []),
        response_format=body.get("response_format"),
        seed=body.get("seed"),
        logprobs=logprobs,
    )
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": alias,
        "choices": [
            {
                "index": 0,
                "finish_reason": result.finish_reason,
                "message": {"role": "assistant", "content": result.text},
                "logprobs": _openai_logprobs(result.logprobs),
            }
        ],
        "usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": result.reused_tokens},
        },
    }


def _openai_logprobs(steps) -> dict | None:
    """Token logprobs in the OpenAI chat-completions shape (None when none were asked for)."""
    if steps is None:
        return None

    def entry(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, b) for a, b in alts]} for t, lp, alts in steps]}


class Slots:
    """Sessions that answer requests side by side: a request takes a free one and gives it back (a llama.cpp
    context answers one request at a time)."""

    def __init__(self, sessions: LocalSession | Sequence[LocalSession]):
        self.sessions = list(sessions) if isinstance(sessions, Sequence) else [sessions]
        if not self.sessions:
            raise ValueError("a server needs at least one session")
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for session in self.sessions:
            self._free.put(session)

    @contextmanager
    def take(self) -> Iterator[LocalSession]:
        session = self._free.get()
        try:
            yield session
        finally:
            self._free.put(session)


class _JSONHandler(BaseHTTPRequestHandler):
    """An HTTP/1.1 handler answering in JSON (OpenAI-style error objects), logging requests at debug."""

    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, code: str) -> None:
        self._send(
            status,
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error" if status < 500 else "server_error",
                    "code": code,
                }
            },
        )


def make_handler(
    sessions: LocalSession | Sequence[LocalSession], alias: str = SERVED_ALIAS
) -> type[BaseHTTPRequestHandler]:
    slots = Slots(sessions)

    class Handler(_JSONHandler):
        def do_GET(self) -> None:
            path = self.path.rstrip("/")
            if path in ("/health", "/v1/health"):
                self._send(200, {"status": "ok", "model": alias})
            elif path in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": alias, "object": "model", "owned_by": "sharp"}]})
            else:
                self._error(404, f"no route {self.path}", "not_found")

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._error(404, f"no route {self.path}", "not_found")
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(body, dict):
                    raise TypeError("the body must be a JSON object")
                with slots.take() as session:
                    answer = chat_completion(session, body, alias=alias)
                self._send(200, answer)
            except ContextLengthError as exc:
                self._error(400, str(exc), "context_length_exceeded")
            except (ValueError, TypeError, KeyError) as exc:
                self._error(400, f"bad request: {exc}", "bad_request")
            except Exception as exc:  # report it to the client and keep serving
                log.exception("chat completion failed")
                self._error(500, f"{type(exc).__name__}: {exc}", "internal_error")

    return Handler


def make_server(
    sessions: LocalSession | Sequence[LocalSession],
    host: str = "127.0.0.1",
    port: int = 8008,
    alias: str = SERVED_ALIAS,
) -> ThreadingHTTPServer:
    """A threaded HTTP server answering with ``sessions`` (one, or several answering side by side)."""
    server = ThreadingHTTPServer((host, port), make_handler(sessions, alias))
    server.daemon_threads = True
    return server
