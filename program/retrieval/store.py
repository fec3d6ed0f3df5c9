"""Where an index's vectors live: its own ``chroma/`` folder (embedded Chroma), or a collection in a
Chroma server (``chroma run --path DIR --port PORT``) reached through ``chromadb.HttpClient``.

The manifest records which (``dense_store``: ``{"kind": "embedded"}`` or ``{"kind": "chroma-server",
"collection": ..., "url": ...}``; a manifest without it is embedded). The BM25 part and the manifest
always stay in the index folder. The collection's metadata says what its vectors were built with
(embedding model, dimension, text format, corpus hash), so a collection of another index or
embedder is refused with a message instead of answering with wrong neighbours.

Chroma writes to ``chroma.sqlite3`` on every open, even to read. An embedded store in a read-only
folder is therefore queried from a private temporary copy (made once per process, removed at exit).

A full disk: SQLite says "database or disk is full", but Chroma's Rust layer often reports a failed
write only as "Error in compaction: Failed to apply logs to the metadata segment" (or "... hnsw
segment", "Error purging logs"). :func:`disk_full` calls such an error a full disk when the disk
holding the store has less than LOW_SPACE free, and the build turns it into a DiskFullError naming
the path. Chroma rewrites a segment's id map (index_metadata.pickle) by truncating it first, so a
disk that fills then leaves a store Chroma cannot read again ("Error deserializing pickle file"):
the build of an interrupted index drops such a store (:meth:`DenseStore.discard`) and embeds anew.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from program.errors import DiskFullError, IndexMismatchError, IndexMissingError, IndexServerError, StorageError
from program.retrieval.manifest import CHROMA_DIR, COLLECTION

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
SERVER = "chroma-server"
HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32}
# manifest key -> collection metadata key: what the vectors were built with
BUILT_WITH = {
    "embedding_model": "sharp_embedding_model",
    "dimension": "sharp_dimension",
    "dense_text": "sharp_dense_text",
    "corpus_sha256": "sharp_corpus_sha256",
}
_READ_ONLY_MARKERS = ("readonly database", "read-only", "unable to open database file", "permission denied")
_FULL_MARKERS = ("database or disk is full", "no space left on device", "disk quota exceeded")
_UNREADABLE_MARKERS = ("deserializ", "error loading hnsw index")  # a store's files Chroma cannot load
# Bytes free below which a failed Chroma write is taken for a full disk: a failed SQLite transaction
# gives back its journal, a chunk's few MB, before the error is seen.
LOW_SPACE = 16 << 20
_copies: dict[Path, Path] = {}


def check_url(url: str) -> str:
    """``url`` if it is http(s)://HOST:PORT (no path), else a ValueError saying what is wrong."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"chroma_url must look like http://127.0.0.1:8000, got {url!r}")
    if parsed.path not in ("", "/") or parsed.query:
        raise ValueError(f"chroma_url takes no path or query (the server's root), got {url!r}")
    try:
        parsed.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"chroma_url has a bad port: {url!r}") from None
    return url.rstrip("/")


def server_command(url: str, index_dir: Path) -> str:
    """A `chroma run` command that serves ``url`` (data under the workspace, next to its indexes)."""
    parsed = urlparse(url)
    index_dir = Path(index_dir).resolve()
    home = index_dir.parent.parent if index_dir.parent.name == "indexes" else index_dir.parent
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"chroma run --path {shlex.quote(str(home / 'chroma-server'))} --host {parsed.hostname} --port {port}"


