"""Fixtures of the arena tests: a stub web-search server on 127.0.0.1 and a tiny local cross-encoder."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fake_openai import QUICK_SHUTDOWN

WEB_RESULTS = {
    "results": [
        {
            "title": "Krzysztof Kieslowski (web)",
            "content": "Kieslowski was a Polish director of Three Colours.",
            "url": "https://example.org/kieslowski",
        },
        {"title": "Empty", "content": "", "url": "https://example.org/empty"},
    ]
}


class _Handler(BaseHTTPRequestHandler):
    delay = 0.0

    def do_GET(self):
        self.server.requests.append(self.path)
        time.sleep(self.server.delay)
        body = json.dumps(WEB_RESULTS).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (the slow case)
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def web_server():
    """Start a stub search endpoint; yields a function delay -> base URL (the server, its requests)."""
    servers = []

    def start(delay: float = 0.0) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.delay, server.requests = delay, []
        server.url = f"http://127.0.0.1:{server.server_address[1]}/search"
        threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


@pytest.fixture
def dead_url() -> str:
    """A 127.0.0.1 URL where nothing listens."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/search"


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory) -> str:
    """A randomly initialised one-layer BERT cross-encoder saved to disk (no download)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-ce")
    words = [
        "the",
        "a",
        "of",
        "is",
        "was",
        "film",
        "director",
        "by",
        "palme",
        "or",
        "1994",
        "french",
        "polish",
        "american",
        "paris",
        "capital",
        "france",
        "won",
    ]
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *letters, *(f"##{c}" for c in letters)]
    (folder / "vocab.txt").write_text("\n".join(vocab))
    tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=1,
        max_position_embeddings=128,
        initializer_range=0.5,
    )  # large random weights spread the sigmoid scores over (0, 1)
    model = BertForSequenceClassification(cfg)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)
