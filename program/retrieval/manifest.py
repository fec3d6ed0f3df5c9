"""The index manifest: what an index folder holds, how it was built, whether it is complete.

Layout of an index folder::

    manifest.json   this record (status "building" while a build runs, "complete" after); from
                    format 2 on it also records every file's size and sha256 (``files``,
                    program/retrieval/integrity.py) and where the vectors live (``dense_store``);
                    from format 3 on, the Chroma files Chroma rewrites on every open are
                    recorded as such (``"kind": "scratch"``), not by a checksum
    chroma/         the Chroma persistent store (collection "passages", cosine space); absent when
                    the vectors live in a Chroma server (program/retrieval/store.py)
    bm25/           the bm25s index and its passage store
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from program.errors import DiskFullError, IndexCorruptError, StorageError
from program.types import Passage

MANIFEST = "manifest.json"
FORMAT_VERSION = 3
CHROMA_DIR = "chroma"
BM25_DIR = "bm25"
COLLECTION = "passages"


def corpus_sha256(passages: Iterable[Passage]) -> str:
    """A hash of the corpus content (id, title, text of every passage), independent of order."""
    h = hashlib.sha256()
    for p in sorted(passages, key=lambda p: p.id):
        for part in (p.id, p.title, p.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x1f")
        h.update(b"\x1e")
    return h.hexdigest()


def read_manifest(index_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of the index at ``index_dir``; None when there is none; IndexCorruptError (naming
    the file) when it is not a JSON object (cut short, overwritten)."""
    path = Path(index_dir) / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexCorruptError(f"{path} is damaged (not valid JSON: {exc})") from None
    except OSError as exc:
        raise IndexCorruptError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if not isinstance(manifest, dict):
        raise IndexCorruptError(f"{path} is damaged (holds a {type(manifest).__name__}, not an object)")
    return manifest


def write_manifest(index_dir: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Write atomically: a reader sees the old manifest or the new one, never half of one."""
    index_dir = Path(index_dir)
    try:
        index_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".manifest.", suffix=".tmp", dir=index_dir)
    except OSError as exc:
        raise StorageError(f"cannot write the index manifest in {index_dir}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, index_dir / MANIFEST)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"the disk is full: cannot write {index_dir / MANIFEST}: {exc.strerror}") from None
        raise StorageError(f"cannot write {index_dir / MANIFEST}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def mismatches(manifest: dict[str, Any], settings: dict[str, Any], corpus_hash: str | None = None) -> list[str]:
    """Human-readable differences between a manifest and the index-time settings asked for."""
    problems = []
    for key, want in settings.items():
        have = manifest.get(key)
        if have == want:
            continue
        if key == "embedding_method" and have is None:
            problems.append(
                f"embedding_method: the index records none (built before embeddings were made independent "
                f"of their batch, with backend {manifest.get('backend')!r}), asked for {want!r}"
            )
        else:
            problems.append(f"{key}: index has {have!r}, asked for {want!r}")
    if corpus_hash is not None and manifest.get("corpus_sha256") != corpus_hash:
        problems.append(
            f"corpus: index built from corpus sha256 {str(manifest.get('corpus_sha256'))[:12]}..., "
            f"this corpus is {corpus_hash[:12]}..."
        )
    return problems