def check_server(url: str, index_dir: Path, timeout: float = 5.0) -> None:
    """Fail fast, before any expensive work, when no Chroma server answers at ``url``."""
    start = f"Start one with: {server_command(url, index_dir)} (or drop --chroma-url to keep the vectors in the index folder)"
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/v2/heartbeat", timeout=timeout) as resp:
            body = json.loads(resp.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:
        raise IndexServerError(
            f"{url} answers but is not a Chroma server (GET /api/v2/heartbeat: HTTP {exc.code}). {start}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise IndexServerError(f"no Chroma server answers at {url} ({reason}). {start}") from None
    except ValueError:
        raise IndexServerError(
            f"{url} answers but is not a Chroma server (GET /api/v2/heartbeat gave no JSON). {start}"
        ) from None
    if not isinstance(body, dict) or "nanosecond heartbeat" not in body:
        raise IndexServerError(f"{url} answers but is not a Chroma server (unexpected heartbeat {body!r}). {start}")


def server_collection_name(index_dir: Path) -> str:
    """A collection name unique to the index folder: sharp-<folder name>-<hash of its absolute path>."""
    index_dir = Path(index_dir).resolve()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", index_dir.name).strip("-._")[:40] or "index"
    return f"sharp-{slug}-{hashlib.sha256(str(index_dir).encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class DenseStore:
    """The Chroma collection holding an index's vectors."""

    index_dir: Path
    url: str | None = None  # a Chroma server; None: the index's chroma/ folder
    collection: str = COLLECTION

    @classmethod
    def for_index(cls, index_dir: Path, url: str | None, manifest: dict | None = None) -> DenseStore:
        """The store of an index: the manifest's collection when it records one, else a new name."""
        recorded = (manifest or {}).get("dense_store") or {}
        if url is None:
            return cls(Path(index_dir))
        return cls(Path(index_dir), check_url(url), recorded.get("collection") or server_collection_name(index_dir))

    @property
    def kind(self) -> str:
        return SERVER if self.url else EMBEDDED

    def record(self) -> dict:
        """What the manifest keeps about this store."""
        return {"kind": SERVER, "collection": self.collection, "url": self.url} if self.url else {"kind": EMBEDDED}

    def where(self) -> str:
        return f"collection {self.collection} of the Chroma server at {self.url}" if self.url else str(self.path)

    @property
    def path(self) -> Path:
        return Path(self.index_dir) / CHROMA_DIR

    # ---- clients ---------------------------------------------------------------------------------
    def client(self, write: bool = False) -> Any:
        """A Chroma client for this store (a read-only embedded store: one on a private copy)."""
        if self.url:
            import chromadb
            from chromadb.config import Settings

            check_server(self.url, self.index_dir)
            parsed = urlparse(self.url)
            try:
                return chromadb.HttpClient(
                    host=parsed.hostname,
                    port=parsed.port or (443 if parsed.scheme == "https" else 80),
                    ssl=parsed.scheme == "https",
                    settings=Settings(anonymized_telemetry=False),
                )
            except Exception as exc:  # chromadb raises ValueError, its own errors and httpx's
                raise IndexServerError(f"cannot use the Chroma server at {self.url}: {exc}") from None
        path = self.path
        if not write and not _writable(path):
            return _persistent(_read_only_copy(path))
        try:
            return _persistent(path)
        except Exception as exc:  # chromadb.errors.InternalError from SQLite, or an OSError
            if not _is_read_only_error(exc):
                raise
            if write:
                raise StorageError(
                    f"cannot write the index's Chroma store at {path}: {exc}. Make the folder writable, "
                    "or build the index elsewhere (--index-dir DIR or --workspace DIR)"
                ) from None
            return _persistent(_read_only_copy(path))

    def open(self, create: bool = False, built_with: dict | None = None) -> Any:
        """The collection (created when ``create``); refused when its metadata contradicts ``built_with``."""
        client = self.client(write=create)
        metadata = {BUILT_WITH[k]: v for k, v in (built_with or {}).items() if k in BUILT_WITH and v is not None}
        if create:
            collection = client.get_or_create_collection(
                self.collection, embedding_function=None, configuration={"hnsw": HNSW}, metadata=metadata or None
            )
        else:
            from chromadb.errors import NotFoundError

            try:
                collection = client.get_collection(self.collection, embedding_function=None)
            except NotFoundError:
                raise IndexMissingError(f"no collection {self.collection} in {self._place()}") from None
        if built_with:
            self.check_built_with(collection, built_with)
        return collection

    def delete(self) -> None:
        """Drop the collection, if any. A damaged embedded store is removed with its folder."""
        from chromadb.errors import NotFoundError

        if not self.url and not self.path.exists():
            return
        try:
            client = self.client(write=True)
        except Exception as exc:
            if self.url or isinstance(exc, StorageError):
                raise
            log.warning("the Chroma store at %s does not open (%s); removing the folder", self.path, exc)
            shutil.rmtree(self.path)
            return
        with contextlib.suppress(NotFoundError):
            client.delete_collection(self.collection)

    def discard(self) -> None:
        """Remove an embedded store's folder, Chroma's cached client for it first (a store Chroma cannot
        read any more, or one a failed write may have left unlike Chroma's memory of it)."""
        if self.url:
            raise ValueError("discard() is for an embedded store; a server collection is dropped with delete()")
        release(self.path)
        if self.path.exists():
            shutil.rmtree(self.path)

    def check_built_with(self, collection: Any, built_with: dict) -> None:
        meta = collection.metadata or {}
        if not any(key in meta for key in BUILT_WITH.values()):
            if self.url:  # a server collection of unknown origin: never trust its vectors
                raise IndexMismatchError(f"{self.where()} does not say what it was built with (no sharp_* metadata)")
            return  # an embedded store written before collections carried metadata
        differ = [
            f"{key}: collection has {meta.get(mkey)!r}, index asks for {built_with[key]!r}"
            for key, mkey in BUILT_WITH.items()
            if key in built_with and built_with[key] is not None and meta.get(mkey) != built_with[key]
        ]
        if differ:
            raise IndexMismatchError(f"{self.where()} was built differently ({'; '.join(differ)})")

    def _place(self) -> str:
        return f"the Chroma server at {self.url}" if self.url else str(self.path)


def is_chroma_error(exc: BaseException) -> bool:
    """Raised by chromadb (its Python layer or its Rust bindings), not by our code or the OS."""
    return type(exc).__module__.split(".")[0] == "chromadb"


def free_bytes(path: Path) -> int | None:
    """Bytes this user may still write on the filesystem holding ``path`` (its nearest existing
    folder); None when that cannot be read."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def disk_full(exc: BaseException, path: Path, chroma: bool = True) -> bool:
    """Whether ``exc`` comes from a full disk (or quota) under ``path``: an OSError ENOSPC or EDQUOT,
    SQLite's "database or disk is full", or (``chroma``: the store is on this machine) an error of
    Chroma's while that disk has less than LOW_SPACE free (Chroma's Rust layer drops the cause), unless
    it says Chroma cannot load the store's files (that is a read, and no write would help)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if any(marker in f"{exc} {exc.__cause__ or ''}".lower() for marker in _FULL_MARKERS):
        return True
    if not chroma or not is_chroma_error(exc) or is_unreadable(exc):  # a failed read is no full disk
        return False
    free = free_bytes(path)
    return free is not None and free < LOW_SPACE


def is_unreadable(exc: BaseException) -> bool:
    """Chroma cannot load a store's files (an id map cut short by a full disk: "Error deserializing
    pickle file"; HNSW files it cannot load)."""
    return is_chroma_error(exc) and any(marker in str(exc).lower() for marker in _UNREADABLE_MARKERS)


def disk_full_error(exc: BaseException, path: Path, then: str) -> DiskFullError:
    """The one-line DiskFullError for ``exc`` (see :func:`disk_full`): the path, the space left, the
    error it came as, and ``then`` (what to run once space is freed)."""
    free = free_bytes(path)
    left = f"{_human(free)} free there" if free is not None else "free space unknown"
    lines = str(exc).strip().splitlines()
    cause = f"{type(exc).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")
    return DiskFullError(f"the disk is full: cannot write {path} ({left}; {cause}). {then}")


