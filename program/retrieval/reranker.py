"""A trained cross-encoder reranker: loading with integrity checks, scoring, and a reranking retriever.

A reranker folder holds a sentence-transformers CrossEncoder and ``reranker.json``: what it was trained on
(dataset, corpus digest, question-ids digest, settings) and the size and sha256 of every file. Loading
checks both, so a tampered file, a folder that is not a trained reranker or one trained on another corpus
is refused with an error naming the file and the command that trains a fitting one.
:class:`RerankingRetriever` wraps any retriever: it takes the top ``depth`` hits of each query, scores
every one against the query and returns the best ``k`` (their ``score`` is the reranker's probability).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from program.errors import ModelFileError
from program.retrieval.base import Retriever, check_query
from program.types import Passage

log = logging.getLogger(__name__)

MANIFEST = "reranker.json"
FORMAT = 1


class RerankerError(ModelFileError):
    """A reranker that cannot be used: missing, not a trained reranker, tampered, or for another corpus."""


def pair_text(p: Passage) -> str:
    """The passage side of a (query, passage) pair, as the reranker is trained and queried."""
    return f"{p.title}: {p.text}"


def train_command(dataset: str | None, name: str | None = None) -> str:
    return f"sharp train-reranker --dataset {dataset or 'DATASET'}" + (f" --name {name}" if name else "")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_table(folder: Path) -> dict[str, dict]:
    """Every file under ``folder`` except the manifest: relative path -> size and sha256."""
    return {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def write_reranker_manifest(folder: Path, manifest: Mapping[str, Any]) -> dict:
    """Write ``reranker.json`` (the given fields, the format and the file table); return it."""
    data = {**dict(manifest), "format": FORMAT, "files": file_table(folder)}
    (folder / MANIFEST).write_text(json.dumps(data, indent=2, sort_keys=True))
    return data


def read_reranker_manifest(folder: Path) -> dict:
    """The manifest of the reranker at ``folder``, its files checked against it (RerankerError if not)."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise RerankerError(f"no reranker at {folder}. Train one with: {train_command(None, folder.name)}")
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise RerankerError(
            f"{folder} is not a reranker trained here (no {MANIFEST}). Train one with: "
            f"{train_command(None, folder.name)}"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RerankerError(f"{path} is damaged ({exc}). Retrain with: {train_command(None, folder.name)}") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        raise RerankerError(
            f"{path} is not a reranker manifest of format {FORMAT}. Retrain with: "
            f"{train_command(manifest.get('dataset') if isinstance(manifest, dict) else None, folder.name)}"
        )
    retrain = train_command(manifest.get("dataset"), folder.name)
    for rel, meta in manifest["files"].items():
        f = folder / rel
        if not f.is_file():
            raise RerankerError(f"reranker file {f} is missing. Retrain with: {retrain}")
        if f.stat().st_size != meta.get("size") or _sha256(f) != meta.get("sha256"):
            raise RerankerError(f"reranker file {f} changed since training (checksum differs). Retrain with: {retrain}")
    return manifest


def check_corpus(manifest: Mapping[str, Any], folder: Path, corpus_sha256: str | None, dataset: str | None) -> None:
    """Refuse a reranker trained on another corpus than the index it reranks."""
    trained = manifest.get("corpus_sha256")
    if corpus_sha256 and trained != corpus_sha256:
        raise RerankerError(
            f"the reranker at {folder} was trained on another corpus ({manifest.get('dataset')!r}, corpus "
            f"{str(trained)[:12]}) than this index's ({dataset!r}, corpus {corpus_sha256[:12]}). Train one for "
            f"it with: {train_command(dataset)}"
        )


_MODELS: dict[tuple[str, int], Any] = {}
_LOCK = threading.Lock()


class CrossEncoderReranker:
    """Scores (query, passage) pairs with a trained CrossEncoder: probabilities in [0, 1]."""

    def __init__(
        self,
        folder: str | Path,
        max_length: int | None = None,
        batch_size: int = 32,
        corpus_sha256: str | None = None,
        dataset: str | None = None,
    ):
        self.folder = Path(folder)
        self.manifest = read_reranker_manifest(self.folder)
        check_corpus(self.manifest, self.folder, corpus_sha256, dataset)
        self.max_length = int(max_length or self.manifest.get("training", {}).get("max_length", 256))
        self.batch_size = batch_size
        key = (str(self.folder.resolve()), self.max_length)
        with _LOCK:
            if key not in _MODELS:
                _MODELS[key] = _load(self.folder, self.max_length)
        self.model = _MODELS[key]
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.folder.name)

    def score(self, query: str, passages: Sequence[Passage]) -> list[float]:
        return self.score_pairs([(query, p) for p in passages])

    def score_pairs(self, pairs: Sequence[tuple[str, Passage]]) -> list[float]:
        if not pairs:
            return []
        with self._lock:
            out = self.model.predict(
                [(q, pair_text(p)) for q, p in pairs], batch_size=self.batch_size, show_progress_bar=False
            )
        return [float(s) for s in out]

    __call__ = score


def _load(folder: Path, max_length: int) -> Any:
    try:
        from sentence_transformers import CrossEncoder

        return CrossEncoder(str(folder), max_length=max_length, local_files_only=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise RerankerError(f"cannot load the reranker at {folder} ({type(exc).__name__}: {str(exc)[:200]})") from None


class RerankingRetriever:
    """Any retriever, its top ``depth`` hits per query reordered by a reranker; returns the best ``k``."""

    depends_on_k = True

    def __init__(self, base: Retriever, reranker: Any, depth: int = 20):
        self.base, self.reranker, self.depth = base, reranker, depth

    def retrieve(self, query: str, k: int) -> list[Passage]:
        return self.retrieve_many([query], k)[0]

    def retrieve_many(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        cleaned = [check_query(q, k) for q in queries]
        candidates = self.base.retrieve_many(cleaned, max(k, self.depth))
        scores = iter(self.reranker.score_pairs([(q, p) for q, ps in zip(cleaned, candidates) for p in ps]))
        out = []
        for ps in candidates:
            scored = [p.with_score(next(scores)) for p in ps]
            out.append(sorted(scored, key=lambda p: -p.score)[:k])
        return out
