"""Lexical retrieval: BM25 (the ``bm25s`` package) over 'title x title_repeat + text'.

Tokenizer: HTML entities decoded, accents folded (Pokémon -> pokemon), lower-cased, split on
letters/digits, English stopwords (NLTK's list) dropped, Snowball English stemming (PyStemmer).
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from program.errors import ConfigError, IndexMissingError
from program.retrieval.base import check_query
from program.types import Passage

log = logging.getLogger(__name__)

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
PASSAGES_FILE = "passages.jsonl"


class LexicalTokenizer:
    """Text -> list of normalized terms. Deterministic; the same for documents and queries."""

    def __init__(self, stemmer: str = "english", stopwords: str = "english") -> None:
        self._stem = None
        if stemmer != "none":
            try:
                import Stemmer
            except ImportError as exc:
                raise ConfigError(
                    "bm25_stemmer='english' needs PyStemmer (pip install PyStemmer); "
                    "or set bm25_stemmer='none' and rebuild the index"
                ) from exc
            self._stem = Stemmer.Stemmer(stemmer).stemWords
        self._stop: frozenset[str] = frozenset()
        if stopwords != "none":
            from bm25s.stopwords import STOPWORDS_EN_PLUS

            self._stop = frozenset(STOPWORDS_EN_PLUS)

    def __call__(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKD", html.unescape(text))
        text = "".join(c for c in text if not unicodedata.combining(c)).lower()
        words = [w for w in _WORD.findall(text) if w not in self._stop and (len(w) > 1 or w.isdigit())]
        return self._stem(words) if self._stem else words


def bm25_document(p: Passage, title_repeat: int) -> str:
    return " ".join([p.title] * title_repeat + [p.text])


def build_bm25(
    passages: Sequence[Passage], out_dir: str | os.PathLike, settings: dict, show_progress: bool = False
) -> None:
    """Index ``passages`` and save to ``out_dir`` (replaced atomically: a killed build leaves
    either the old folder or none, never a half-written one)."""
    import bm25s

    tok = LexicalTokenizer(settings["stemmer"], settings["stopwords"])
    tokens = [tok(bm25_document(p, settings["title_repeat"])) for p in passages]
    model = bm25s.BM25(k1=settings["k1"], b=settings["b"], method="lucene")
    model.index(tokens, show_progress=show_progress)
    out_dir = Path(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=".bm25.", dir=out_dir.parent))
    try:
        model.save(str(tmp), show_progress=False)
        with open(tmp / PASSAGES_FILE, "w", encoding="utf-8") as f:
            for p in passages:
                f.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


class BM25Retriever:
    """BM25 over a saved index. ``retrieve`` and ``retrieve_many`` follow the Retriever contract."""

    def __init__(self, bm25_dir: str | os.PathLike, settings: dict) -> None:
        import bm25s

        bm25_dir = Path(bm25_dir)
        if not (bm25_dir / PASSAGES_FILE).exists():
            raise IndexMissingError(f"no BM25 index in {bm25_dir}")
        self._model = bm25s.BM25.load(str(bm25_dir), mmap=False, show_progress=False, verbosity=0)
        self._vocab: dict[str, int] = self._model.vocab_dict
        self._tok = LexicalTokenizer(settings["stemmer"], settings["stopwords"])
        with open(bm25_dir / PASSAGES_FILE, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        self._passages = [Passage(r["id"], r["title"], r["text"]) for r in rows]

    def __len__(self) -> int:
        return len(self._passages)

    @property
    def passages(self) -> Sequence[Passage]:
        """Every indexed passage, in index order."""
        return self._passages

    def retrieve(self, query: str, k: int) -> list[Passage]:
        query = check_query(query, k)
        ids = [self._vocab[t] for t in dict.fromkeys(self._tok(query)) if t in self._vocab]
        if not ids:
            return []
        scores = self._model.get_scores_from_ids(ids)
        return [self._passages[i].with_score(scores[i]) for i in top_k(scores, k)]

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [self.retrieve(q, k) for q in queries]


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the k highest positive scores; ties broken by lower index (deterministic)."""
    positive = np.flatnonzero(scores > 0)
    if positive.size == 0:
        return []
    if positive.size > k:
        # keep everything tied with the k-th score so the tie-break below sees all of them
        kth = np.partition(scores[positive], -k)[-k]
        positive = positive[scores[positive] >= kth]
    order = np.lexsort((positive, -scores[positive]))
    return [int(i) for i in positive[order[:k]]]