def _human(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB"):
        if size < 1024:
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def built_with(manifest: dict) -> dict:
    """The manifest's values that a collection's metadata must repeat."""
    return {key: manifest.get(key) for key in BUILT_WITH}


def _persistent(path: Path) -> Any:
    """chromadb.PersistentClient at ``path``; a failed open leaves no broken client in Chroma's cache
    (it keeps one system per path, even one whose start failed, and would hand it out again)."""
    import chromadb
    from chromadb.config import Settings

    try:
        return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
    except Exception:
        _forget_client(path)
        raise


# ---- read-only embedded stores ---------------------------------------------------------------------
def _writable(path: Path) -> bool:
    if not path.exists():
        return os.access(path.parent, os.W_OK)
    db = path / "chroma.sqlite3"
    return os.access(path, os.W_OK) and (not db.exists() or os.access(db, os.W_OK))


def _is_read_only_error(exc: BaseException) -> bool:
    if isinstance(exc, PermissionError):
        return True
    return any(marker in str(exc).lower() for marker in _READ_ONLY_MARKERS)


def _read_only_copy(path: Path) -> Path:
    """A private writable copy of a read-only Chroma folder (Chroma writes even to read)."""
    path = path.resolve()
    if path in _copies:
        return _copies[path]
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    tmp = Path(tempfile.mkdtemp(prefix="sharp-chroma-ro-"))
    copy = tmp / CHROMA_DIR
    try:
        shutil.copytree(path, copy, copy_function=shutil.copyfile)
        for p in [copy, *copy.rglob("*")]:
            p.chmod(0o700 if p.is_dir() else 0o600)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StorageError(
            f"the Chroma store at {path} is read-only and Chroma must write to open it; copying it to "
            f"{tmp} failed ({exc}). Make the index folder writable, or point TMPDIR at a folder with "
            f"{size / 1e6:.0f} MB free"
        ) from None
    atexit.register(shutil.rmtree, tmp, True)
    log.warning(
        "the Chroma store at %s is read-only and Chroma writes even to read: querying a private copy (%.0f MB) in %s",
        path,
        size / 1e6,
        copy,
    )
    _copies[path] = copy
    return copy


def _forget_client(path: Path) -> None:
    """Drop Chroma's cached client for ``path`` (it would go on serving removed files)."""
    with contextlib.suppress(Exception):
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient._identifier_to_system.pop(str(path), None)


def release(path: Path) -> None:
    """Stop and drop Chroma's cached system for the store at ``path``, so that the next client reads
    the store from disk, as a new process does (after a failed write, Chroma's memory of the store is
    no longer what its files hold)."""
    with contextlib.suppress(Exception):
        from chromadb.api.shared_system_client import SharedSystemClient

        system = SharedSystemClient._identifier_to_system.pop(str(path), None)
        if system is not None:
            system.stop()
