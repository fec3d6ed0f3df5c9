"""What an index's files must be, and checking that they still are.

When a build completes, the manifest records ``files``: for every file under ``bm25/`` and
``chroma/`` its size and sha256, except for the Chroma files that Chroma itself rewrites when it
opens the store (``sharp retrieve``, ``sharp index`` on a complete index): those would look damaged
after the first use. They are, in chromadb 1.5 (its Rust local segments, the hnswlib fork):

* ``chroma.sqlite3``: written on every open (a row into its ``acquire_write`` table: other bytes,
  and a page more now and then). Recorded as
  ``{"kind": "sqlite", "size": ...}`` with no checksum, checked by its own header instead (a truncated
  database is shorter than the page count its header declares) and, fully, by SQLite's
  ``quick_check``.
* The HNSW files (``header.bin``, ``data_level0.bin``, ``length.bin``, ``link_lists.bin``) of a
  segment folder ``chroma/<uuid>/`` that has no ``index_metadata.pickle``. Chroma writes a segment's
  HNSW files and its pickle only when it persists, after ``sync_threshold`` (1000) new vectors; a
  store that never reached it has no pickle, and then every open initialises the HNSW files anew
  (from memory it does not clear: ``length.bin``, at times ``data_level0.bin`` too, gets other bytes
  each time) and re-inserts every vector from the log in ``chroma.sqlite3``. Those files hold nothing Chroma reads back, so they are
  recorded as ``{"kind": "scratch"}`` and not checked. A segment with a pickle is loaded from its
  files, which Chroma does not write again unless 1000 new vectors arrive (never on a read): every
  one of them is checksummed, the pickle included.

A manifest of format 2 recorded a checksum for scratch files too: :func:`check` reads such a
record as scratch (an HNSW file in a segment whose pickle the manifest does not record), so an
index built by that code does not look damaged after use.

* :func:`check` with ``full=False`` (every open): each file exists and has its recorded size; the
  SQLite header agrees with the file's size. A few ``stat`` calls and one 100-byte read.
* ``full=True`` (``sharp index`` and ``sharp index --verify``): also every checksum and quick_check.

An index built before file records existed (manifest ``format`` 1) has no ``files``: nothing to
compare, so only the folders' existence is checked (by the factory).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import struct
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from program.retrieval.manifest import BM25_DIR, CHROMA_DIR

SQLITE_FILE = "chroma.sqlite3"
HNSW_PICKLE = "index_metadata.pickle"  # a segment's id map: present once Chroma has persisted it
HNSW_FILES = frozenset({"header.bin", "data_level0.bin", "length.bin", "link_lists.bin"})
SQLITE, SCRATCH = "sqlite", "scratch"
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Damage:
    """One file that is not what the manifest says it must be."""

    path: str  # relative to the index folder, e.g. "bm25/passages.jsonl" (or a server collection)
    problem: str
    kind: str | None = None  # the part, when the path does not say it

    @property
    def part(self) -> str:
        """Which part of the index is damaged: 'bm25', 'dense' or 'manifest'."""
        return self.kind or part_of(self.path)

    def __str__(self) -> str:
        return f"{self.path} {self.problem}"


def part_of(rel: str) -> str:
    """The part of the index a relative path belongs to: 'bm25', 'dense' or 'manifest'."""
    return {BM25_DIR: "bm25", CHROMA_DIR: "dense"}.get(rel.split("/", 1)[0], "manifest")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def record(index_dir: str | os.PathLike, parts: tuple[str, ...] = (BM25_DIR, CHROMA_DIR)) -> dict[str, dict]:
    """``{relative path: record}`` for every file of ``parts``: ``{"size", "sha256"}``, or
    ``{"kind": "sqlite", "size"}`` for Chroma's database, or ``{"kind": "scratch"}`` for the HNSW files
    Chroma rewrites on every open (see the module docstring)."""
    index_dir = Path(index_dir)
    out: dict[str, dict] = {}
    for part in parts:
        for path in sorted((index_dir / part).rglob("*")):
            if not path.is_file():
                continue
            rel = path.relative_to(index_dir).as_posix()
            if path.name == SQLITE_FILE:
                out[rel] = {"kind": SQLITE, "size": path.stat().st_size}
            elif _is_scratch(path.relative_to(index_dir), has_pickle=(path.parent / HNSW_PICKLE).is_file()):
                out[rel] = {"kind": SCRATCH}
            else:
                out[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    return out


def _is_scratch(rel: PurePosixPath | Path, has_pickle: bool) -> bool:
    """An HNSW file of a Chroma segment folder (chroma/<uuid>/) with no pickle: rewritten on every open."""
    return not has_pickle and len(rel.parts) == 3 and rel.parts[0] == CHROMA_DIR and rel.name in HNSW_FILES


def checked(files: dict[str, dict]) -> dict[str, dict]:
    """The records :func:`check` compares: scratch files left out, including those a format-2 manifest
    recorded with a checksum (an HNSW file in a segment whose pickle the manifest does not record)."""
    pickled = {PurePosixPath(rel).parent for rel in files if PurePosixPath(rel).name == HNSW_PICKLE}
    return {
        rel: want
        for rel, want in files.items()
        if want.get("kind") != SCRATCH and not _is_scratch(PurePosixPath(rel), PurePosixPath(rel).parent in pickled)
    }


def check(index_dir: str | os.PathLike, files: dict[str, dict], full: bool = False) -> list[Damage]:
    """The recorded files that are missing, of another size or (``full``) other content."""
    index_dir = Path(index_dir)
    damage = []
    for rel, want in sorted(checked(files).items()):
        path = index_dir / rel
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            damage.append(Damage(rel, "is missing"))
            continue
        except OSError as exc:
            damage.append(Damage(rel, f"cannot be read ({exc.strerror or exc})"))
            continue
        if want.get("kind") == SQLITE:
            problem = sqlite_problem(path, full)
        elif size != want["size"]:
            cut = " (truncated)" if size < want["size"] else ""
            problem = f"is {size:,} bytes, the manifest records {want['size']:,}{cut}"
        elif full and sha256_file(path) != want["sha256"]:
            problem = "has the recorded size but other content (sha256 differs from the manifest's)"
        else:
            problem = None
        if problem:
            damage.append(Damage(rel, problem))
    return damage


def sqlite_problem(path: Path, full: bool = False) -> str | None:
    """Why the SQLite database at ``path`` is damaged, or None: its header against its size, and
    (``full``) SQLite's own quick_check on a read-only connection."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        return f"is not a SQLite database ({size:,} bytes; the header is damaged or cut)"
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages, valid_for = (struct.unpack(">I", header[i : i + 4])[0] for i in (24, 28, 92))
    if change_counter == valid_for and size < pages * page_size:
        return f"is {size:,} bytes, its header declares {pages * page_size:,} (truncated)"
    if not full:
        return None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"is unreadable by SQLite ({exc})"
    if rows != [("ok",)]:
        return "fails SQLite's quick_check: " + "; ".join(str(r[0]) for r in rows[:3])
    return None
