"""A web-search client for CRAG's fallback source: off by default, bounded in time and size.

Speaks the SearxNG JSON shape: ``GET {url}?q=QUERY&format=json`` answers
``{"results": [{"title": ..., "content": ..., "url": ...}, ...]}`` (``snippet`` or ``text`` are
read too). Any failure (down, slow, bad JSON) is a :class:`WebSearchError`; the whole request,
connection to last byte, ends within ``timeout_s``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from program.errors import RetrievalError
from program.retrieval.base import check_query
from program.types import Passage


class WebSearchError(RetrievalError):
    """The web-search endpoint failed, was too slow, or answered something unreadable."""


class WebSearch:
    """The Retriever contract over a JSON web-search endpoint."""

    def __init__(self, url: str, timeout_s: float = 5.0, max_bytes: int = 2_000_000):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"web search url must start with http:// or https://, got {url!r}")
        self.url, self.timeout_s, self.max_bytes = url, float(timeout_s), max_bytes

    def retrieve(self, query: str, k: int) -> list[Passage]:
        query = check_query(query, k)
        sep = "&" if "?" in self.url else "?"
        url = f"{self.url}{sep}{urllib.parse.urlencode({'q': query, 'format': 'json'})}"
        box: dict[str, Any] = {}
        worker = threading.Thread(target=self._fetch, args=(url, box), daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive() or box.get("timeout") or not box:
            raise WebSearchError(f"web search {self.url} gave no answer within {self.timeout_s:g} s")
        if "error" in box:
            raise WebSearchError(f"web search {self.url} failed: {box['error']}")
        return self._parse(box["body"], k)

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [self.retrieve(q, k) for q in queries]

    def _fetch(self, url: str, box: dict) -> None:
        deadline = time.monotonic() + self.timeout_s
        try:
            req = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "sharp-rag"})
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                chunks, size = [], 0
                while chunk := resp.read(65536):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.max_bytes or time.monotonic() > deadline:
                        raise WebSearchError("answer too large or too slow")
            box["body"] = b"".join(chunks)
        except TimeoutError:
            box["timeout"] = True
        except (urllib.error.URLError, OSError, WebSearchError, ValueError) as exc:
            if isinstance(getattr(exc, "reason", None), TimeoutError):
                box["timeout"] = True
                return
            box["error"] = f"{type(exc).__name__}: {exc}"[:300]

    def _parse(self, body: bytes, k: int) -> list[Passage]:
        try:
            data = json.loads(body.decode("utf-8", errors="replace"))
            results = data["results"] if isinstance(data, dict) else data
            if not isinstance(results, list):
                raise TypeError("results is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise WebSearchError(f"web search {self.url} answered unreadable JSON ({exc})") from None
        out = []
        for r in results:
            if not isinstance(r, dict):
                continue
            text = str(r.get("content") or r.get("snippet") or r.get("text") or "").strip()
            if not text:
                continue
            link = str(r.get("url") or "")
            pid = "web:" + hashlib.sha1((link or text).encode()).hexdigest()[:12]
            out.append(Passage(pid, str(r.get("title") or link or "web").strip(), text, float(len(out) == 0)))
            if len(out) >= k:
                break
        return out
