"""Dense retrieval: sentence embeddings in a Chroma collection (cosine space), embedded in the index
folder or in a Chroma server (program/retrieval/store.py).

The collection has no embedding function: vectors are always computed by our
:class:`~program.retrieval.embedder.Embedder` and passed explicitly (Chroma's default function
would try to download a model).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from program.errors import IndexCorruptError, IndexMismatchError, RetrievalError
from program.retrieval import store
from program.retrieval.base import check_query
from program.retrieval.embedder import Embedder
from program.retrieval.manifest import read_manifest
from program.types import Passage

MAX_CHROMA_BATCH = 5461  # Chroma's limit on items per add()
HNSW = store.HNSW


def open_collection(index_dir: str | os.PathLike, create: bool = False, url: str | None = None):
    """The passages collection of the index at ``index_dir`` (created when ``create``): in its chroma/
    folder, or (``url``) in that Chroma server under the name its manifest records."""
    index_dir = Path(index_dir)
    return store.DenseStore.for_index(index_dir, url, read_manifest(index_dir)).open(create=create)


def delete_collection(index_dir: str | os.PathLike, url: str | None = None) -> None:
    """Drop the passages collection (if any) of the index at ``index_dir``."""
    index_dir = Path(index_dir)
    try:
        manifest = read_manifest(index_dir)
    except IndexCorruptError:
        manifest = None
    store.DenseStore.for_index(index_dir, url, manifest).delete()


def stored_ids(collection, page: int = 20_000) -> set[str]:
    """Every id the collection holds (paged, so a large collection is read in bounded pieces)."""
    ids: set[str] = set()
    offset = 0
    while True:
        got = collection.get(include=[], limit=page, offset=offset)["ids"]
        ids.update(got)
        if len(got) < page:
            return ids
        offset += page


def add_passages(collection, passages: Sequence[Passage], embeddings: np.ndarray) -> None:
    for start in range(0, len(passages), MAX_CHROMA_BATCH):
        chunk = passages[start : start + MAX_CHROMA_BATCH]
        collection.add(
            ids=[p.id for p in chunk],
            embeddings=embeddings[start : start + len(chunk)],
            documents=[p.text for p in chunk],
            metadatas=[{"title": p.title} for p in chunk],
        )


def dense_document(p: Passage, dense_text: str) -> str:
    return f"{p.title}. {p.text}" if dense_text == "title_text" else p.text


class DenseRetriever:
    """Nearest passages by cosine similarity of sentence embeddings; score = cosine."""

    def __init__(
        self,
        index_dir: str | os.PathLike,
        embedder: Embedder,
        dimension: int | None = None,
        collection=None,
    ) -> None:
        self._collection = collection if collection is not None else open_collection(index_dir)
        self._count = self._collection.count()
        self._embedder = embedder
        self._dimension = dimension

    def __len__(self) -> int:
        return self._count

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return self.retrieve_many([query], k)[0]

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        cleaned = [check_query(q, k) for q in queries]
        if not cleaned or self._count == 0:
            return [[] for _ in cleaned]
        vectors = self._embedder.encode(cleaned)
        if self._dimension is not None and vectors.shape[1] != self._dimension:
            raise IndexMismatchError(
                f"the query embedder gives {vectors.shape[1]}-d vectors but the index holds "
                f"{self._dimension}-d ones: use the index's embedding model or rebuild (sharp index --rebuild)"
            )
        try:
            res = self._collection.query(
                query_embeddings=vectors,
                n_results=min(k, self._count),
                include=["documents", "metadatas", "distances"],
            )
        except Exception as exc:  # chromadb raises its own and builtin types; none is recoverable here
            raise RetrievalError(f"dense query failed: {type(exc).__name__}: {exc}") from exc
        out = []
        for ids, docs, metas, dists in zip(res["ids"], res["documents"], res["metadatas"], res["distances"]):
            hits = [
                Passage(i, (m or {}).get("title", ""), d or "", 1.0 - float(dist))
                for i, d, m, dist in zip(ids, docs, metas, dists)
            ]
            hits.sort(key=lambda p: (-p.score, p.id))
            out.append(hits)
        return out
