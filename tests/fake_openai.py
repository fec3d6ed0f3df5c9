"""A real HTTP server on 127.0.0.1 that speaks OpenAI's chat completions API and fails on request.

``mode`` sets how every request is answered; ``script`` (a list) is consumed first, one entry per
request. Modes: ``ok`` (the ``answer`` function of the request body, default "reply N"), ``500``,
``429``, ``401``, ``404`` (an error status with an OpenAI error body), ``not-json`` (HTTP 200 with a
body that is not JSON), ``html`` (HTTP 200, an HTML page), ``empty`` (a completion whose content is
""), ``garbage`` (a completion whose content parses as none of the expected fields), ``sleep``
(``ok`` after ``sleep_s``). ``sharp_answer`` answers SHARP's planner, critic and generator with
valid JSON.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# serve_forever(**QUICK_SHUTDOWN) in every test server: shutdown() waits for the loop's next poll, 0.5 s by
# default, at the end of each test that starts one (tens of tests: seconds of the suite)
QUICK_SHUTDOWN = {"poll_interval": 0.05}

STATUS = {"500": 500, "429": 429, "401": 401, "404": 404}


def _text(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def sharp_answer(body: dict) -> str:
    """A valid JSON reply for SHARP's steps, chosen by the output fields its system prompt names."""
    system = _text(body["messages"][0])
    if "`verdict`" in system:  # the answer critic
        return json.dumps({"verdict": "supported", "confidence": 0.9})
    if "`supporting_passages`" in system:  # the generator
        return json.dumps({"answer": "American", "supporting_passages": [1]})
    if "`sub_questions`" in system:  # the planner of a decomposed read
        return json.dumps({"sub_questions": ["What nationality is Quentin Tarantino?", "Who directed Pulp Fiction?"]})
    if "`answer`" in system:  # the composer
        return json.dumps({"answer": "American"})
    return "reply"


class FakeOpenAI:
    """See the module docstring. ``requests`` holds every request body, ``auth`` its Authorization header."""

    def __init__(self, answer: Callable[[dict], str] | None = None, mode: str = "ok"):
        self.mode = mode
        self.script: list[str] = []
        self.answer = answer
        self.sleep_s = 2.0
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        self.gets: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, payload, content_type: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.gets.append(self.path)
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "local", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with fake._lock:
                    fake.requests.append(body)
                    fake.auth.append(self.headers.get("Authorization"))
                    n = len(fake.requests)
                    mode = fake.script.pop(0) if fake.script else fake.mode
                if mode == "sleep":
                    time.sleep(fake.sleep_s)
                if mode in STATUS:
                    self._send(STATUS[mode], {"error": {"message": f"fake error {mode}", "type": "x"}})
                elif mode == "not-json":
                    self._send(200, b"{this is not json")
                elif mode == "html":
                    self._send(200, b"<html><body>Bad gateway</body></html>", "text/html")
                else:
                    if mode == "empty":
                        content = ""
                    elif mode == "garbage":
                        content = "@@@ no fields here %%%"
                    else:
                        content = fake.answer(body) if fake.answer else f"reply {n}"
                    self._send(200, completion(n, body.get("model"), content))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # a client that timed out closes its socket before the slow reply: expected, not an error
        self.server.handle_error = lambda request, client_address: None
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(n: int, model: str | None, content: str) -> dict:
    return {
        "id": f"c{n}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }
