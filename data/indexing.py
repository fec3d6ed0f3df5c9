"""Build the retrieval index of a corpus: dense vectors in Chroma + a BM25 index + a manifest.

Idempotent (a finished index of the same corpus and settings is left alone), resumable (a
build killed midway re-embeds only passages Chroma does not hold yet) and guarded (a partial
manifest is written first, so resuming with another corpus or model is refused).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

from data.errors import DatasetError
from program.errors import IndexMismatchError
from program.retrieval.bm25 import build_bm25
from program.retrieval.config import RetrieverConfig
from program.retrieval.dense import add_passages, delete_collection, dense_document, open_collection, stored_ids
from program.retrieval.embedder import Embedder, method_of
from program.retrieval.factory import index_command
from program.retrieval.manifest import (
    BM25_DIR,
    CHROMA_DIR,
    FORMAT_VERSION,
    MANIFEST,
    corpus_sha256,
    mismatches,
    now_iso,
    read_manifest,
    write_manifest,
)
from program.types import Passage

log = logging.getLogger(__name__)

CHUNK = 1024  # passages embedded and stored per step: the most a kill can lose


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("sharp-rag", "chromadb", "bm25s", "sentence-transformers", "onnxruntime", "torch", "PyStemmer"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def _check_corpus(passages: list[Passage]) -> None:
    if not passages:
        raise DatasetError("the corpus is empty: nothing to index (check the corpus file and --dataset)")
    seen: set[str] = set()
    for p in passages:
        if p.id in seen:
            raise DatasetError(f"passage id {p.id!r} occurs twice in the corpus; ids must be unique")
        seen.add(p.id)


def _wipe(index_dir: Path) -> None:
    """Remove what a build writes (and nothing else that may live in the folder).

    The Chroma collection is deleted through its client, not by removing files: Chroma caches
    one client per path in the process, which would go on serving the deleted files.
    """
    (index_dir / MANIFEST).unlink(missing_ok=True)
    if (index_dir / CHROMA_DIR).exists():
        delete_collection(index_dir)
    if (index_dir / BM25_DIR).exists():
        shutil.rmtree(index_dir / BM25_DIR)


@contextlib.contextmanager
def _progress(enabled: bool, total: int, done: int) -> Iterator:
    """A callback advancing a Rich progress bar on stderr (a no-op when disabled)."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("embedding"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task("embed", total=total, completed=done, rate="")
        start, count = time.perf_counter(), 0

        def advance(n: int) -> None:
            nonlocal count
            count += n
            rate = count / max(time.perf_counter() - start, 1e-9)
            bar.update(task, advance=n, rate=f"{rate:.0f} p/s")

        yield advance


def build_index(
    passages: Iterable[Passage],
    index_dir: str | os.PathLike,
    config: RetrieverConfig | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    rebuild: bool = False,
    embedder: Embedder | None = None,
    dataset: str | None = None,
) -> dict:
    """Index ``passages`` into ``index_dir``; return the manifest. See the module docstring."""
    config = config or RetrieverConfig()
    index_dir = Path(index_dir)
    passages = list(passages)
    _check_corpus(passages)
    corpus_hash = corpus_sha256(passages)
    # The embedding method is compared like the other index-time settings: resuming or reusing an
    # index whose vectors another method made would mix vectors that do not compare.
    method = method_of(embedder) if embedder is not None else config.embedding_method
    settings = {**config.index_settings(), "embedding_method": method}
    if rebuild:
        _wipe(index_dir)
    manifest = read_manifest(index_dir)
    if manifest is not None:
        problems = mismatches(manifest, settings, corpus_hash)
        if problems:
            raise IndexMismatchError(
                f"{index_dir} holds an index built differently ({'; '.join(problems)}); refusing to "
                f"{'resume' if manifest.get('status') != 'complete' else 'reuse'} it. Rebuild with: "
                f"{index_command(index_dir, dataset, rebuild=True)}"
            )
        if manifest.get("status") == "complete":
            log.info("index at %s is up to date (%d passages); nothing to do", index_dir, manifest["num_passages"])
            return manifest
    elif not rebuild and (index_dir / CHROMA_DIR).exists():
        raise IndexMismatchError(
            f"{index_dir} has a {CHROMA_DIR}/ folder but no manifest, so what it holds is unknown. "
            f"Rebuild with: {index_command(index_dir, dataset, rebuild=True)}"
        )

    embedder = embedder or Embedder.from_config(config)
    backend = getattr(embedder, "backend", "custom")
    started = time.perf_counter()
    manifest = {
        "format": FORMAT_VERSION,
        "status": "building",
        **settings,
        "corpus_sha256": corpus_hash,
        "num_passages": len(passages),
        "dimension": embedder.dimension,
        "backend": backend,
        "max_seq_length": getattr(embedder, "max_seq_length", None),
        "created_at": (manifest or {}).get("created_at") or now_iso(),
        "versions": _versions(),
        "counts": {"dense": 0, "bm25": 0},
    }
    write_manifest(index_dir, manifest)  # before Chroma writes anything: a resume can be checked
    collection = open_collection(index_dir, create=True)
    have = stored_ids(collection)
    manifest["counts"]["dense"] = len(have)

    missing = [p for p in passages if p.id not in have]
    if have:
        log.info("resuming: %d of %d passages already embedded, %d to go", len(have), len(passages), len(missing))
    # Longest first: similar lengths share a batch (less padding), and the ETA is pessimistic.
    missing.sort(key=lambda p: -len(dense_document(p, config.dense_text)))
    embed_start = time.perf_counter()
    with _progress(progress, len(passages), len(have)) as advance:
        for start in range(0, len(missing), CHUNK):
            chunk = missing[start : start + CHUNK]
            vectors = embedder.encode([dense_document(p, config.dense_text) for p in chunk], batch_size, advance)
            add_passages(collection, chunk, vectors)
            manifest["counts"]["dense"] += len(chunk)
            write_manifest(index_dir, manifest)
    embed_seconds = time.perf_counter() - embed_start

    bm25_start = time.perf_counter()
    build_bm25(passages, index_dir / BM25_DIR, settings["bm25"])
    manifest.update(
        status="complete",
        completed_at=now_iso(),
        counts={"dense": collection.count(), "bm25": len(passages)},
        timings={
            "embedded_this_run": len(missing),
            "embed_seconds": round(embed_seconds, 2),
            "passages_per_second": round(len(missing) / embed_seconds, 1) if missing and embed_seconds > 0 else None,
            "bm25_seconds": round(time.perf_counter() - bm25_start, 2),
            "build_seconds": round(time.perf_counter() - started, 2),
        },
    )
    write_manifest(index_dir, manifest)
    log.info("index at %s complete: %d passages (%d embedded now)", index_dir, len(passages), len(missing))
    return manifest
