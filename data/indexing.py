"""Build the retrieval index of a corpus: dense vectors in Chroma + a BM25 index + a manifest.

Idempotent (a finished index of the same corpus and settings is checked, fully, and left alone),
resumable (a build killed midway re-embeds only passages Chroma does not hold yet), guarded (a
partial manifest is written first, so resuming with another corpus or model is refused) and
self-checking (a finished build records every file's size and sha256; a damaged BM25 part is
rebuilt by the next build, damaged vectors are reported with the --rebuild command).

A full disk stops the build with a DiskFullError that names the path (the manifest still says
"building", so nothing opens the index as if it were whole); once space is freed the same command
resumes, or, when the full disk left Chroma's store unreadable, embeds every passage again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from data.errors import DatasetError
from program.errors import IndexCorruptError, IndexMismatchError, SharpError, StorageError
from program.retrieval import integrity, store
from program.retrieval.bm25 import BM25Retriever, build_bm25
from program.retrieval.config import RetrieverConfig
from program.retrieval.dense import add_passages, dense_document, stored_ids
from program.retrieval.embedder import Embedder, method_of
from program.retrieval.factory import (
    DatasetRef,
    damage_message,
    dense_store,
    index_command,
    index_damage,
    load_manifest,
    open_dense,
)
from program.retrieval.integrity import Damage, part_of
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
from program.retrieval.store import SERVER, DenseStore, built_with, check_server
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


def _wipe(index_dir: Path, url: str | None) -> None:
    """Remove what a build writes (and nothing else that may live in the folder).

    The Chroma collection is deleted through its client, not by removing files: Chroma caches
    one client per path in the process, which would go on serving the deleted files (a store
    too damaged to open is removed with its folder). Vectors in a Chroma server are dropped there.
    """
    try:
        old = read_manifest(index_dir) or {}
    except IndexCorruptError:
        old = {}
    recorded = old.get("dense_store") or {}
    (index_dir / MANIFEST).unlink(missing_ok=True)
    if recorded.get("kind") == SERVER:
        if url:
            DenseStore(index_dir, url, recorded["collection"]).delete()
        else:
            log.warning(
                "the old vectors stay in collection %s of the Chroma server at %s (pass --chroma-url to drop them)",
                recorded.get("collection"),
                recorded.get("url"),
            )
    if url:
        DenseStore.for_index(index_dir, url).delete()
    if (index_dir / CHROMA_DIR).exists():
        DenseStore(index_dir).delete()
    if (index_dir / BM25_DIR).exists():
        shutil.rmtree(index_dir / BM25_DIR)


def find_damage(
    index_dir: Path, manifest: dict, url: str | None, dataset: str | DatasetRef | None = None, full: bool = True
) -> list[Damage]:
    """What is wrong with a complete index: files against the manifest (``full``: checksums), the BM25
    part loading, the vectors' store opening and holding every passage. A store that does not open at
    all raises (IndexCorruptError, IndexMissingError, IndexServerError: each names the repair)."""
    damage = index_damage(index_dir, manifest, full=full)
    if full and not any(d.part == "bm25" for d in damage):
        try:
            BM25Retriever(index_dir / BM25_DIR, manifest["bm25"])
        except (ValueError, OSError, KeyError) as exc:
            damage.append(Damage(f"{BM25_DIR}/", f"does not load ({type(exc).__name__}: {exc})"))
    if not any(d.part == "dense" for d in damage):
        collection = open_dense(index_dir, manifest, url, dataset)
        count = collection.count()
        if count != manifest.get("num_passages"):
            where = dense_store(index_dir, manifest, url, dataset).where()
            damage.append(
                Damage(where, f"holds {count} vectors, the manifest records {manifest.get('num_passages')}", "dense")
            )
    return damage


def verify_index(
    index_dir: str | os.PathLike, config: RetrieverConfig | None = None, dataset: str | DatasetRef | None = None
) -> dict:
    """Check a complete index fully (``sharp index --verify``): every file's size and sha256 against the
    manifest, SQLite's quick_check, the BM25 part loading, the vectors' store holding every passage.
    Writes nothing. Returns the manifest, or raises an error that names what is wrong and the command
    that repairs it."""
    config = config or RetrieverConfig()
    index_dir = Path(index_dir)
    if config.chroma_url:
        check_server(config.chroma_url, index_dir)
    manifest = load_manifest(index_dir, dataset, config.chroma_url)
    damage = find_damage(index_dir, manifest, config.chroma_url, dataset)
    if damage:
        raise IndexCorruptError(damage_message(index_dir, damage, dataset, config.chroma_url))
    return manifest


def _up_to_date(
    index_dir: Path, manifest: dict, passages: list[Passage], url: str | None, dataset: str | DatasetRef | None
) -> dict:
    """A complete index checked fully before it is called up to date; a damaged BM25 part is rebuilt
    (seconds); damaged vectors are an IndexCorruptError that gives the --rebuild command."""
    damage = find_damage(index_dir, manifest, url, dataset)
    if not damage:
        log.info("index at %s is up to date (%d passages); nothing to do", index_dir, manifest["num_passages"])
        return manifest
    if any(d.part != "bm25" for d in damage):
        raise IndexCorruptError(damage_message(index_dir, damage, dataset, url))
    log.warning("index at %s: %s; rebuilding its BM25 part", index_dir, "; ".join(map(str, damage)))
    build_bm25(passages, index_dir / BM25_DIR, manifest["bm25"])
    files = {rel: want for rel, want in (manifest.get("files") or {}).items() if part_of(rel) != "bm25"}
    if "files" in manifest:
        manifest["files"] = {**files, **integrity.record(index_dir, (BM25_DIR,))}
    manifest["repaired_at"] = now_iso()
    write_manifest(index_dir, manifest)
    log.info("index at %s repaired: BM25 part rebuilt", index_dir)
    return manifest


def _partial_store(where: DenseStore, built: dict, resuming: bool) -> tuple[Any, set[str]]:
    """The collection to fill and the ids it already holds. When an interrupted build left an embedded
    store whose files Chroma cannot load any more (a full disk cut its id map short), that store is
    dropped and every passage is embedded again; any other error (a full disk now) is raised."""
    try:
        collection = where.open(create=True, built_with=built)
        return collection, stored_ids(collection)
    except SharpError:
        raise
    except Exception as exc:
        if not resuming or where.url or not store.is_unreadable(exc):
            raise  # a full disk, a busy store, ...: build_index says which
        log.warning(
            "embedding every passage again: the vectors of the interrupted build in %s cannot be read (%s: %s)",
            where.path,
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        )
        where.discard()
        return where.open(create=True, built_with=built), set()


@contextlib.contextmanager
def _progress(enabled: bool | Callable[[int, int], Any], total: int, done: int) -> Iterator:
    """A callback advancing a Rich progress bar on stderr (a no-op when disabled). ``enabled`` may be a
    factory of its own, ``(total, done) -> context manager yielding advance(n)`` (the CLI's display)."""
    if callable(enabled):
        with enabled(total, done) as advance:
            yield advance
        return
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
    progress: bool | Callable[[int, int], Any] = True,
    rebuild: bool = False,
    embedder: Embedder | None = None,
    dataset: str | DatasetRef | None = None,
) -> dict:
    """Index ``passages`` into ``index_dir``; return the manifest. See the module docstring."""
    config = config or RetrieverConfig()
    index_dir = Path(index_dir)
    passages = list(passages)
    _check_corpus(passages)
    corpus_hash = corpus_sha256(passages)
    url = config.chroma_url
    if url:
        check_server(url, index_dir)  # before any expensive work
    try:
        return _build(passages, index_dir, config, corpus_hash, batch_size, progress, rebuild, embedder, dataset)
    except SharpError:
        raise
    except Exception as exc:  # a full disk (an OSError, or Chroma's own errors), a read-only folder
        resume = index_command(index_dir, dataset, chroma_url=url)
        if store.disk_full(exc, index_dir, chroma=not url):
            if not url:  # Chroma's memory of the store may differ from its files now: reread them
                store.release(DenseStore(index_dir).path)
            path = Path(exc.filename) if isinstance(exc, OSError) and exc.filename else index_dir
            then = (
                f"Free some space (or build elsewhere: --index-dir DIR or --workspace DIR), then resume with: {resume}"
            )
            raise store.disk_full_error(exc, path, then) from None
        if not isinstance(exc, OSError):
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        raise StorageError(
            f"cannot write the index at {index_dir}{where}: {exc.strerror or exc}. Free space or make the folder "
            "writable, or build elsewhere (--index-dir DIR or --workspace DIR); a build stopped midway resumes "
            f"with: {resume}"
        ) from None


