"""Fixtures for the LM tests: a fake OpenAI-compatible server, a scripted engine, a cold cache."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from program.lm.cache import cold_cache

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))  # for lm_doubles


class FakeOpenAI:
    """An OpenAI-compatible server whose behaviour a test sets: ok, 500, 429, 401, 404, garbage, sleep."""

    def __init__(self):
        self.mode = "ok"
        self.sleep_s = 2.0
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, status: int, payload) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append(body)
                fake.auth.append(self.headers.get("Authorization"))
                mode = fake.mode
                if mode == "sleep":
                    time.sleep(fake.sleep_s)
                codes = {"500": 500, "429": 429, "401": 401, "404": 404}
                if mode in codes:
                    self._json(codes[mode], {"error": {"message": f"fake error {mode}", "type": "x"}})
                elif mode == "garbage":
                    self._json(200, b"{this is not json")
                else:
                    n = len(fake.requests)
                    self._json(
                        200,
                        {
                            "id": f"c{n}",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": f"reply {n}"},
                                }
                            ],
                            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
                        },
                    )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # a client that timed out closes its socket before the slow reply: expected, not an error
        self.server.handle_error = lambda request, client_address: None
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_openai():
    fake = FakeOpenAI()
    yield fake
    fake.close()


@pytest.fixture
def closed_port_base() -> str:
    """The base URL of a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(autouse=True)
def _cold_dspy_cache(tmp_path):
    """Every LM test starts from an empty DSPy cache of its own (memory only: fast)."""
    with cold_cache(tmp_path / "dspy_cache", disk=False):
        yield