def _previous_manifest(index_dir: Path, dataset: str | DatasetRef | None, url: str | None) -> dict | None:
    """The manifest already in ``index_dir`` (None: none); an unreadable one raises IndexCorruptError
    naming the command that rebuilds the index."""
    try:
        return read_manifest(index_dir)
    except IndexCorruptError as exc:
        raise IndexCorruptError(
            f"{exc}. Rebuild the index with: {index_command(index_dir, dataset, True, url)}"
        ) from None


def _to_embed(passages: list[Passage], have: set[str], config: RetrieverConfig) -> list[Passage]:
    """The passages not yet embedded, longest first (similar lengths share a batch, so less padding,
    and the ETA is pessimistic)."""
    missing = [p for p in passages if p.id not in have]
    if have:
        log.info("resuming: %d of %d passages already embedded, %d to go", len(have), len(passages), len(missing))
    missing.sort(key=lambda p: -len(dense_document(p, config.dense_text)))
    return missing


def _refuse_mismatch(
    manifest: dict,
    settings: dict,
    corpus_hash: str,
    index_dir: Path,
    url: str | None,
    dataset: str | DatasetRef | None,
) -> None:
    """Raise IndexMismatchError where the index in ``index_dir`` was built with other settings or corpus."""
    problems = mismatches(manifest, settings, corpus_hash)
    if problems:
        raise IndexMismatchError(
            f"{index_dir} holds an index built differently ({'; '.join(problems)}); refusing to "
            f"{'resume' if manifest.get('status') != 'complete' else 'reuse'} it. Rebuild with: "
            f"{index_command(index_dir, dataset, True, url)}"
        )


def _building_manifest(
    settings: dict, corpus_hash: str, num_passages: int, embedder: Embedder, where: DenseStore, created_at: str
) -> dict:
    """The manifest of an index being built (status "building", no vectors counted yet)."""
    return {
        "format": FORMAT_VERSION,
        "status": "building",
        **settings,
        "corpus_sha256": corpus_hash,
        "num_passages": num_passages,
        "dimension": embedder.dimension,
        "backend": getattr(embedder, "backend", "custom"),
        "max_seq_length": getattr(embedder, "max_seq_length", None),
        "dense_store": where.record(),
        "created_at": created_at,
        "versions": _versions(),
        "counts": {"dense": 0, "bm25": 0},
    }


def _embed(
    missing: list[Passage],
    embedder: Embedder,
    config: RetrieverConfig,
    batch_size: int | None,
    advance: Callable[[int], Any],
    collection: Any,
    index_dir: Path,
    manifest: dict,
) -> None:
    """Embed and store ``missing`` a chunk at a time, recording each chunk's count in the manifest on disk."""
    for start in range(0, len(missing), CHUNK):
        chunk = missing[start : start + CHUNK]
        vectors = embedder.encode([dense_document(p, config.dense_text) for p in chunk], batch_size, advance)
        add_passages(collection, chunk, vectors)
        manifest["counts"]["dense"] += len(chunk)
        write_manifest(index_dir, manifest)


def _build(
    passages: list[Passage],
    index_dir: Path,
    config: RetrieverConfig,
    corpus_hash: str,
    batch_size: int | None,
    progress: bool | Callable[[int, int], Any],
    rebuild: bool,
    embedder: Embedder | None,
    dataset: str | DatasetRef | None,
) -> dict:
    # The embedding method is compared like the other index-time settings: resuming or reusing an
    # index whose vectors another method made would mix vectors that do not compare.
    method = method_of(embedder) if embedder is not None else config.embedding_method
    settings, url = {**config.index_settings(), "embedding_method": method}, config.chroma_url
    if rebuild:
        _wipe(index_dir, url)
    manifest = _previous_manifest(index_dir, dataset, url)
    resuming = manifest is not None  # an interrupted build of this corpus (a complete one returns below)
    if manifest is not None:
        _refuse_mismatch(manifest, settings, corpus_hash, index_dir, url, dataset)
        where = dense_store(index_dir, manifest, url, dataset)
        if manifest.get("status") == "complete":
            return _up_to_date(index_dir, manifest, passages, url, dataset)
    elif not rebuild and (index_dir / CHROMA_DIR).exists() and not url:
        raise IndexMismatchError(
            f"{index_dir} has a {CHROMA_DIR}/ folder but no manifest, so what it holds is unknown. "
            f"Rebuild with: {index_command(index_dir, dataset, rebuild=True)}"
        )
    else:
        where = DenseStore.for_index(index_dir, url)

    embedder = embedder or Embedder.from_config(config)
    started = time.perf_counter()
    created_at = (manifest or {}).get("created_at") or now_iso()
    manifest = _building_manifest(settings, corpus_hash, len(passages), embedder, where, created_at)
    write_manifest(index_dir, manifest)  # before Chroma writes anything: a resume can be checked
    collection, have = _partial_store(where, built_with(manifest), resuming=resuming)
    manifest["counts"]["dense"] = len(have)

    missing = _to_embed(passages, have, config)
    embed_start = time.perf_counter()
    with _progress(progress, len(passages), len(have)) as advance:
        _embed(missing, embedder, config, batch_size, advance, collection, index_dir, manifest)
    embed_seconds = time.perf_counter() - embed_start

    return _complete(index_dir, manifest, passages, settings, url, collection, len(missing), embed_seconds, started)


def _complete(
    index_dir: Path,
    manifest: dict,
    passages: list[Passage],
    settings: dict,
    url: str | None,
    collection: Any,
    embedded: int,
    embed_seconds: float,
    started: float,
) -> dict:
    """Build the BM25 part, then mark the manifest complete (counts, file checksums, timings) and write it."""
    bm25_start = time.perf_counter()
    build_bm25(passages, index_dir / BM25_DIR, settings["bm25"])
    manifest.update(
        status="complete",
        completed_at=now_iso(),
        counts={"dense": collection.count(), "bm25": len(passages)},
        files=integrity.record(index_dir, (BM25_DIR,) if url else (BM25_DIR, CHROMA_DIR)),
        timings={
            "embedded_this_run": embedded,
            "embed_seconds": round(embed_seconds, 2),
            "passages_per_second": round(embedded / embed_seconds, 1) if embedded and embed_seconds > 0 else None,
            "bm25_seconds": round(time.perf_counter() - bm25_start, 2),
            "build_seconds": round(time.perf_counter() - started, 2),
        },
    )
    write_manifest(index_dir, manifest)
    log.info("index at %s complete: %d passages (%d embedded now)", index_dir, len(passages), embedded)
    return manifest
